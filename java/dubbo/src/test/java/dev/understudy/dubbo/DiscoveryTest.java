package dev.understudy.dubbo;

import static dev.understudy.dubbo.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.understudy.dubbo.Consumer.Discovery;
import dev.understudy.dubbo.Providers.Forked;
import dev.understudy.dubbo.Support.Listed;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Dubbo's interface-level and application-level discovery on one understudy
 * node: calls, the zone in the instance metadata, the service-name mapping,
 * the metadata, and a second provider taking its share of the calls.
 */
class DiscoveryTest {
    /** How Dubbo names the interface-level service of {@link Greeter} (no version, no group). */
    static final String INTERFACE_SERVICE = "providers:" + Greeter.class.getName() + "::";
    static final Duration DISCOVERY = Duration.ofSeconds(30);

    /** A node per test: each starts from an empty registry and config store. */
    @RegisterExtension
    final UnderstudyExtension understudy = UnderstudyExtension.node();

    private final Providers providers = new Providers();
    private Consumer consumer;

    @AfterEach
    void close() throws Exception {
        if (consumer != null) {
            consumer.close();
        }
        providers.close();
    }

    static String registry(UnderstudyExtension understudy, Discovery discovery) {
        return "nacos://" + understudy.serverAddr() + "?register-mode=" + discovery.registerMode;
    }

    static String application(TestInfo test) {
        return "greeter-" + test.getTestMethod().orElseThrow().getName();
    }

    /** Waits until a call answers, and returns who answered. */
    static String firstAnswer(Consumer consumer) {
        return await("a call answered", DISCOVERY, consumer::call, who -> who != null);
    }

    @Test
    void interfaceLevelDiscoveryCallsTheProviderAndListsItsZone(TestInfo test) throws Exception {
        String registry = registry(understudy, Discovery.INTERFACE);
        Forked provider = providers.start(registry, application(test), "p1", "hz", "local");
        consumer = new Consumer(registry, "consumer", Discovery.INTERFACE);
        assertEquals("p1", firstAnswer(consumer), "the provider that answered");

        List<Listed> listed = Support.instances(understudy.url(), INTERFACE_SERVICE);
        assertEquals(List.of(provider.address()), listed.stream().map(Listed::address).toList(),
                "the interface-level instances of " + INTERFACE_SERVICE);
        Map<String, String> metadata = listed.get(0).metadata();
        assertEquals("hz", metadata.get("zone"), "the zone in the instance metadata " + metadata);
        assertEquals(Greeter.class.getName(), metadata.get("interface"), "the interface in " + metadata);
        // register-mode=interface: no application-level instance.
        assertEquals(List.of(), Support.addresses(understudy.url(), application(test)),
                "application-level instances of a provider registered by interface");
    }

    @Test
    void applicationLevelDiscoveryWritesTheMappingAndServesMetadata(TestInfo test) throws Exception {
        String registry = registry(understudy, Discovery.APPLICATION);
        String app = application(test);
        Forked provider = providers.start(registry, app, "p1", "sh", "local");
        // The provider maps its interface to its application, CAS-published.
        String mapping = await("the service-name mapping of " + Greeter.class.getName(), DISCOVERY,
                () -> Support.config(understudy.url(), Greeter.class.getName(), "mapping"),
                content -> content != null && List.of(content.split(",")).contains(app));

        List<Listed> listed = await("the application-level instance of " + app, DISCOVERY,
                () -> Support.instances(understudy.url(), app), l -> l.size() == 1);
        assertEquals(provider.address(), listed.get(0).address(), "the instance of " + app);
        Map<String, String> metadata = listed.get(0).metadata();
        assertEquals("sh", metadata.get("zone"), "the zone in the instance metadata " + metadata);
        assertNotNull(metadata.get("dubbo.metadata.revision"), "a metadata revision in " + metadata);
        assertEquals("local", metadata.get("dubbo.metadata.storage-type"),
                "the metadata storage type in " + metadata);
        assertEquals(List.of(), Support.addresses(understudy.url(), INTERFACE_SERVICE),
                "interface-level instances of a provider registered by instance");

        // A second application exporting the interface: its provider reads
        // the mapping and publishes it, CAS on what it read, with both.
        String other = app + "-other";
        Forked second = providers.start(registry, other, "p2", "sh", "local");
        await("the mapping naming " + app + " and " + other + " (first: " + mapping + ")", DISCOVERY,
                () -> Support.config(understudy.url(), Greeter.class.getName(), "mapping"),
                content -> content != null && Set.of(content.split(",")).containsAll(Set.of(app, other)));

        // The consumer finds both applications through the mapping, and the
        // service in each through its provider's MetadataService: only then
        // does an instance become an address in its directory.
        consumer = new Consumer(registry, "consumer", Discovery.APPLICATION);
        List<String> both = List.of(provider.address(), second.address()).stream().sorted().toList();
        await("both applications' providers in the consumer's directory", DISCOVERY,
                consumer::directory, both::equals);
        Map<String, Integer> tally = consumer.tally(40);
        assertEquals(Set.of("p1", "p2"), tally.keySet(), "the providers that answered 40 calls: " + tally);
    }

    @Test
    void applicationLevelDiscoveryWithRemoteMetadataStoresItInTheConfigStore(TestInfo test) throws Exception {
        String registry = registry(understudy, Discovery.APPLICATION);
        String app = application(test);
        Forked provider = providers.start(registry, app, "p1", "hz", "remote");
        List<Listed> listed = await("the application-level instance of " + app, DISCOVERY,
                () -> Support.instances(understudy.url(), app), l -> l.size() == 1);
        assertEquals(provider.address(), listed.get(0).address(), "the instance of " + app);
        Map<String, String> metadata = listed.get(0).metadata();
        assertEquals("remote", metadata.get("dubbo.metadata.storage-type"), "the storage type in " + metadata);
        String revision = metadata.get("dubbo.metadata.revision");
        assertNotNull(revision, "a metadata revision in " + metadata);
        // The metadata report keeps the application's metadata as config
        // dataId=application, group=revision.
        String stored = await("the metadata of " + app + " revision " + revision, DISCOVERY,
                () -> Support.config(understudy.url(), app, revision), content -> content != null);
        assertTrue(stored.contains(Greeter.class.getName()), "the stored metadata names the service: " + stored);

        consumer = new Consumer(registry, "consumer", Discovery.APPLICATION);
        assertEquals("p1", firstAnswer(consumer), "the provider that answered");
    }

    @ParameterizedTest
    @EnumSource(Discovery.class)
    void aSecondProviderJoinsAndTakesItsShareOfTheCalls(Discovery discovery, TestInfo test) throws Exception {
        String registry = registry(understudy, discovery);
        String app = application(test);
        Forked first = providers.start(registry, app, "p1", "hz", "local");
        consumer = new Consumer(registry, "consumer", discovery);
        assertEquals("p1", firstAnswer(consumer), "the provider that answered");

        Forked second = providers.start(registry, app, "p2", "hz", "local");
        List<String> both = List.of(first.address(), second.address()).stream().sorted().toList();
        await("both providers in the consumer's directory", DISCOVERY, consumer::directory, both::equals);
        int calls = 200;
        Map<String, Integer> tally = consumer.tally(calls);
        assertEquals(calls, tally.getOrDefault("p1", 0) + tally.getOrDefault("p2", 0),
                "calls answered by p1 or p2: " + tally);
        for (String provider : List.of("p1", "p2")) {
            assertTrue(tally.getOrDefault(provider, 0) >= calls / 4,
                    provider + " answered under 25% of " + calls + " calls: " + tally);
        }
    }
}
