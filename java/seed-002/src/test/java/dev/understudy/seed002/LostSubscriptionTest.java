package dev.understudy.seed002;

import static org.junit.jupiter.api.Assertions.assertTrue;

import com.alibaba.nacos.common.utils.JacksonUtils;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import dev.understudy.junit.Await;
import dev.understudy.junit.UnderstudyExtension;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.NetworkInterface;
import java.net.ServerSocket;
import java.net.SocketException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.dubbo.config.ApplicationConfig;
import org.apache.dubbo.config.ProtocolConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.ServiceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Seed 002: a provider set offline, a Dubbo consumer starting, the provider
 * set online while the consumer is between its instance query and its
 * listener's subscription. Each pair of {@link Pair} goes through each
 * window the {@code seed002.windows} property names, {@code seed002.runs}
 * times, the four pairs of a run side by side:
 *
 * <ul>
 *   <li>{@code default}: Dubbo's default configuration. The agent pauses
 *       the consumer after its query; the test enables the provider,
 *       waits on understudy until the consumer's connection has
 *       acknowledged the push (for the pairs whose query subscribed), and
 *       releases it.
 *   <li>{@code legacy}: {@code nacos.subscribe.legacy-name=true}, no agent.
 *       An understudy hold holds the request after the consumer's first
 *       subscription while it enables the provider and the push is
 *       acknowledged.
 *   <li>{@code none}: no fault. The provider is enabled at a moment of the
 *       consumer's first 12 s drawn at random, with nothing held.
 * </ul>
 *
 * <p>Then the consumer calls every 200 ms for {@code seed002.watch.seconds}.
 * With a fault, the affected pair must never reach the provider and every
 * other pair must within 5 s of the release; without one, the runs are
 * only counted. The table and each run's event order go to
 * {@code target/seed-002.md}.
 */
class LostSubscriptionTest {
    @RegisterExtension
    static final UnderstudyExtension understudy = UnderstudyExtension.node();

    private static final String HOST = "127.0.0.1";
    private static final Duration RECOVER_WITHIN = Duration.ofSeconds(5);
    private static final Duration CONSUMER_START = Duration.ofSeconds(120);
    /** Without a fault, the provider comes back this long after the consumer's start at most. */
    private static final Duration UNFAULTED_WITHIN = Duration.ofSeconds(12);

    private static int providerPort;
    private static Understudy api;

    @BeforeAll
    static void provider() throws IOException {
        requireLoopbackOnly();
        api = new Understudy(understudy.url());
        try (ServerSocket socket = new ServerSocket(0)) {
            providerPort = socket.getLocalPort();
        }
        ApplicationConfig app = new ApplicationConfig("seed002-provider");
        app.setQosEnable(false);
        app.setRegisterMode("interface");
        DubboBootstrap bootstrap = DubboBootstrap.getInstance()
                .application(app)
                .registry(new RegistryConfig("nacos://" + understudy.serverAddr()))
                .protocol(new ProtocolConfig("dubbo", providerPort));
        for (Pair pair : Pair.values()) {
            ServiceConfig<Greeter> service = new ServiceConfig<>();
            service.setInterface(Greeter.class);
            service.setVersion(pair.id());
            service.setRef(name -> "hello " + name);
            bootstrap.service(service);
        }
        bootstrap.start();
        for (Pair pair : Pair.values()) {
            Await.until("the provider of " + pair + " listed", Duration.ofSeconds(30),
                    () -> api.listed(pair.service()), n -> n == 1);
        }
    }

    @AfterAll
    static void stopProvider() {
        DubboBootstrap.getInstance().stop();
    }

    @Test
    void theWindowLosesTheSubscriptionOnlyWhereNeitherFixIs() throws Exception {
        int runs = Integer.getInteger("seed002.runs", 2);
        List<String> windows = Arrays.asList(System.getProperty("seed002.windows", "default").split(","));
        Duration watch = Duration.ofSeconds(Long.getLong("seed002.watch.seconds", 60));
        List<Outcome> outcomes = new ArrayList<>();
        ExecutorService pool = Executors.newFixedThreadPool(Pair.values().length);
        try {
            for (String window : windows) {
                for (int run = 1; run <= runs; run++) {
                    List<Future<Outcome>> running = new ArrayList<>();
                    for (Pair pair : Pair.values()) {
                        int n = run;
                        running.add(pool.submit(() -> runOnce(pair, window.trim(), n, watch)));
                    }
                    for (Future<Outcome> outcome : running) {
                        outcomes.add(outcome.get());
                    }
                }
            }
        } finally {
            pool.shutdownNow();
        }
        String report = Report.render(outcomes, runs, watch, RECOVER_WITHIN);
        Path file = Path.of(System.getProperty("seed002.report", "target/seed-002.md"));
        Files.createDirectories(file.getParent());
        Files.writeString(file, report);
        System.out.println(Report.table(outcomes, watch, RECOVER_WITHIN));

        for (Outcome o : outcomes) {
            if (o.window().equals("none")) {
                continue;
            }
            String what = o.pair() + ", " + o.window() + " window, run " + o.run() + ":\n  "
                    + String.join("\n  ", o.order());
            if (o.pair().affected) {
                assertTrue(o.lost(), what + "\nreached the provider, but the pair is affected");
                assertTrue(o.pushAcknowledgedBeforeSubscription(),
                        what + "\nthe push was not acknowledged before the listener's subscription");
            } else {
                assertTrue(o.recoveredAfterMs().filter(ms -> ms <= RECOVER_WITHIN.toMillis()).isPresent(),
                        what + "\nno call reached the provider within " + RECOVER_WITHIN.toMillis()
                                + " ms of the release; last failure: " + o.lastFailure());
            }
        }
    }

