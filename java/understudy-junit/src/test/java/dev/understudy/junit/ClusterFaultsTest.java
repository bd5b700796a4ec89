package dev.understudy.junit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.function.Predicate;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The cluster mode's fault control, by use: partition and heal, links, pause and resume. */
class ClusterFaultsTest {
    @RegisterExtension
    final UnderstudyExtension cluster = UnderstudyExtension.cluster("hz=2", "sh=1");

    private final HttpClient http = HttpClient.newHttpClient();

    HttpResponse<String> send(String method, ClusterNode node, String path) {
        try {
            return http.send(HttpRequest.newBuilder(URI.create(node.url() + path))
                            .method(method, HttpRequest.BodyPublishers.noBody())
                            .timeout(Duration.ofSeconds(10)).build(),
                    HttpResponse.BodyHandlers.ofString());
        } catch (Exception e) {
            throw new IllegalStateException(method + " " + path + " on " + node, e);
        }
    }

    static <T> T await(String what, Supplier<T> check, Predicate<T> done) {
        return Await.until(what, Duration.ofSeconds(15), check, done);
    }

    String list(ClusterNode node) {
        return send("GET", node, "/nacos/v1/ns/instance/list?serviceName=faults").body();
    }

    String faults() {
        return send("GET", cluster.node(1), "/understudy/v1/chaos").body();
    }

    @Test
    void aPartitionKeepsAWriteFromTheCutDcUntilItHeals() {
        assertEquals(List.of("hz", "hz", "sh"), cluster.nodes().stream().map(ClusterNode::dc).toList());
        ClusterNode hz = cluster.node(1);
        ClusterNode sh = cluster.inDc("sh").get(0);
        cluster.partition("hz", "sh");
        assertTrue(faults().contains("\"cut\":true"), faults());
        // hz keeps (or elects) a leader: the write is taken there.
        await("a registration taken by hz", () -> send("POST", hz,
                "/nacos/v1/ns/instance?serviceName=faults&ip=10.9.0.1&port=80&ephemeral=false").statusCode(),
                status -> status == 200);
        assertTrue(list(hz).contains("10.9.0.1"), list(hz));
        assertTrue(!list(sh).contains("10.9.0.1"), "sh saw a write across the cut: " + list(sh));
        cluster.heal();
        await("sh sees the write once healed", () -> list(sh), body -> body.contains("10.9.0.1"));
    }

    @Test
    void linksAndPausesAreSetAndUndone() {
        cluster.link("hz-sh=200ms");
        assertTrue(faults().contains("\"latencyMs\":200"), faults());
        cluster.link("hz-sh=perfect");
        assertTrue(!faults().contains("\"latencyMs\":200"), faults());
        cluster.pause(3);
        assertTrue(faults().contains("\"paused\":[3]"), faults());
        cluster.resume(3);
        assertTrue(faults().contains("\"paused\":[]"), faults());
    }
}
