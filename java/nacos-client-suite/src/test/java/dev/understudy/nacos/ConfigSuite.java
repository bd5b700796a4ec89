package dev.understudy.nacos;

import static dev.understudy.nacos.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.alibaba.nacos.api.config.ConfigFactory;
import com.alibaba.nacos.api.config.ConfigService;
import com.alibaba.nacos.api.config.listener.AbstractListener;
import dev.understudy.junit.UnderstudyExtension;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/**
 * Config with the official Java client: publish with a type, get, listeners
 * told of changes made over HTTP, CAS, namespaces, 1 MB of content, removal.
 * Each test works in data ids of its own, named after it.
 */
abstract class ConfigSuite {
    static final String GROUP = "DEFAULT_GROUP";

    /** The node the tests run against. */
    abstract UnderstudyExtension understudy();

    private final List<ConfigService> clients = new ArrayList<>();

    ConfigService client() throws Exception {
        return client(new Properties());
    }

    ConfigService client(Properties extra) throws Exception {
        Properties props = Support.props(understudy(), understudy().serverAddr());
        props.putAll(extra);
        ConfigService config = ConfigFactory.createConfigService(props);
        clients.add(config);
        return config;
    }

    @AfterEach
    void closeClients() throws Exception {
        for (ConfigService config : clients) {
            config.shutDown();
        }
    }

    static String dataId(TestInfo test) {
        return "java." + test.getTestMethod().orElseThrow().getName() + ".yaml";
    }

    static String md5(String content) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("MD5")
                .digest(content.getBytes(StandardCharsets.UTF_8)));
    }

    /** An HTTP call with the form, and an access token when auth is on. */
    Support.Answer http(String method, String path, Map<String, String> form) {
        Map<String, String> full = new HashMap<>(form);
        if (understudy().username() != null) {
            full.put("accessToken", understudy().login());
        }
        return Support.http(method, understudy().url(), path, full);
    }

    @Test
    void publishesWithATypeAndGets(TestInfo test) throws Exception {
        String id = dataId(test);
        ConfigService config = client();
        assertTrue(config.publishConfig(id, GROUP, "a: 1\n", "yaml"));
        assertEquals("a: 1\n", await("the published content", Duration.ofSeconds(5),
                () -> NamingSuite.uncheck(() -> config.getConfig(id, GROUP, 3000)), "a: 1\n"::equals));
        Support.Answer detail = http("GET", "/nacos/v1/cs/configs",
                Map.of("dataId", id, "group", GROUP, "show", "all"));
        assertEquals(200, detail.status(), detail.body());
        assertTrue(detail.body().contains("\"type\":\"yaml\""), detail.body());
    }

    @Test
    void aListenerHearsOfAnHttpPublishAndOfTheRemoval(TestInfo test) throws Exception {
        String id = dataId(test);
        ConfigService config = client();
        List<String> heard = new CopyOnWriteArrayList<>();
        config.addListener(id, GROUP, new AbstractListener() {
            @Override
            public void receiveConfigInfo(String content) {
                heard.add(String.valueOf(content));
            }
        });
        Support.Answer published = http("POST", "/nacos/v1/cs/configs",
                Map.of("dataId", id, "group", GROUP, "content", "over http"));
        assertEquals("true", published.body(), "publish over HTTP");
        await("the listener told of the HTTP publish within 3 s", Duration.ofSeconds(3),
                () -> List.copyOf(heard), l -> l.contains("over http"));
        Support.Answer removed = http("DELETE", "/nacos/v1/cs/configs", Map.of("dataId", id, "group", GROUP));
        assertEquals("true", removed.body(), "remove over HTTP");
        // The client hands a listener null (or nothing) for a removed config.
        await("the listener told of the removal within 3 s", Duration.ofSeconds(3),
                () -> List.copyOf(heard),
                l -> l.size() >= 2 && (l.get(l.size() - 1).equals("null") || l.get(l.size() - 1).isEmpty()));
    }

    @Test
    void casPublishesOnlyOverTheExpectedMd5(TestInfo test) throws Exception {
        String id = dataId(test);
        ConfigService config = client();
        assertTrue(config.publishConfig(id, GROUP, "v1"));
        assertFalse(config.publishConfigCas(id, GROUP, "v2", md5("not v1")), "CAS on a wrong md5");
        assertEquals("v1", config.getConfig(id, GROUP, 3000));
        assertTrue(config.publishConfigCas(id, GROUP, "v2", md5("v1")), "CAS on the right md5");
        assertEquals("v2", config.getConfig(id, GROUP, 3000));
    }

    @Test
    void aNamespaceKeepsItsConfigsApart(TestInfo test) throws Exception {
        String id = dataId(test);
        Properties inNs = new Properties();
        inNs.setProperty("namespace", "java-cs-" + Support.line());
        ConfigService isolated = client(inNs);
        ConfigService shared = client();
        assertTrue(isolated.publishConfig(id, GROUP, "in the namespace"));
        assertEquals("in the namespace", isolated.getConfig(id, GROUP, 3000));
        assertNull(shared.getConfig(id, GROUP, 3000));
    }

    @Test
    void carriesOneMegabyte(TestInfo test) throws Exception {
        String id = dataId(test);
        ConfigService config = client();
        String big = "x".repeat(1024 * 1024 - 8) + "the end\n";
        assertTrue(config.publishConfig(id, GROUP, big));
        assertEquals(big, config.getConfig(id, GROUP, 5000));
    }

    @Test
    void removesAConfig(TestInfo test) throws Exception {
        String id = dataId(test);
        ConfigService config = client();
        assertTrue(config.publishConfig(id, GROUP, "short-lived"));
        assertTrue(config.removeConfig(id, GROUP));
        assertNull(config.getConfig(id, GROUP, 3000));
    }
}
