package dev.understudy.dubbo;

import static dev.understudy.dubbo.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import com.alibaba.nacos.common.utils.JacksonUtils;
import com.fasterxml.jackson.databind.JsonNode;
import dev.understudy.dubbo.Consumer.Discovery;
import dev.understudy.dubbo.Providers.Forked;
import dev.understudy.junit.ClusterNode;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Dubbo on a 3-node cluster (DCs hz=2, sh=1), given every node in its
 * registry address (the first as the address, the others as {@code backup}):
 * the node the provider's naming client is connected to is killed, and the
 * calls go on.
 */
class ClusterTest {
    static final String APP = "greeter-cluster";

    /** A cluster per test: the test kills a node of it. */
    @RegisterExtension
    final UnderstudyExtension cluster = UnderstudyExtension.cluster("hz=2", "sh=1");

    private final Providers providers = new Providers();
    private final List<Consumer> consumers = new ArrayList<>();

    @AfterEach
    void close() throws Exception {
        for (Consumer consumer : consumers) {
            consumer.close();
        }
        providers.close();
    }

    /** {@code nacos://node1?backup=node2,node3&register-mode=instance}. */
    String registry() {
        List<ClusterNode> nodes = cluster.nodes();
        return "nacos://" + nodes.get(0).serverAddr() + "?backup="
                + nodes.subList(1, nodes.size()).stream().map(ClusterNode::serverAddr).collect(Collectors.joining(","))
                + "&register-mode=" + Discovery.APPLICATION.registerMode;
    }

    Consumer consumer() {
        Consumer consumer = new Consumer(registry(), "consumer", Discovery.APPLICATION);
        consumers.add(consumer);
        return consumer;
    }

    @Test
    void theProvidersNodeKilledCallsGoOn() throws Exception {
        Forked provider = providers.start(registry(), APP, "p1", "hz", "local");
        Consumer consumer = consumer();
        assertEquals("p1", await("a call answered", Duration.ofSeconds(30), consumer::call, w -> w != null),
                "the provider that answered");
        ClusterNode holder = holderOf(APP, provider.port());

        cluster.kill(holder.id());

        // The provider's client moves to a live node and its instance with it.
        ClusterNode moved = holderOf(APP, provider.port());
        assertNotEquals(holder.id(), moved.id(), "the node holding the provider's instance after the kill");
        for (ClusterNode node : cluster.nodes()) {
            if (!node.killed()) {
                await(node + " lists the provider", Duration.ofSeconds(20),
                        () -> Support.addresses(node.url(), APP), List.of(provider.address())::equals);
            }
        }
        // The consumer that was calling goes on (20 calls in a row answered),
        // and one that starts now finds the provider through the live nodes.
        await("20 calls in a row answered by p1", Duration.ofSeconds(30),
                () -> consumer.tally(20), Map.of("p1", 20)::equals);
        Consumer late = consumer();
        assertEquals("p1", await("a call of a consumer started after the kill answered", Duration.ofSeconds(30),
                late::call, w -> w != null), "the provider that answered the late consumer");
    }

    /**
     * The live node holding the gRPC connection that owns instance
     * 127.0.0.1:{@code port} of {@code service}, once one does: the owner as
     * a live node's publisher list names it, among the connections of a live
     * node's client list.
     */
    ClusterNode holderOf(String service, int port) {
        return await("127.0.0.1:" + port + " owned by a connection of a live node", Duration.ofSeconds(20), () -> {
            ClusterNode asked = cluster.nodes().stream().filter(n -> !n.killed()).findFirst().orElseThrow();
            Support.Answer answer = Support.get(asked.url(), "/nacos/v3/admin/ns/client/service/publisher/list",
                    Map.of("serviceName", service, "ip", "127.0.0.1", "port", String.valueOf(port)));
            JsonNode data = JacksonUtils.toObj(answer.body()).get("data");
            if (data == null || data.size() != 1) {
                return null;
            }
            String owner = data.get(0).get("clientId").asText();
            return cluster.nodes().stream()
                    .filter(n -> !n.killed() && connections(n).contains(owner))
                    .findFirst()
                    .orElse(null);
        }, n -> n != null);
    }

    /** The client ids a node holds: GET /nacos/v3/admin/ns/client/list. */
    static List<String> connections(ClusterNode node) {
        Support.Answer answer = Support.get(node.url(), "/nacos/v3/admin/ns/client/list", Map.of());
        if (answer.status() != 200) {
            throw new IllegalStateException(node + ": client list answered " + answer.status() + " " + answer.body());
        }
        List<String> ids = new ArrayList<>();
        JacksonUtils.toObj(answer.body()).get("data").forEach(id -> ids.add(id.asText()));
        return ids;
    }
}
