package dev.understudy.junit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** A binary packaged into the jar is found and made runnable. */
class UnderstudyBinaryTest {
    @Test
    void aPackagedBinaryIsCopiedOutExecutable(@TempDir Path jar) throws Exception {
        byte[] script = "#!/bin/sh\necho packaged\n".getBytes();
        Path resource = jar.resolve(UnderstudyBinary.resource());
        Files.createDirectories(resource.getParent());
        Files.write(resource, script);
        try (URLClassLoader loader = new URLClassLoader(new URL[] {jar.toUri().toURL()}, null)) {
            Path copied = UnderstudyBinary.embedded(loader);
            assertTrue(Files.isExecutable(copied), copied + " is not executable");
            assertArrayEquals(script, Files.readAllBytes(copied));
            Process run = new ProcessBuilder(copied.toString()).start();
            assertEquals("packaged", new String(run.getInputStream().readAllBytes()).trim());
            assertEquals(0, run.waitFor());
        }
    }

    @Test
    void noPackagedBinaryIsNull(@TempDir Path empty) throws Exception {
        try (URLClassLoader loader = new URLClassLoader(new URL[] {empty.toUri().toURL()}, null)) {
            assertNull(UnderstudyBinary.embedded(loader));
        }
    }
}
