package dev.understudy.dubbo;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.dubbo.config.ApplicationConfig;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcException;
import org.apache.dubbo.rpc.cluster.ClusterInvoker;
import org.apache.dubbo.rpc.model.FrameworkModel;

/**
 * A Dubbo consumer of {@link Greeter} in the test's JVM, an application of
 * its own. Its discovery is pinned with the reference's
 * {@code migration.step}: {@code FORCE_INTERFACE} or {@code FORCE_APPLICATION},
 * so it never falls back to the other kind. It does not retry: a call that
 * reaches a dead provider fails.
 */
final class Consumer implements AutoCloseable {
    /** How the consumer discovers providers, as its {@code migration.step}. */
    enum Discovery {
        INTERFACE("interface", "FORCE_INTERFACE"),
        APPLICATION("instance", "FORCE_APPLICATION");

        /** The providers' {@code register-mode}. */
        final String registerMode;
        /** The consumer's {@code migration.step}. */
        final String step;

        Discovery(String registerMode, String step) {
            this.registerMode = registerMode;
            this.step = step;
        }
    }

    private final FrameworkModel framework = new FrameworkModel();
    private final ReferenceConfig<Greeter> reference;
    private final Greeter greeter;

    Consumer(String registry, String application, Discovery discovery) {
        Support.requireLoopbackOnly();
        ApplicationConfig app = new ApplicationConfig(application);
        app.setQosEnable(false);
        reference = new ReferenceConfig<>();
        reference.setInterface(Greeter.class);
        reference.setCheck(false);
        reference.setRetries(0);
        reference.setTimeout(5000);
        reference.setParameters(Map.of("migration.step", discovery.step));
        DubboBootstrap.newInstance(framework)
                .application(app)
                .registry(new RegistryConfig(registry))
                .reference(reference)
                .start();
        greeter = reference.get();
    }

    /** One call: the name of the provider that answered. */
    String call() {
        String answer = greeter.greet("understudy");
        String prefix = "hello understudy from ";
        if (!answer.startsWith(prefix)) {
            throw new AssertionError("unexpected answer: " + answer);
        }
        return answer.substring(prefix.length());
    }

    /** {@code n} calls: how many each provider answered, failures counted under their exception. */
    Map<String, Integer> tally(int n) {
        Map<String, Integer> counts = new TreeMap<>();
        for (int i = 0; i < n; i++) {
            String who;
            try {
                who = call();
            } catch (RpcException e) {
                who = "failed: " + e.getClass().getSimpleName() + " (code " + e.getCode() + ")";
            }
            counts.merge(who, 1, Integer::sum);
        }
        return counts;
    }

    /**
     * The provider addresses in the consumer's directory: every invoker the
     * registry's notifications left it, reachable or not.
     */
    @SuppressWarnings("deprecation") // getInvoker(): "just for test", in Dubbo's words
    List<String> directory() {
        Invoker<?> invoker = reference.getInvoker();
        if (!(invoker instanceof ClusterInvoker<?> cluster) || cluster.getDirectory() == null) {
            return List.of();
        }
        return cluster.getDirectory().getAllInvokers().stream()
                .map(i -> i.getUrl().getHost() + ":" + i.getUrl().getPort())
                .sorted()
                .toList();
    }

    @Override
    public void close() {
        // Its own framework model: destroyed, it leaves no registry client behind.
        framework.destroy();
    }
}
