package dev.understudy.junit;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * One understudy process: started with a clean environment (no
 * {@code UNDERSTUDY_*} variable of the test's is passed on), its stdout kept
 * line by line, its stderr in a file, stopped by SIGTERM and then SIGKILL, and
 * stopped when the JVM exits if the test did not stop it.
 */
final class Child {
    private final List<String> command;
    private final Process process;
    private final Path stderr;
    private final List<String> stdout = new ArrayList<>();
    private final Thread hook;

    Child(List<String> command) {
        this.command = List.copyOf(command);
        try {
            stderr = Files.createTempFile("understudy", ".log");
            stderr.toFile().deleteOnExit();
            ProcessBuilder builder = new ProcessBuilder(command)
                    .redirectInput(ProcessBuilder.Redirect.PIPE)
                    .redirectError(stderr.toFile());
            Map<String, String> env = builder.environment();
            env.keySet().removeIf(k -> k.startsWith("UNDERSTUDY_"));
            process = builder.start();
        } catch (IOException e) {
            throw new UncheckedIOException("starting " + String.join(" ", command), e);
        }
        Thread reader = new Thread(this::readStdout, "understudy-stdout-" + process.pid());
        reader.setDaemon(true);
        reader.start();
        hook = new Thread(process::destroyForcibly, "understudy-stop-" + process.pid());
        Runtime.getRuntime().addShutdownHook(hook);
    }

    private void readStdout() {
        try (BufferedReader lines = new BufferedReader(
                new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = lines.readLine()) != null) {
                synchronized (stdout) {
                    stdout.add(line);
                    stdout.notifyAll();
                }
            }
        } catch (IOException ignored) {
            // The process is gone; what it printed is kept.
        }
    }

    /** The lines printed so far. */
    List<String> stdout() {
        synchronized (stdout) {
            return List.copyOf(stdout);
        }
    }

    /** Waits until a printed line starts with {@code prefix}; null when the process exits first or time runs out. */
    String awaitLine(String prefix, long deadlineNanos) throws InterruptedException {
        synchronized (stdout) {
            while (true) {
                for (String line : stdout) {
                    if (line.startsWith(prefix)) {
                        return line;
                    }
                }
                long left = deadlineNanos - System.nanoTime();
                if (left <= 0 || !process.isAlive()) {
                    return null;
                }
                stdout.wait(Math.max(1, Math.min(100, TimeUnit.NANOSECONDS.toMillis(left))));
            }
        }
    }

    /** What the process wrote to stderr so far. */
    String log() {
        try {
            return Files.readString(stderr, StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "(its log cannot be read: " + e + ")";
        }
    }

    boolean alive() {
        return process.isAlive();
    }

    long pid() {
        return process.pid();
    }

    List<String> command() {
        return command;
    }

    /** A description for a failure: the command, its exit, stdout and the end of its log. */
    String describe() {
        String exit = process.isAlive() ? "running" : "exited with " + process.exitValue();
        List<String> log = log().lines().toList();
        List<String> tail = log.subList(Math.max(0, log.size() - 60), log.size());
        return String.join(" ", command) + " (" + exit + ")\nstdout:\n"
                + String.join("\n", stdout()) + "\nstderr (last 60 lines):\n"
                + String.join("\n", tail);
    }

    /** SIGKILL, as a crash. */
    void kill() {
        process.destroyForcibly();
        try {
            process.waitFor(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** SIGTERM, then SIGKILL after {@code grace}; the exit code. */
    int stop(Duration grace) {
        process.destroy();
        try {
            if (!process.waitFor(grace.toMillis(), TimeUnit.MILLISECONDS)) {
                process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            process.destroyForcibly();
        }
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException shuttingDown) {
            // The hook runs anyway.
        }
        return process.isAlive() ? -1 : process.exitValue();
    }
}
