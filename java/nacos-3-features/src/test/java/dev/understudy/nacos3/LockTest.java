package dev.understudy.nacos3;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.alibaba.nacos.api.lock.LockService;
import com.alibaba.nacos.api.lock.NacosLockFactory;
import com.alibaba.nacos.client.lock.core.NLock;
import com.alibaba.nacos.client.lock.core.NLockFactory;
import dev.understudy.junit.Await;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.Properties;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Nacos 3's lock service: one holder at a time, release, and expiry. */
class LockTest {
    @RegisterExtension
    static final UnderstudyExtension UNDERSTUDY = UnderstudyExtension.node();

    static LockService lockService() throws Exception {
        Properties props = new Properties();
        props.setProperty("serverAddr", UNDERSTUDY.serverAddr());
        return NacosLockFactory.createLockService(props);
    }

    @Test
    void oneClientHoldsALockUntilItReleasesIt() throws Exception {
        LockService first = lockService();
        LockService second = lockService();
        try {
            NLock lock = NLockFactory.getLock("java.lock.held", 60_000L);
            assertTrue(first.remoteTryLock(lock), "the first client takes the free lock");
            assertFalse(second.remoteTryLock(NLockFactory.getLock("java.lock.held", 60_000L)),
                    "the second client takes a held lock");
            assertTrue(first.remoteReleaseLock(lock), "the holder releases it");
            assertTrue(second.remoteTryLock(NLockFactory.getLock("java.lock.held", 60_000L)),
                    "the second client takes the released lock");
        } finally {
            first.shutdown();
            second.shutdown();
        }
    }

    @Test
    void aLockExpiresAfterItsTime() throws Exception {
        LockService first = lockService();
        LockService second = lockService();
        try {
            assertTrue(first.remoteTryLock(NLockFactory.getLock("java.lock.expiring", 1_000L)));
            assertFalse(second.remoteTryLock(NLockFactory.getLock("java.lock.expiring", 60_000L)),
                    "taken while the first client's second runs");
            Await.until("the expired lock taken by another client", Duration.ofSeconds(5),
                    () -> {
                        try {
                            return second.remoteTryLock(NLockFactory.getLock("java.lock.expiring", 60_000L));
                        } catch (Exception e) {
                            throw new IllegalStateException(e);
                        }
                    },
                    Boolean.TRUE::equals);
        } finally {
            first.shutdown();
            second.shutdown();
        }
    }
}
