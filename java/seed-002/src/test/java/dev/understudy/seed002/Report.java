package dev.understudy.seed002;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/** The runs as Markdown: a table per window, then each run's event order. */
final class Report {
    private Report() {}

    static String table(List<Outcome> outcomes, Duration watch, Duration within) {
        StringBuilder out = new StringBuilder();
        Set<String> windows = new LinkedHashSet<>();
        outcomes.forEach(o -> windows.add(o.window()));
        for (String window : windows) {
            out.append("\n### Window: ").append(window).append("\n\n")
                    .append("| pair | runs | no provider for the whole ").append(watch.toSeconds())
                    .append(" s | a call served within ").append(within.toSeconds())
                    .append(" s of the release | first call served after the release (median) | push acknowledged before the listener's subscription |\n")
                    .append("|---|---:|---:|---:|---:|---:|\n");
            for (Pair pair : Pair.values()) {
                List<Outcome> runs = outcomes.stream()
                        .filter(o -> o.window().equals(window) && o.pair() == pair)
                        .toList();
                if (runs.isEmpty()) {
                    continue;
                }
                long lost = runs.stream().filter(Outcome::lost).count();
                long served = runs.stream()
                        .filter(o -> o.recoveredAfterMs().filter(ms -> ms <= within.toMillis()).isPresent())
                        .count();
                long ordered = runs.stream().filter(Outcome::pushAcknowledgedBeforeSubscription).count();
                List<Long> after = new ArrayList<>(runs.stream()
                        .flatMap(o -> o.recoveredAfterMs().stream())
                        .sorted()
                        .toList());
                String median = after.isEmpty() ? "never" : after.get(after.size() / 2) + " ms";
                out.append("| ").append(pair).append(pair.affected ? " (affected)" : "")
                        .append(" | ").append(runs.size())
                        .append(" | ").append(lost).append('/').append(runs.size())
                        .append(" | ").append(served).append('/').append(runs.size())
                        .append(" | ").append(median)
                        .append(" | ").append(ordered).append('/').append(runs.size())
                        .append(" |\n");
            }
        }
        return out.toString();
    }

    static String render(List<Outcome> outcomes, int runs, Duration watch, Duration within) {
        StringBuilder out = new StringBuilder("# Seed 002 on demand\n\n")
                .append(java.time.LocalDate.now()).append(", Java ").append(System.getProperty("java.version"))
                .append(", provider Dubbo ").append(org.apache.dubbo.common.Version.getVersion())
                .append(". ")
                .append(runs).append(" run(s) per pair and window, each consumer watched for ")
                .append(watch.toSeconds()).append(" s after its release (a call every 200 ms).\n")
                .append(table(outcomes, watch, within))
                .append("\n## Each run's events, as understudy and the consumer saw them\n");
        for (Outcome o : outcomes) {
            out.append("\n### ").append(o.pair()).append(", ").append(o.window()).append(" window, run ")
                    .append(o.run()).append(": ")
                    .append(o.lost() ? "no provider for the whole watch"
                            : o.recoveredAfterMs().map(ms -> "first call served " + ms + " ms after the release")
                                    .orElse("no call made"))
                    .append("\n\n```\n");
            o.order().forEach(line -> out.append(line).append('\n'));
            if (!o.lastFailure().isEmpty()) {
                out.append("last failed call: ").append(o.lastFailure()).append('\n');
            }
            out.append("```\n");
        }
        return out.toString();
    }
}
