package dev.understudy.nacos;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.alibaba.nacos.api.config.ConfigFactory;
import com.alibaba.nacos.api.config.ConfigService;
import com.alibaba.nacos.api.exception.NacosException;
import com.alibaba.nacos.api.naming.NamingFactory;
import com.alibaba.nacos.api.naming.NamingService;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Auth on, with tokens that live {@link #TTL}: a client working past its
 * first token's life logs in again by itself, and a wrong password is
 * refused with the client's own error.
 *
 * <p>16 s is about the shortest life the Java client (2.5 and 3.1) renews in
 * time: it checks every 5 s whether {@code ttl - window} has passed since its
 * last login (the window is a draw between ttl/15 and ttl/10 whole seconds),
 * and once a call is refused for an expired token it waits 60 s from its last
 * login before it logs in again. With 16 s it logs in at 15 s, and the token
 * (good, as in Nacos, through the second its {@code exp} names) lives till
 * at least 16 s.
 */
class AuthTest {
    static final Duration TTL = Duration.ofSeconds(16);

    @RegisterExtension
    static final UnderstudyExtension UNDERSTUDY = UnderstudyExtension.node().auth("nacos", "s3cret", TTL);

    /** Logins the server answered 200: 2.x clients use the v1 path, 3.x the v3 one. */
    static double logins() {
        String metrics = UNDERSTUDY.metrics();
        double sum = 0;
        for (String path : List.of("/nacos/v1/auth/users/login", "/nacos/v1/auth/login", "/nacos/v3/auth/user/login")) {
            sum += Support.metric(metrics, "understudy_http_requests_total",
                    "route=\"" + path + "\"", "status=\"200\"");
        }
        return sum;
    }

    @Test
    void aClientLogsInAgainAsItsTokensExpire() throws Exception {
        Properties props = Support.props(UNDERSTUDY, UNDERSTUDY.serverAddr());
        double before = logins();
        NamingService naming = NamingFactory.createNamingService(props);
        ConfigService config = ConfigFactory.createConfigService(props);
        List<String> failures = new ArrayList<>();
        try {
            Duration working = TTL.plusSeconds(5);
            long end = System.nanoTime() + working.toNanos();
            int round = 0;
            while (System.nanoTime() < end) {
                round++;
                try {
                    naming.registerInstance("java.auth", "10.0.9.1", 80 + (round % 2));
                    assertEquals(1, naming.getAllInstances("java.auth", false).size());
                    assertTrue(config.publishConfig("java.auth", "DEFAULT_GROUP", "round " + round));
                    assertEquals("round " + round, config.getConfig("java.auth", "DEFAULT_GROUP", 3000));
                } catch (NacosException e) {
                    failures.add("round " + round + ": " + e);
                }
                Thread.sleep(250);
            }
        } finally {
            naming.shutDown();
            config.shutDown();
        }
        double logins = logins() - before;
        assertEquals(List.of(), failures, "calls refused while the client renewed its tokens");
        // Each client (naming, config) logs in at its start and once more.
        assertTrue(logins >= 4, "the server saw " + logins + " logins in " + TTL.plusSeconds(5).toSeconds()
                + " s of tokens that live " + TTL.toSeconds() + " s");
    }

    @Test
    void aWrongPasswordIsRefusedWithTheClientsError() throws Exception {
        Properties props = Support.props(UNDERSTUDY, UNDERSTUDY.serverAddr());
        props.setProperty("password", "not the password");
        NamingService naming = NamingFactory.createNamingService(props);
        try {
            NacosException refused = assertThrows(NacosException.class,
                    () -> naming.registerInstance("java.auth.refused", "10.0.9.2", 80));
            assertEquals(403, refused.getErrCode(), refused.toString());
        } finally {
            naming.shutDown();
        }
    }
}
