package dev.understudy.seed002;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * One forked consumer JVM ({@link SeedConsumer}) and the events it wrote,
 * read as they come.
 */
final class ConsumerRun implements AutoCloseable {
    /** One event: when (epoch ms) and what. */
    record Event(long atMs, String what) {
        @Override
        public String toString() {
            return atMs + " " + what;
        }
    }

    private final Process process;
    private final List<Event> events = new ArrayList<>();
    private final Thread reader;

    private ConsumerRun(Process process) {
        this.process = process;
        this.reader = new Thread(this::read, "seed002-consumer-reader");
        reader.setDaemon(true);
        reader.start();
    }

    /** Starts a consumer of {@code pair} through {@code window}, watching for {@code watch}; its stderr goes to {@code log}. */
    static ConsumerRun start(Pair pair, String registry, String window, Duration watch, Path log) {
        String classPath = String.join(
                File.pathSeparator, pair.classPath(), codeOf(SeedConsumer.class), codeOf(net.bytebuddy.ByteBuddy.class),
                codeOf(net.bytebuddy.agent.ByteBuddyAgent.class));
        List<String> command = List.of(
                System.getProperty("seed002.java", "java"),
                "-javaagent:" + codeOf(net.bytebuddy.agent.ByteBuddyAgent.class),
                "-Xshare:auto",
                "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", classPath,
                SeedConsumer.class.getName(),
                registry, pair.id(), window, Long.toString(watch.toMillis()));
        try {
            log.getParent().toFile().mkdirs();
            Process process = new ProcessBuilder(command)
                    .redirectError(log.toFile())
                    .start();
            return new ConsumerRun(process);
        } catch (IOException e) {
            throw new UncheckedIOException("starting a consumer of " + pair, e);
        }
    }

    private static String codeOf(Class<?> type) {
        try {
            return Path.of(type.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    private void read() {
        try (BufferedReader in = new BufferedReader(
                new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                int space = line.indexOf(' ');
                Event event;
                try {
                    event = new Event(Long.parseLong(line.substring(0, Math.max(space, 0))), line.substring(space + 1));
                } catch (NumberFormatException e) {
                    event = new Event(System.currentTimeMillis(), "output " + line);
                }
                synchronized (events) {
                    events.add(event);
                    events.notifyAll();
                }
            }
        } catch (IOException e) {
            // The process ended; what it wrote is kept.
        }
        synchronized (events) {
            events.add(new Event(System.currentTimeMillis(), "exited"));
            events.notifyAll();
        }
    }

    /** Records something the test did, among the consumer's events (as {@code test <what>}). */
    void note(String what) {
        synchronized (events) {
            events.add(new Event(System.currentTimeMillis(), "test " + what));
            events.notifyAll();
        }
    }

    /** The events so far. */
    List<Event> events() {
        synchronized (events) {
            return List.copyOf(events);
        }
    }

    /** The first event starting with {@code prefix}, if any yet. */
    Optional<Event> first(String prefix) {
        return events().stream().filter(e -> e.what().startsWith(prefix)).findFirst();
    }

    /**
     * Waits for the first event starting with {@code prefix}; fails after
     * {@code within}, or when the consumer exits first, with its events.
     */
    Event await(String prefix, Duration within) {
        long deadline = System.nanoTime() + within.toNanos();
        synchronized (events) {
            while (true) {
                for (Event e : events) {
                    if (e.what().startsWith(prefix)) {
                        return e;
                    }
                }
                boolean exited = events.stream().anyMatch(e -> e.what().equals("exited"));
                long left = deadline - System.nanoTime();
                if (exited || left <= 0) {
                    throw new AssertionError("the consumer never said '" + prefix + "'"
                            + (exited ? " before it exited" : " within " + within.toMillis() + " ms")
                            + "; it said: " + events);
                }
                try {
                    events.wait(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new AssertionError("interrupted", e);
                }
            }
        }
    }

    /** Lets a paused consumer go on. */
    void release() {
        try {
            OutputStream in = process.getOutputStream();
            in.write("release\n".getBytes(StandardCharsets.UTF_8));
            in.flush();
        } catch (IOException e) {
            throw new UncheckedIOException("releasing the consumer", e);
        }
    }

    @Override
    public void close() {
        process.destroyForcibly();
        try {
            process.waitFor(10, TimeUnit.SECONDS);
            reader.join(TimeUnit.SECONDS.toMillis(10));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
