package dev.understudy.springcloud.app;

import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.cloud.client.loadbalancer.LoadBalanced;
import org.springframework.cloud.context.config.annotation.RefreshScope;
import org.springframework.context.annotation.Bean;
import org.springframework.core.env.Environment;
import org.springframework.stereotype.Component;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.client.RestTemplate;

/**
 * The application under test: it answers {@code GET /hello} with its name and
 * port, calls others by service name through a {@code @LoadBalanced}
 * {@link RestTemplate}, and reads {@code greeting.text} through a
 * {@code @RefreshScope} bean and a {@code @ConfigurationProperties} bean.
 */
@SpringBootApplication
@EnableConfigurationProperties(HelloApp.GreetingProperties.class)
public class HelloApp {

    public static void main(String[] args) {
        SpringApplication.run(HelloApp.class, args);
    }

    @Bean
    @LoadBalanced
    RestTemplate loadBalanced() {
        return new RestTemplate();
    }

    @RestController
    static class Hello {
        private final Environment environment;

        Hello(Environment environment) {
            this.environment = environment;
        }

        @GetMapping("/hello")
        String hello() {
            return "hello from " + environment.getProperty("spring.application.name")
                    + " on " + environment.getProperty("local.server.port");
        }
    }

    /** {@code greeting.text} as a {@code @RefreshScope} bean sees it: rebuilt on each refresh. */
    @Component
    @RefreshScope
    public static class Greeting {
        @Value("${greeting.text:unset}")
        private String text;

        public String text() {
            return text;
        }
    }

    /** {@code greeting.text} as a {@code @ConfigurationProperties} bean sees it: rebound on each refresh. */
    @ConfigurationProperties("greeting")
    public static class GreetingProperties {
        private String text = "unset";

        public String getText() {
            return text;
        }

        public void setText(String text) {
            this.text = text;
        }
    }
}
