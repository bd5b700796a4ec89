package dev.understudy.seed002;

import java.util.Map;
import org.apache.dubbo.config.ApplicationConfig;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.RpcException;

/**
 * A Dubbo consumer JVM of one run: it subscribes to the {@link Greeter} of
 * one version (the pair's own service) in interface mode, then calls it
 * every 200 ms for the watch time and writes each outcome as an event
 * ({@link Window}): {@code call ok} or {@code call failed <message>}, then
 * {@code done}.
 *
 * <p>Arguments: registry address, version, window ({@code default}: pause
 * after the instance query until released; {@code legacy}: the registry
 * parameter {@code nacos.subscribe.legacy-name=true}, no pause; {@code
 * none}), watch time in ms.
 */
public final class SeedConsumer {
    private static final long CALL_EVERY_MS = 200;

    private SeedConsumer() {}

    public static void main(String[] args) {
        int status = 0;
        try {
            run(args[0], args[1], args[2], Long.parseLong(args[3]));
        } catch (Throwable e) {
            Window.event("crashed " + e);
            e.printStackTrace();
            status = 1;
        }
        // Dubbo's threads would keep the JVM up.
        System.exit(status);
    }

    static String serviceName(String version) {
        return "providers:" + Greeter.class.getName() + ":" + version + ":";
    }

    private static void run(String registry, String version, String window, long watchMs) throws InterruptedException {
        Window.pauseAt(window.equals("default") ? serviceName(version) : null);
        RegistryProbe.install();

        ApplicationConfig app = new ApplicationConfig("seed002-consumer-" + version);
        app.setQosEnable(false);
        RegistryConfig registryConfig = new RegistryConfig(registry);
        if (window.equals("legacy")) {
            registryConfig.setParameters(Map.of("nacos.subscribe.legacy-name", "true"));
        }
        ReferenceConfig<Greeter> reference = new ReferenceConfig<>();
        reference.setInterface(Greeter.class);
        reference.setVersion(version);
        reference.setCheck(false);
        reference.setRetries(0);
        reference.setTimeout(2000);
        reference.setParameters(Map.of("migration.step", "FORCE_INTERFACE"));
        DubboBootstrap.getInstance()
                .application(app)
                .registry(registryConfig)
                .reference(reference)
                .start();
        Greeter greeter = reference.get();
        Window.event("ready");
        long end = System.currentTimeMillis() + watchMs;
        while (System.currentTimeMillis() < end) {
            try {
                greeter.greet("seed-002");
                Window.event("call ok");
            } catch (RpcException e) {
                String message = String.valueOf(e.getMessage());
                int cut = message.indexOf('\n');
                Window.event("call failed " + (cut < 0 ? message : message.substring(0, cut)));
            }
            Thread.sleep(CALL_EVERY_MS);
        }
        Window.event("done");
    }
}
