package dev.understudy.dubbo;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** The provider JVMs a test forks ({@link Provider}), ended after it if it left them running. */
final class Providers implements AutoCloseable {
    /** A forked provider: its name (as its answers give it), port and process. */
    record Forked(String name, int port, Process process) {
        String address() {
            return "127.0.0.1:" + port;
        }

        /** SIGTERM: Dubbo's shutdown hook unregisters the provider and the JVM exits. */
        void stopGracefully() throws InterruptedException {
            process.destroy();
            if (!process.waitFor(30, TimeUnit.SECONDS)) {
                throw new AssertionError(name + " did not exit within 30 s of SIGTERM");
            }
        }

        /** SIGKILL: nothing of the provider's says goodbye. */
        void kill() throws InterruptedException {
            process.destroyForcibly();
            if (!process.waitFor(10, TimeUnit.SECONDS)) {
                throw new AssertionError(name + " did not die within 10 s of SIGKILL");
            }
        }
    }

    private final List<Forked> forked = new ArrayList<>();

    /**
     * Forks a provider of {@code application} named {@code name} in
     * {@code zone}, registered at {@code registry} (a Dubbo registry
     * address), and waits until it has exported its service.
     */
    Forked start(String registry, String application, String name, String zone, String metadataType)
            throws IOException, InterruptedException {
        Support.requireLoopbackOnly();
        int port = Support.freePort();
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        List<String> command = List.of(java.toString(), "-cp", System.getProperty("java.class.path"),
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", Provider.class.getName(),
                registry, application, name, zone, String.valueOf(port), metadataType);
        Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
        Forked provider = new Forked(name, port, process);
        forked.add(provider);
        BufferedReader out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
        StringBuilder printed = new StringBuilder();
        String line;
        while ((line = out.readLine()) != null) {
            if (line.equals("exported")) {
                Thread drain = new Thread(() -> {
                    try {
                        out.transferTo(Writer.nullWriter());
                    } catch (IOException ignored) {
                        // It was killed.
                    }
                }, "drain " + name);
                drain.setDaemon(true);
                drain.start();
                return provider;
            }
            printed.append(line).append('\n');
        }
        throw new AssertionError("provider " + name + " exited (" + process.waitFor() + ") before exporting:\n" + printed);
    }

    @Override
    public void close() throws InterruptedException {
        for (Forked provider : forked) {
            provider.process().destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
    }
}
