package dev.understudy.seed002;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * What one consumer run came to: when the window closed, what the
 * consumer's calls did after it, and the events as understudy and as the
 * consumer saw them.
 */
record Outcome(
        Pair pair,
        String window,
        int run,
        long releasedAtMs,
        List<ConsumerRun.Event> consumer,
        JsonNode server,
        Set<String> others) {

    /**
     * Marks the events of connections that subscribed before the consumer
     * started: the provider's own (a Dubbo provider's subscription to its
     * configurators goes to the service's providers name).
     */
    private static final String OTHER = " (not the consumer)";

    /** Calls made after the release. */
    List<ConsumerRun.Event> calls() {
        return consumer.stream().filter(e -> e.what().startsWith("call ")).toList();
    }

    /** Whether every call of the whole watch failed with Dubbo's "No provider available". */
    boolean lost() {
        return !calls().isEmpty()
                && calls().stream().allMatch(e -> e.what().startsWith("call failed No provider available"));
    }

    /** From the release to the first successful call, if any. */
    Optional<Long> recoveredAfterMs() {
        return calls().stream()
                .filter(e -> e.what().equals("call ok"))
                .findFirst()
                .map(e -> Math.max(0, e.atMs() - releasedAtMs));
    }

    /** The last failed call's message, if any. */
    String lastFailure() {
        return calls().stream()
                .filter(e -> e.what().startsWith("call failed"))
                .reduce((a, b) -> b)
                .map(e -> e.what().substring("call failed ".length()))
                .orElse("");
    }

    /**
     * Whether understudy had the enabling push acknowledged by the
     * consumer's connection before the consumer subscribed its listener
     * (the seed's order).
     */
    boolean pushAcknowledgedBeforeSubscription() {
        Optional<Long> acked = serverEvents().stream()
                .filter(e -> e.what().startsWith("pushAcked") && !e.what().endsWith(OTHER))
                .map(ConsumerRun.Event::atMs)
                .findFirst();
        Optional<Long> subscribed = consumer.stream()
                .filter(e -> e.what().equals("subscribe " + pair.service()))
                .map(ConsumerRun.Event::atMs)
                .findFirst();
        return acked.isPresent() && subscribed.isPresent() && acked.get() <= subscribed.get();
    }

    private List<ConsumerRun.Event> serverEvents() {
        List<ConsumerRun.Event> events = new ArrayList<>();
        for (JsonNode e : server) {
            String what = e.path("event").asText();
            if (e.has("revision")) {
                what += " r" + e.path("revision").asLong();
            }
            if (e.has("detail")) {
                what += " (" + e.path("detail").asText() + ")";
            }
            if (!e.path("service").asText().endsWith("@@" + pair.service())) {
                what += " [" + e.path("service").asText() + "]";
            }
            // Connection ids are <ms>_<ip>_<port>: the port tells them apart.
            String connection = e.path("connectionId").asText();
            what += " @" + connection.substring(connection.lastIndexOf('_') + 1);
            if (others.contains(connection)) {
                what += OTHER;
            }
            events.add(new ConsumerRun.Event(e.path("atMs").asLong(), what));
        }
        return events;
    }

    /**
     * Both sides' events in time order (calls left out), each line
     * {@code +ms side event} from the first.
     */
    List<String> order() {
        record Line(long atMs, int side, String text) {}
        List<Line> lines = new ArrayList<>();
        for (ConsumerRun.Event e : serverEvents()) {
            lines.add(new Line(e.atMs(), 0, "understudy " + e.what()));
        }
        for (ConsumerRun.Event e : consumer) {
            if (e.what().startsWith("test ")) {
                lines.add(new Line(e.atMs(), 1, "test       " + e.what().substring("test ".length())));
            } else if (!e.what().startsWith("call ")) {
                lines.add(new Line(e.atMs(), 2, "consumer   " + e.what()));
            }
        }
        lines.sort(Comparator.comparingLong(Line::atMs).thenComparingInt(Line::side));
        long start = lines.isEmpty() ? 0 : lines.get(0).atMs();
        return lines.stream().map(l -> String.format("+%5d ms %s", l.atMs() - start, l.text())).toList();
    }
}
