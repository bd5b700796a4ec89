package dev.understudy.junit;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Finds the {@code understudy} binary a test runs. In order:
 *
 * <ol>
 *   <li>the system property {@code understudy.bin};
 *   <li>the environment variable {@code UNDERSTUDY_BIN};
 *   <li>a binary packaged into this jar for the running platform
 *       ({@code dev/understudy/junit/bin/linux-x86_64/understudy}), copied
 *       once per JVM to a temporary file;
 *   <li>{@code understudy} on the {@code PATH}.
 * </ol>
 */
public final class UnderstudyBinary {
    /** The system property naming the binary. */
    public static final String PROPERTY = "understudy.bin";
    /** The environment variable naming the binary. */
    public static final String ENV = "UNDERSTUDY_BIN";

    private static Path extracted;

    private UnderstudyBinary() {}

    /** The binary to run; fails naming every place it looked. */
    public static synchronized Path locate() {
        List<String> tried = new ArrayList<>();
        String named = System.getProperty(PROPERTY);
        if (named != null && !named.isBlank()) {
            return executable(Path.of(named), "the system property " + PROPERTY);
        }
        tried.add("the system property " + PROPERTY + " (unset)");
        named = System.getenv(ENV);
        if (named != null && !named.isBlank()) {
            return executable(Path.of(named), "the environment variable " + ENV);
        }
        tried.add("the environment variable " + ENV + " (unset)");
        if (extracted == null || !Files.isExecutable(extracted)) {
            extracted = embedded(UnderstudyBinary.class.getClassLoader());
        }
        if (extracted != null) {
            return extracted;
        }
        tried.add("the resource " + resource() + " (not in this jar)");
        String path = System.getenv("PATH");
        if (path != null) {
            for (String dir : path.split(java.io.File.pathSeparator)) {
                Path candidate = Path.of(dir.isEmpty() ? "." : dir, "understudy");
                if (Files.isRegularFile(candidate) && Files.isExecutable(candidate)) {
                    return candidate;
                }
            }
        }
        tried.add("understudy on the PATH (none)");
        throw new IllegalStateException(
                "no understudy binary found; looked at " + String.join(", ", tried)
                        + ". Build one (cargo build --release --bin understudy) and name it in "
                        + ENV + " or -D" + PROPERTY + ", or install understudy-junit with"
                        + " -Dunderstudy.embed=DIR to package DIR/understudy into the jar");
    }

    /** The resource name of a binary packaged for the running platform. */
    public static String resource() {
        return "dev/understudy/junit/bin/" + platform() + "/understudy";
    }

    /** The running platform as the packaged binaries are named: {@code linux-x86_64}. */
    public static String platform() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
        String osName = os.contains("linux") ? "linux" : os.contains("mac") ? "macos" : os;
        String archName = switch (arch) {
            case "amd64", "x86_64" -> "x86_64";
            case "aarch64", "arm64" -> "aarch64";
            default -> arch;
        };
        return osName + "-" + archName;
    }

    /**
     * The binary packaged as a resource of {@code loader}, copied to an
     * executable temporary file, or null if none is packaged.
     */
    static Path embedded(ClassLoader loader) {
        try (InputStream in = loader.getResourceAsStream(resource())) {
            if (in == null) {
                return null;
            }
            Path dir = Files.createTempDirectory("understudy-bin");
            Path file = dir.resolve("understudy");
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            if (!file.toFile().setExecutable(true, true)) {
                throw new IOException("cannot make " + file + " executable");
            }
            file.toFile().deleteOnExit();
            dir.toFile().deleteOnExit();
            return file;
        } catch (IOException e) {
            throw new UncheckedIOException("copying the packaged understudy binary", e);
        }
    }

    private static Path executable(Path path, String source) {
        if (!Files.isRegularFile(path) || !Files.isExecutable(path)) {
            throw new IllegalStateException(
                    source + " names " + path + ", which is not an executable file");
        }
        return path.toAbsolutePath();
    }
}
