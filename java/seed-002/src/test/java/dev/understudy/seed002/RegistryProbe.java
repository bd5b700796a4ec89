package dev.understudy.seed002;

import static net.bytebuddy.matcher.ElementMatchers.named;
import static net.bytebuddy.matcher.ElementMatchers.namedOneOf;
import static net.bytebuddy.matcher.ElementMatchers.takesArguments;

import java.lang.instrument.Instrumentation;
import net.bytebuddy.agent.ByteBuddyAgent;
import net.bytebuddy.agent.builder.AgentBuilder;
import net.bytebuddy.asm.Advice;
import net.bytebuddy.implementation.bytecode.assign.Assigner;

/**
 * The consumer's test-only agent: ByteBuddy advice woven into Dubbo's
 * Nacos registry before Dubbo loads it. It reports to {@link Window} the
 * instance queries ({@code NacosNamingServiceWrapper.getAllInstances} and,
 * from Dubbo 3.3.6, {@code getAllInstancesWithoutSubscription}), the
 * listener subscriptions ({@code NacosNamingServiceWrapper.subscribe},
 * where the pause happens) and the listener's callbacks
 * ({@code NacosRegistry.RegistryChildListenerImpl.onEvent}). Those names
 * are the same in every Dubbo 3.3 release the test runs.
 *
 * <p>The instrumentation comes from byte-buddy-agent's own premain: the
 * consumer JVM is started with {@code -javaagent:<byte-buddy-agent jar>}.
 */
final class RegistryProbe {
    private RegistryProbe() {}

    static void install() {
        Instrumentation instrumentation = ByteBuddyAgent.getInstrumentation();
        new AgentBuilder.Default()
                .type(named("org.apache.dubbo.registry.nacos.NacosNamingServiceWrapper"))
                .transform((builder, type, loader, module, domain) -> builder.visit(Advice.to(Subscribe.class)
                                .on(named("subscribe").and(takesArguments(3))))
                        .visit(Advice.to(Query.class)
                                .on(namedOneOf("getAllInstances", "getAllInstancesWithoutSubscription")
                                        .and(takesArguments(2)))))
                .type(named("org.apache.dubbo.registry.nacos.NacosRegistry$RegistryChildListenerImpl"))
                .transform((builder, type, loader, module, domain) ->
                        builder.visit(Advice.to(Listen.class).on(named("onEvent"))))
                .installOn(instrumentation);
    }

    /** Around {@code subscribe(serviceName, group, listener)}. */
    public static final class Subscribe {
        private Subscribe() {}

        @Advice.OnMethodEnter
        public static void enter(@Advice.Argument(0) String service) {
            Window.beforeSubscribe(service);
        }

        @Advice.OnMethodExit(onThrowable = Throwable.class)
        public static void exit(@Advice.Argument(0) String service) {
            Window.afterSubscribe(service);
        }
    }

    /** After an instance query. */
    public static final class Query {
        private Query() {}

        @Advice.OnMethodExit(onThrowable = Throwable.class)
        public static void exit(
                @Advice.Origin("#m") String method,
                @Advice.Argument(0) String service,
                @Advice.Return(typing = Assigner.Typing.DYNAMIC) Object instances) {
            Window.queried(method, service, instances);
        }
    }

    /** Before the listener handles an event. */
    public static final class Listen {
        private Listen() {}

        @Advice.OnMethodEnter
        public static void enter(@Advice.Argument(0) Object event) {
            Window.notified(event);
        }
    }
}
