package dev.understudy.nacos;

import static dev.understudy.nacos.NamingSuite.addresses;
import static dev.understudy.nacos.NamingSuite.uncheck;
import static dev.understudy.nacos.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import com.alibaba.nacos.api.naming.NamingFactory;
import com.alibaba.nacos.api.naming.NamingService;
import com.alibaba.nacos.api.naming.listener.NamingEvent;
import dev.understudy.junit.ClusterNode;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Naming on a 3-node cluster (DCs hz=2, sh=1) given to the client as all
 * three addresses: the node the client is connected to is killed under it.
 */
class ClusterNamingTest {
    static final String SVC = "java.cluster.orders";

    /** A cluster per test: the test kills a node of it. */
    @RegisterExtension
    final UnderstudyExtension cluster = UnderstudyExtension.cluster("hz=2", "sh=1");

    private final List<NamingService> clients = new ArrayList<>();

    NamingService client(String serverAddr) throws Exception {
        NamingService naming = NamingFactory.createNamingService(serverAddr);
        clients.add(naming);
        return naming;
    }

    @AfterEach
    void closeClients() throws Exception {
        for (NamingService naming : clients) {
            naming.shutDown();
        }
    }

    @Test
    void theConnectedNodeKilledTheClientMovesAndNoSubscriberEndsWrong() throws Exception {
        NamingService provider = client(cluster.serverAddr());
        provider.registerInstance(SVC, "10.1.0.1", 8080);
        ClusterNode connected = Connections.theOneConnected(cluster);
        assertEquals(connected, Connections.holderOf(cluster, SVC, "10.1.0.1", 8080));
        ClusterNode survivor = Connections.another(cluster, connected);

        // A second provider and a subscriber pinned to a node that stays,
        // and a subscriber given the whole cluster.
        client(survivor.serverAddr()).registerInstance(SVC, "10.1.0.2", 8080);
        List<List<String>> pinned = new CopyOnWriteArrayList<>();
        client(survivor.serverAddr()).subscribe(SVC,
                e -> pinned.add(addresses(((NamingEvent) e).getInstances())));
        List<List<String>> roaming = new CopyOnWriteArrayList<>();
        client(cluster.serverAddr()).subscribe(SVC,
                e -> roaming.add(addresses(((NamingEvent) e).getInstances())));
        List<String> both = List.of("10.1.0.1:8080", "10.1.0.2:8080");
        await("the pinned subscriber sees both providers", Duration.ofSeconds(10), () -> last(pinned), both::equals);
        int seenBeforeKill = pinned.size();

        cluster.kill(connected.id());

        // The provider's client reconnects to a node that lives.
        ClusterNode moved = Connections.holderOf(cluster, SVC, "10.1.0.1", 8080);
        assertNotEquals(connected.id(), moved.id());
        for (ClusterNode node : cluster.nodes()) {
            if (node.killed()) {
                continue;
            }
            NamingService reader = client(node.serverAddr());
            await(node + " lists both providers", Duration.ofSeconds(20),
                    () -> uncheck(() -> addresses(reader.getAllInstances(SVC, false))), both::equals);
        }
        await("the roaming subscriber ends with both providers", Duration.ofSeconds(20),
                () -> last(roaming), both::equals);
        // The moved instance never left the pinned subscriber's list: it
        // changed owners in place.
        for (List<String> seen : pinned.subList(seenBeforeKill, pinned.size())) {
            assertEquals(both, seen, "the pinned subscriber saw " + pinned);
        }
        assertEquals(both, last(pinned));
    }

    static List<String> last(List<List<String>> events) {
        return events.isEmpty() ? null : events.get(events.size() - 1);
    }
}
