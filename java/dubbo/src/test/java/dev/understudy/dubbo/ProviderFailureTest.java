package dev.understudy.dubbo;

import static dev.understudy.dubbo.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.understudy.dubbo.Consumer.Discovery;
import dev.understudy.dubbo.Providers.Forked;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.dubbo.rpc.RpcException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Providers leaving: one stopped gracefully, one SIGKILLed, the last one
 * gone too, then one started again. The consumer's directory follows the
 * registry, its calls reach only live providers, with none it fails with
 * Dubbo's "No provider available", and a new provider is called.
 */
class ProviderFailureTest {
    static final Duration DISCOVERY = Duration.ofSeconds(30);

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

    /** The Nacos service Dubbo registers the providers under. */
    static String service(Discovery discovery, String application) {
        return discovery == Discovery.INTERFACE ? DiscoveryTest.INTERFACE_SERVICE : application;
    }

    static List<String> addresses(Forked... live) {
        return java.util.Arrays.stream(live).map(Forked::address).sorted().toList();
    }

    /**
     * Waits until understudy lists exactly {@code live}, the consumer's
     * directory holds exactly them, and 50 calls in a row all reach them.
     */
    void awaitOnly(Discovery discovery, String application, Forked... live) {
        List<String> expected = addresses(live);
        String svc = service(discovery, application);
        await("understudy lists " + expected + " for " + svc, DISCOVERY,
                () -> Support.addresses(understudy.url(), svc), expected::equals);
        await("the consumer's directory holds " + expected, DISCOVERY, consumer::directory, expected::equals);
        Set<String> names = java.util.Arrays.stream(live).map(Forked::name).collect(java.util.stream.Collectors.toSet());
        Map<String, Integer> tally = consumer.tally(50);
        assertTrue(names.containsAll(tally.keySet()), "50 calls reached only " + names + ": " + tally);
    }

    @ParameterizedTest
    @EnumSource(Discovery.class)
    void theConsumerFollowsProvidersLeavingCrashingAndComingBack(Discovery discovery, TestInfo test) throws Exception {
        String registry = DiscoveryTest.registry(understudy, discovery);
        String app = DiscoveryTest.application(test) + "-" + discovery.registerMode;
        Forked p1 = providers.start(registry, app, "p1", "hz", "local");
        Forked p2 = providers.start(registry, app, "p2", "hz", "local");
        Forked p3 = providers.start(registry, app, "p3", "hz", "local");
        consumer = new Consumer(registry, "consumer", discovery);
        awaitOnly(discovery, app, p1, p2, p3);

        // Stopped gracefully: Dubbo unregisters p1 before its JVM exits.
        p1.stopGracefully();
        awaitOnly(discovery, app, p2, p3);

        // SIGKILLed: p2's connection to understudy drops, and understudy
        // drops the instance it registered.
        p2.kill();
        awaitOnly(discovery, app, p3);

        // None left: the call fails in the consumer, for want of a provider.
        p3.kill();
        await("understudy lists no provider", DISCOVERY,
                () -> Support.addresses(understudy.url(), service(discovery, app)), List::isEmpty);
        await("the consumer's directory empty", DISCOVERY, consumer::directory, List::isEmpty);
        RpcException none = assertThrows(RpcException.class, consumer::call, "a call with no provider left");
        assertTrue(none.getMessage().contains("No provider available"),
                "the failure of a call with no provider: " + none.getMessage());

        // A provider started again is called.
        Forked p4 = providers.start(registry, app, "p4", "sh", "local");
        awaitOnly(discovery, app, p4);
        assertEquals(Map.of("p4", 20), consumer.tally(20), "20 calls after p4 started");
    }
}
