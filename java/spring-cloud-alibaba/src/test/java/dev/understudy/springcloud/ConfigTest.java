package dev.understudy.springcloud;

import static dev.understudy.springcloud.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

import dev.understudy.junit.UnderstudyExtension;
import dev.understudy.springcloud.app.HelloApp;

/**
 * spring-cloud-starter-alibaba-nacos-config against one node: a config
 * published before the application starts is imported with
 * {@code spring.config.import=nacos:...}, and a change published while it runs
 * reaches a {@code @RefreshScope} bean and a {@code @ConfigurationProperties}
 * bean.
 *
 * <p>The application is built here rather than by {@code @SpringBootTest}:
 * the import is resolved while the environment is prepared, before
 * {@code @DynamicPropertySource} properties exist (see {@link ExampleTest}),
 * and a builder's properties are there in time.
 */
class ConfigTest {
    private static final String DATA_ID = "hello-config.properties";
    private static final Duration WITHIN = Duration.ofSeconds(15);

    @RegisterExtension
    static final UnderstudyExtension understudy = UnderstudyExtension.node();

    @Test
    void importsAConfigAndSeesItsChange() {
        Support.publish(understudy, DATA_ID, "greeting.text=first\n");
        try (ConfigurableApplicationContext app = new SpringApplicationBuilder(HelloApp.class)
                .web(WebApplicationType.NONE)
                .properties(
                        "spring.application.name=hello-config",
                        "spring.cloud.nacos.config.server-addr=" + understudy.serverAddr(),
                        "spring.config.import=nacos:" + DATA_ID + "?refreshEnabled=true",
                        // Config only: this application does not register.
                        "spring.cloud.nacos.discovery.enabled=false",
                        "spring.cloud.service-registry.auto-registration.enabled=false")
                .run()) {
            HelloApp.Greeting refreshScoped = app.getBean(HelloApp.Greeting.class);
            HelloApp.GreetingProperties bound = app.getBean(HelloApp.GreetingProperties.class);
            assertEquals("first", app.getEnvironment().getProperty("greeting.text"),
                    "the environment holds the imported config");
            assertEquals("first", refreshScoped.text(), "the @RefreshScope bean starts with the imported value");
            assertEquals("first", bound.getText(), "the @ConfigurationProperties bean starts with the imported value");

            Support.publish(understudy, DATA_ID, "greeting.text=second\n");
            await("the @RefreshScope bean sees the published change", WITHIN,
                    refreshScoped::text, "second"::equals);
            await("the @ConfigurationProperties bean sees the published change", WITHIN,
                    bound::getText, "second"::equals);
            assertEquals("second", app.getEnvironment().getProperty("greeting.text"),
                    "the environment holds the changed config");
        }
    }
}
