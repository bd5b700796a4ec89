package dev.understudy.nacos;

import com.alibaba.nacos.common.utils.JacksonUtils;
import com.fasterxml.jackson.databind.JsonNode;
import dev.understudy.junit.ClusterNode;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Which node of a cluster holds a client's gRPC connection. */
final class Connections {
    private Connections() {}

    /** The gRPC connection ids a node holds (its client list without HTTP registrations). */
    static List<String> on(ClusterNode node) {
        Support.Answer answer = Support.http("GET", node.url(), "/nacos/v3/admin/ns/client/list", Map.of());
        if (answer.status() != 200) {
            throw new IllegalStateException(node + ": client list answered " + answer.status() + " " + answer.body());
        }
        JsonNode data = JacksonUtils.toObj(answer.body()).get("data");
        List<String> ids = new ArrayList<>();
        data.forEach(id -> {
            if (!id.asText().contains("#")) {
                ids.add(id.asText());
            }
        });
        return ids;
    }

    /** The one live node holding connections, once exactly one does. */
    static ClusterNode theOneConnected(UnderstudyExtension cluster) {
        return Support.await("exactly one node holding a connection", Duration.ofSeconds(10), () -> {
            List<ClusterNode> holding = cluster.nodes().stream()
                    .filter(n -> !n.killed() && !on(n).isEmpty())
                    .toList();
            return holding.size() == 1 ? holding.get(0) : null;
        }, n -> n != null);
    }

    /**
     * The live node holding the connection that owns instance
     * {@code ip:port} of {@code service}, once one does (the owner, as any
     * node's publisher list names it, is a connection of a live node).
     */
    static ClusterNode holderOf(UnderstudyExtension cluster, String service, String ip, int port) {
        return Support.await(ip + ":" + port + " owned by a connection of a live node", Duration.ofSeconds(20), () -> {
            ClusterNode asked = cluster.nodes().stream().filter(n -> !n.killed()).findFirst().orElseThrow();
            Support.Answer answer = Support.http("GET", asked.url(),
                    "/nacos/v3/admin/ns/client/service/publisher/list",
                    Map.of("serviceName", service, "ip", ip, "port", String.valueOf(port)));
            JsonNode data = JacksonUtils.toObj(answer.body()).get("data");
            if (data == null || data.size() != 1) {
                return null;
            }
            String owner = data.get(0).get("clientId").asText();
            return cluster.nodes().stream()
                    .filter(n -> !n.killed() && on(n).contains(owner))
                    .findFirst()
                    .orElse(null);
        }, n -> n != null);
    }

    /** A live node other than {@code not}. */
    static ClusterNode another(UnderstudyExtension cluster, ClusterNode not) {
        return cluster.nodes().stream()
                .filter(n -> !n.killed() && n.id() != not.id())
                .findFirst()
                .orElseThrow();
    }
}
