package dev.understudy.dubbo;

import java.util.Map;
import org.apache.dubbo.config.ApplicationConfig;
import org.apache.dubbo.config.ProtocolConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.ServiceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;

/**
 * A Dubbo provider in a JVM of its own, forked by a test so that it can be
 * stopped (SIGTERM: Dubbo's shutdown hook unregisters it) or SIGKILLed. It
 * exports {@link Greeter} over the dubbo protocol, says {@code exported} on
 * stdout and serves until it is stopped.
 *
 * <p>Arguments: registry-address application name zone port metadata-type.
 * The zone goes into the service's parameters (the instance metadata of
 * interface-level registration) and into the application's labels
 * ({@code dubbo.labels}, the instance metadata of application-level
 * registration).
 */
public final class Provider {
    private Provider() {}

    public static void main(String[] args) {
        try {
            serve(args);
        } catch (Throwable e) {
            // Dubbo's threads would keep the JVM up: the test reads the trace.
            e.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
    }

    private static void serve(String[] args) {
        String registry = args[0];
        String application = args[1];
        String name = args[2];
        String zone = args[3];
        int port = Integer.parseInt(args[4]);
        String metadataType = args[5];

        System.setProperty("dubbo.labels", "zone=" + zone);
        ApplicationConfig app = new ApplicationConfig(application);
        app.setQosEnable(false);
        app.setMetadataType(metadataType);

        ServiceConfig<Greeter> service = new ServiceConfig<>();
        service.setInterface(Greeter.class);
        service.setRef(new Named(name));
        service.setParameters(Map.of("zone", zone));

        DubboBootstrap.getInstance()
                .application(app)
                .registry(new RegistryConfig(registry))
                .protocol(new ProtocolConfig("dubbo", port))
                .service(service)
                .start();
        System.out.println("exported");
        System.out.flush();
        DubboBootstrap.getInstance().await();
    }

    /** The greeter of provider {@code name}. */
    static final class Named implements Greeter {
        private final String name;

        Named(String name) {
            this.name = name;
        }

        @Override
        public String greet(String who) {
            return "hello " + who + " from " + name;
        }
    }
}
