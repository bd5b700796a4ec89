package dev.understudy.seed002;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * A Dubbo and nacos-client pair a consumer runs with; each has a service
 * of its own (its id is the Greeter's version), so the pairs of a run go
 * side by side without meeting.
 */
enum Pair {
    DUBBO_333_NACOS_243("3.3.3", "2.4.3", true),
    DUBBO_336_NACOS_243("3.3.6", "2.4.3", false),
    DUBBO_333_NACOS_251("3.3.3", "2.5.1", false),
    DUBBO_336_NACOS_251("3.3.6", "2.5.1", false);

    final String dubbo;
    final String nacos;
    /** Whether the seed's bug loses its subscription in the window. */
    final boolean affected;

    Pair(String dubbo, String nacos, boolean affected) {
        this.dubbo = dubbo;
        this.nacos = nacos;
        this.affected = affected;
    }

    /** The pair's module under pairs/, and its service version. */
    String id() {
        return "dubbo-" + dubbo + "-nacos-" + nacos;
    }

    /** The Nacos service name its consumer subscribes to. */
    String service() {
        return SeedConsumer.serviceName(id());
    }

    /** Its class path, as pairs/ID wrote it. */
    String classPath() {
        Path file = Path.of(System.getProperty("seed002.pairs", "pairs"), id(), "target", "classpath.txt");
        try {
            return Files.readString(file).trim();
        } catch (IOException e) {
            throw new UncheckedIOException("no class path for " + id() + " (run mvn verify from java/)", e);
        }
    }

    @Override
    public String toString() {
        return "Dubbo " + dubbo + " + nacos-client " + nacos;
    }
}
