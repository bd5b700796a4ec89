package dev.understudy.springcloud;

import static dev.understudy.springcloud.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.List;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.cloud.client.discovery.DiscoveryClient;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import dev.understudy.junit.UnderstudyExtension;
import dev.understudy.springcloud.app.HelloApp;

/**
 * The example of the docs: a {@code @SpringBootTest} of a Spring Cloud Alibaba
 * application that registers with understudy and imports its config from it.
 *
 * <p>Spring loads the context when it prepares the test instance, after
 * every {@code beforeAll}, so the node runs when the
 * {@code @DynamicPropertySource} suppliers are read (and, with
 * {@code @TestInstance(PER_CLASS)}, {@code serverAddr()} starts it then). The
 * node stops after Spring has closed its contexts, so the application's last
 * deregistration reaches it.
 *
 * <p>{@code spring.config.import} is resolved while the environment is
 * prepared, before {@code @DynamicPropertySource} properties are added, so
 * the config client's address comes from a system property the extension
 * sets while the node runs.
 */
@SpringBootTest(classes = HelloApp.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {
            "spring.application.name=orders",
            "spring.cloud.nacos.discovery.ip=127.0.0.1",
            "spring.config.import=nacos:orders.properties?refreshEnabled=true",
            // A refresh reloads the config on a copy of the environment holding only
            // some of its sources; without this one, these properties and so the
            // import would be missing from it, and the refresh would fail.
            "spring.cloud.refresh.additional-property-sources-to-retain=Inlined Test Properties",
        })
class ExampleTest {
    @RegisterExtension
    static final UnderstudyExtension understudy =
            UnderstudyExtension.node().systemProperty("spring.cloud.nacos.config.server-addr");

    @DynamicPropertySource
    static void nacos(DynamicPropertyRegistry registry) {
        registry.add("spring.cloud.nacos.discovery.server-addr", understudy::serverAddr);
    }

    @BeforeAll
    static void configBeforeTheContext() {
        Support.publish(understudy, "orders.properties", "greeting.text=hello\n");
    }

    @LocalServerPort
    int port;

    @Autowired
    DiscoveryClient discovery;

    @Autowired
    HelloApp.Greeting greeting;

    @Test
    void registersAndFollowsItsConfig() {
        String self = "127.0.0.1:" + port;
        await("understudy lists orders at " + self, Duration.ofSeconds(15),
                () -> Support.listed(understudy, "orders"), List.of(self)::equals);
        assertEquals(List.of(self),
                discovery.getInstances("orders").stream().map(i -> i.getHost() + ":" + i.getPort()).toList(),
                "DiscoveryClient lists the application");

        assertEquals("hello", greeting.text(), "the imported config");
        Support.publish(understudy, "orders.properties", "greeting.text=hello again\n");
        await("the @RefreshScope bean sees the change", Duration.ofSeconds(15),
                greeting::text, "hello again"::equals);
    }
}
