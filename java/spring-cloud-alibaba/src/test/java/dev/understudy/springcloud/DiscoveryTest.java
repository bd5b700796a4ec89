package dev.understudy.springcloud;

import static dev.understudy.springcloud.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.cloud.client.ServiceInstance;
import org.springframework.cloud.client.discovery.DiscoveryClient;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.client.RestTemplate;

import dev.understudy.junit.UnderstudyExtension;
import dev.understudy.springcloud.app.HelloApp;

/**
 * spring-cloud-starter-alibaba-nacos-discovery against one node: the
 * application registers itself on start, Spring's {@link DiscoveryClient} and
 * a {@code @LoadBalanced} {@link RestTemplate} find it by name, and an
 * application that closes deregisters.
 */
@SpringBootTest(classes = HelloApp.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {
            "spring.application.name=" + DiscoveryTest.SERVICE,
            "spring.cloud.nacos.discovery.ip=127.0.0.1",
            // Discovery only: no config imported.
            "spring.cloud.nacos.config.enabled=false",
            "spring.cloud.nacos.config.import-check.enabled=false",
        })
class DiscoveryTest {
    static final String SERVICE = "hello-discovery";
    private static final Duration WITHIN = Duration.ofSeconds(15);
    private static final Duration GRACE = Duration.ofSeconds(4);
    private static final Duration PUSH = Duration.ofSeconds(3);

    @RegisterExtension
    static final UnderstudyExtension understudy = UnderstudyExtension.node();

    @DynamicPropertySource
    static void nacos(DynamicPropertyRegistry registry) {
        registry.add("spring.cloud.nacos.discovery.server-addr", understudy::serverAddr);
    }

    @LocalServerPort
    int port;

    @Autowired
    DiscoveryClient discovery;

    @Autowired
    RestTemplate loadBalanced;

    @Test
    void registersOnStartAndIsListed() {
        String self = "127.0.0.1:" + port;
        List<String> seen = await("DiscoveryClient lists " + self + " for " + SERVICE, WITHIN,
                () -> hosts(SERVICE), list -> list.contains(self));
        assertEquals(List.of(self), seen, "DiscoveryClient lists this application and nothing else");
        assertEquals(List.of(self), Support.listed(understudy, SERVICE),
                "understudy's instance list holds the registered instance");
        ServiceInstance instance = discovery.getInstances(SERVICE).get(0);
        assertEquals(SERVICE, instance.getServiceId(), "the instance's service id is the application name");
        assertTrue(discovery.getServices().contains(SERVICE),
                "DiscoveryClient.getServices() names " + SERVICE + ": " + discovery.getServices());
    }

    @Test
    void loadBalancedCallByServiceNameReachesTheApplication() {
        String self = "127.0.0.1:" + port;
        // The load balancer caches what discovery gives it, so call once discovery lists us.
        await("DiscoveryClient lists " + self, WITHIN, () -> hosts(SERVICE), list -> list.contains(self));
        String answer = loadBalanced.getForObject("http://" + SERVICE + "/hello", String.class);
        assertEquals("hello from " + SERVICE + " on " + port, answer,
                "GET http://" + SERVICE + "/hello resolved through understudy to this application");
    }

    @Test
    void closedApplicationDeregisters() throws Exception {
        String name = "hello-leaving";
        double deregisteredBefore = Support.metric(understudy, "understudy_instances_removed_total",
                "cause=\"deregistered\"");
        ConfigurableApplicationContext leaving = new SpringApplicationBuilder(HelloApp.class)
                .properties(
                        "spring.application.name=" + name,
                        "server.port=0",
                        "spring.cloud.nacos.discovery.server-addr=" + understudy.serverAddr(),
                        "spring.cloud.nacos.discovery.ip=127.0.0.1",
                        "spring.cloud.nacos.config.enabled=false",
                        "spring.cloud.nacos.config.import-check.enabled=false")
                // On close the application deregisters, then waits this long before its
                // client disconnects (an argument: application.properties outranks the above).
                .run("--spring.cloud.nacos.discovery.graceful-shutdown-wait-time=" + GRACE.toMillis());
        Thread closing = new Thread(leaving::close, "closing " + name);
        try {
            String leaver = "127.0.0.1:" + leaving.getEnvironment().getProperty("local.server.port");
            await(name + " listed by understudy", WITHIN, () -> Support.listed(understudy, name),
                    list -> list.equals(List.of(leaver)));
            assertEquals("hello from " + name + " on " + leaver.substring("127.0.0.1:".length()),
                    Support.get("http://" + leaver + "/hello"), "the second application serves");
            await("the first application's DiscoveryClient lists " + leaver, WITHIN,
                    () -> hosts(name), List.of(leaver)::equals);
            closing.start();
            await(name + " no longer listed by understudy once its context is closing",
                    GRACE.dividedBy(2), () -> Support.listed(understudy, name), List::isEmpty);
            assertTrue(closing.isAlive(), "the instance went while the application was still in its"
                    + " graceful wait, its client connected: it deregistered");
            // The first application subscribed to the service when it asked for it
            // above: the removal reaches it by push.
            await("the first application's DiscoveryClient sees " + name + " leave", PUSH,
                    () -> hosts(name), List::isEmpty);
        } finally {
            if (!closing.isAlive() && leaving.isActive()) {
                leaving.close();
            }
            closing.join(GRACE.multipliedBy(3).toMillis());
        }
        assertFalse(closing.isAlive(), "the application's context closed");
        double deregistered = Support.metric(understudy, "understudy_instances_removed_total",
                "cause=\"deregistered\"");
        assertEquals(deregisteredBefore + 1, deregistered,
                "understudy counts one removal by deregistration");
        assertEquals(List.of("127.0.0.1:" + port), Support.listed(understudy, SERVICE),
                "the first application is still listed");
    }

    /** What this application's DiscoveryClient lists for {@code service}, as {@code host:port}. */
    private List<String> hosts(String service) {
        return discovery.getInstances(service).stream().map(i -> i.getHost() + ":" + i.getPort()).toList();
    }
}
