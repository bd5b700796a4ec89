package dev.understudy.nacos;

import static dev.understudy.nacos.NamingSuite.uncheck;
import static dev.understudy.nacos.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.alibaba.nacos.api.config.ConfigFactory;
import com.alibaba.nacos.api.config.ConfigService;
import com.alibaba.nacos.api.config.listener.AbstractListener;
import dev.understudy.junit.ClusterNode;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Config on a 3-node cluster (DCs hz=2, sh=1) given to the client as all
 * three addresses: the node the client is connected to is killed under it.
 */
class ClusterConfigTest {
    static final String ID = "java.cluster.settings";
    static final String GROUP = "DEFAULT_GROUP";

    /** A cluster per test: the test kills a node of it. */
    @RegisterExtension
    final UnderstudyExtension cluster = UnderstudyExtension.cluster("hz=2", "sh=1");

    @Test
    void theConnectedNodeKilledTheClientMovesAndKeepsListening() throws Exception {
        ConfigService config = ConfigFactory.createConfigService(cluster.serverAddr());
        try {
            List<String> heard = new CopyOnWriteArrayList<>();
            config.addListener(ID, GROUP, new AbstractListener() {
                @Override
                public void receiveConfigInfo(String content) {
                    heard.add(String.valueOf(content));
                }
            });
            assertTrue(config.publishConfig(ID, GROUP, "before"));
            await("the listener hears the first publish", Duration.ofSeconds(5),
                    () -> List.copyOf(heard), l -> l.contains("before"));
            ClusterNode connected = Connections.theOneConnected(cluster);

            cluster.kill(connected.id());

            // A publish through a node that lives reaches the listener once
            // the client has moved; the client reads and writes there too.
            ClusterNode survivor = Connections.another(cluster, connected);
            // Until the survivors have elected a leader (when the killed
            // node led), a write is refused, saying so; then it is taken.
            await("a publish over HTTP taken by " + survivor, Duration.ofSeconds(20),
                    () -> Support.http("POST", survivor.url(), "/nacos/v1/cs/configs",
                            Map.of("dataId", ID, "group", GROUP, "content", "after")).body(),
                    "true"::equals);
            await("the listener hears the publish made after the kill", Duration.ofSeconds(20),
                    () -> List.copyOf(heard), l -> l.contains("after"));
            assertEquals("after", uncheck(() -> config.getConfig(ID, GROUP, 5000)));
            assertTrue(config.publishConfig(ID, GROUP, "moved"));
            await("the listener hears the client's own publish", Duration.ofSeconds(10),
                    () -> List.copyOf(heard), l -> l.get(l.size() - 1).equals("moved"));
            assertNotEquals(connected.id(), Connections.theOneConnected(cluster).id());
        } finally {
            config.shutDown();
        }
    }
}