    private static Outcome runOnce(Pair pair, String window, int run, Duration watch) throws Exception {
        String service = pair.service();
        api.setEnabled(service, HOST, providerPort, false);
        api.trace(service);
        Set<String> others = api.subscribers(service);
        long started = System.currentTimeMillis();
        long hold = window.equals("legacy") ? api.holdEnabling(service, HOST, providerPort, Duration.ofSeconds(60)) : 0;
        Path log = Path.of("target", "seed-002", pair.id() + "-" + window + "-" + run + ".log");
        try (ConsumerRun consumer = ConsumerRun.start(pair, "nacos://" + understudy.serverAddr(), window, watch, log)) {
            long releasedAt;
            switch (window) {
                case "default" -> {
                    consumer.await("window ", CONSUMER_START);
                    api.setEnabled(service, HOST, providerPort, true);
                    consumer.note("enabled the provider");
                    Understudy.Answer acked = api.acknowledged(service, Duration.ofSeconds(10));
                    if (acked.status() != 200) {
                        throw new AssertionError(pair + ": the push was not acknowledged: " + acked.body());
                    }
                    consumer.note("saw every subscriber acknowledge revision " + acked.body().path("revision"));
                    consumer.release();
                    releasedAt = consumer.await("released ", Duration.ofSeconds(10)).atMs();
                }
                case "legacy" -> {
                    consumer.await("ready", CONSUMER_START);
                    JsonNode fired = Await.until(pair + "'s hold released", Duration.ofSeconds(30),
                            () -> api.hold(hold), h -> h.path("stage").asText().equals("released"));
                    if (!fired.path("outcome").asText().endsWith("acknowledged")) {
                        throw new AssertionError(pair + ": the hold did not see its push acknowledged: " + fired);
                    }
                    releasedAt = releaseTime(api.events(service), hold).orElseThrow(
                            () -> new AssertionError(pair + ": hold " + fired + " with no release traced"));
                }
                case "none" -> {
                    // No fault: the provider comes back at a moment of the
                    // consumer's start drawn at random (seeded by run and
                    // pair), as it would in the field; the window is one
                    // moment among many.
                    long delay = new Random(1000L * run + pair.ordinal()).nextLong(UNFAULTED_WITHIN.toMillis());
                    ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();
                    try {
                        releasedAt = timer.schedule(() -> {
                                    api.setEnabled(service, HOST, providerPort, true);
                                    consumer.note("enabled the provider, " + delay + " ms after the consumer's start");
                                    return System.currentTimeMillis();
                                }, delay, TimeUnit.MILLISECONDS)
                                .get();
                    } finally {
                        timer.shutdownNow();
                    }
                }
                default -> throw new IllegalArgumentException("no window '" + window + "': default, legacy or none");
            }
            consumer.await("done", watch.plusSeconds(60));
            ArrayNode server = JacksonUtils.createEmptyArrayNode();
            for (JsonNode e : api.events(service)) {
                if (e.path("atMs").asLong() >= started) {
                    server.add(e);
                }
            }
            return new Outcome(pair, window, run, releasedAt, consumer.events(), server, others);
        }
    }

    /** When understudy released hold {@code id}, from its trace. */
    private static Optional<Long> releaseTime(JsonNode events, long id) {
        for (JsonNode e : events) {
            if (e.path("event").asText().equals("released") && e.path("detail").asText().startsWith("hold " + id + ":")) {
                return Optional.of(e.path("atMs").asLong());
            }
        }
        return Optional.empty();
    }

    /** Fails unless lo is this JVM's only interface up (../dubbo/pom.xml says why). */
    private static void requireLoopbackOnly() {
        List<String> others = new ArrayList<>();
        try {
            for (NetworkInterface nic : Collections.list(NetworkInterface.getNetworkInterfaces())) {
                if (nic.isUp() && !nic.isLoopback()) {
                    others.add(nic.getName());
                }
            }
        } catch (SocketException e) {
            throw new UncheckedIOException(e);
        }
        if (!others.isEmpty()) {
            throw new IllegalStateException("interfaces up besides lo: " + others
                    + "; run the tests with mvn from java/, whose Surefire JVM is ../dubbo/netns/bin/java");
        }
    }
}
