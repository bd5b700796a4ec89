package dev.understudy.nacos3;

import static org.junit.jupiter.api.Assertions.assertFalse;

import com.alibaba.nacos.api.config.ConfigFactory;
import com.alibaba.nacos.api.config.ConfigService;
import com.alibaba.nacos.api.config.listener.AbstractFuzzyWatchEventWatcher;
import com.alibaba.nacos.api.config.listener.ConfigFuzzyWatchChangeEvent;
import com.alibaba.nacos.api.naming.NamingFactory;
import com.alibaba.nacos.api.naming.NamingService;
import com.alibaba.nacos.api.naming.listener.FuzzyWatchChangeEvent;
import dev.understudy.junit.Await;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Nacos 3's fuzzy watch: a watcher of a pattern is told of a matching
 * service or config appearing and going, and of nothing that does not match.
 */
class FuzzyWatchTest {
    @RegisterExtension
    static final UnderstudyExtension UNDERSTUDY = UnderstudyExtension.node().args("--empty-service-ttl-ms", "1000");

    @Test
    void aServicePatternWatcherSeesMatchingServicesComeAndGo() throws Exception {
        NamingService watcher = NamingFactory.createNamingService(UNDERSTUDY.serverAddr());
        NamingService provider = NamingFactory.createNamingService(UNDERSTUDY.serverAddr());
        try {
            List<String> seen = new CopyOnWriteArrayList<>();
            watcher.fuzzyWatch("orders.*", "FUZZY_GROUP",
                    new com.alibaba.nacos.api.naming.listener.AbstractFuzzyWatchEventWatcher() {
                        @Override
                        public void onEvent(FuzzyWatchChangeEvent event) {
                            seen.add(event.getChangeType() + " " + event.getGroupName() + "/" + event.getServiceName());
                        }
                    });
            provider.registerInstance("payments.api", "FUZZY_GROUP", "10.2.0.9", 80);
            provider.registerInstance("orders.api", "FUZZY_GROUP", "10.2.0.1", 80);
            Await.until("the matching service's arrival", Duration.ofSeconds(5), () -> List.copyOf(seen),
                    l -> l.contains("ADD_SERVICE FUZZY_GROUP/orders.api"));
            provider.deregisterInstance("orders.api", "FUZZY_GROUP", "10.2.0.1", 80);
            // An emptied service is removed after --empty-service-ttl-ms.
            Await.until("the matching service's removal", Duration.ofSeconds(10), () -> List.copyOf(seen),
                    l -> l.contains("DELETE_SERVICE FUZZY_GROUP/orders.api"));
            assertFalse(seen.stream().anyMatch(s -> s.contains("payments")), "told of a service that does not match: " + seen);
        } finally {
            watcher.shutDown();
            provider.shutDown();
        }
    }

    @Test
    void aConfigPatternWatcherSeesMatchingConfigsComeAndGo() throws Exception {
        ConfigService watcher = ConfigFactory.createConfigService(UNDERSTUDY.serverAddr());
        ConfigService publisher = ConfigFactory.createConfigService(UNDERSTUDY.serverAddr());
        try {
            List<String> seen = new CopyOnWriteArrayList<>();
            watcher.fuzzyWatch("app-*", "FUZZY_GROUP", new AbstractFuzzyWatchEventWatcher() {
                @Override
                public void onEvent(ConfigFuzzyWatchChangeEvent event) {
                    seen.add(event.getChangedType() + " " + event.getGroup() + "/" + event.getDataId());
                }
            });
            publisher.publishConfig("db-settings", "FUZZY_GROUP", "not watched");
            publisher.publishConfig("app-settings", "FUZZY_GROUP", "watched");
            Await.until("the matching config's arrival", Duration.ofSeconds(5), () -> List.copyOf(seen),
                    l -> l.contains("ADD_CONFIG FUZZY_GROUP/app-settings"));
            publisher.removeConfig("app-settings", "FUZZY_GROUP");
            Await.until("the matching config's removal", Duration.ofSeconds(5), () -> List.copyOf(seen),
                    l -> l.contains("DELETE_CONFIG FUZZY_GROUP/app-settings"));
            assertFalse(seen.stream().anyMatch(s -> s.contains("db-settings")), "told of a config that does not match: " + seen);
        } finally {
            watcher.shutDown();
            publisher.shutDown();
        }
    }
}
