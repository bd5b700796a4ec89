package dev.understudy.seed002;

import com.alibaba.nacos.api.naming.listener.NamingEvent;
import com.alibaba.nacos.api.naming.pojo.Instance;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The consumer JVM's side of the window: every registry call the agent
 * sees is written to stdout as {@code <epoch ms> <event>}, and, when a
 * service to pause at is set, the first subscription of it waits for a
 * {@code release} line on stdin — the seed's debugger breakpoint between
 * Dubbo's instance query and its listener's subscription.
 *
 * <p>Called from code the agent inlines into Dubbo's classes, so it is
 * public and static, and loaded by the class loader Dubbo is loaded by.
 */
public final class Window {
    /** How long a paused subscription waits for its release at most. */
    private static final long RELEASE_WITHIN_SECONDS = 120;

    private static volatile String pauseAt;
    private static final AtomicBoolean PAUSED = new AtomicBoolean();
    private static final CountDownLatch RELEASED = new CountDownLatch(1);

    private Window() {}

    /**
     * Pauses the first subscription of {@code service} ({@code null}: none)
     * until stdin says {@code release}.
     */
    static void pauseAt(String service) {
        pauseAt = service;
        Thread reader = new Thread(Window::readCommands, "seed002-window");
        reader.setDaemon(true);
        reader.start();
    }

    private static void readCommands() {
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.trim().equals("release")) {
                    RELEASED.countDown();
                }
            }
        } catch (IOException e) {
            event("stdin failed " + e);
        }
    }

    /** Writes one event line. */
    public static void event(String what) {
        synchronized (System.out) {
            System.out.println(System.currentTimeMillis() + " " + what);
            System.out.flush();
        }
    }

    /** Dubbo is about to subscribe its listener to {@code service}. */
    public static void beforeSubscribe(String service) {
        if (service.equals(pauseAt) && PAUSED.compareAndSet(false, true)) {
            event("window " + service);
            try {
                if (!RELEASED.await(RELEASE_WITHIN_SECONDS, TimeUnit.SECONDS)) {
                    event("release-timed-out " + service);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            event("released " + service);
        }
        event("subscribe " + service);
    }

    /** Dubbo's listener was subscribed to {@code service}. */
    public static void afterSubscribe(String service) {
        event("subscribed " + service);
    }

    /** An instance query of {@code service} through {@code method} answered {@code instances}. */
    public static void queried(String method, String service, Object instances) {
        event("query " + service + " " + method + " " + describe(instances));
    }

    /** Dubbo's listener was called back. */
    public static void notified(Object event) {
        if (event instanceof NamingEvent naming) {
            event("listener " + naming.getServiceName() + " " + describe(naming.getInstances()));
        }
    }

    private static String describe(Object instances) {
        if (!(instances instanceof List<?> list)) {
            return "none";
        }
        long enabled = list.stream()
                .filter(i -> i instanceof Instance instance && instance.isEnabled())
                .count();
        return list.size() + " instances, " + enabled + " enabled";
    }
}
