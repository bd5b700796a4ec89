package dev.understudy.nacos;

import static dev.understudy.nacos.Support.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.alibaba.nacos.api.naming.NamingFactory;
import com.alibaba.nacos.api.naming.NamingService;
import com.alibaba.nacos.api.naming.listener.NamingEvent;
import com.alibaba.nacos.api.naming.pojo.Instance;
import com.alibaba.nacos.api.naming.pojo.ListView;
import dev.understudy.junit.UnderstudyExtension;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/**
 * Naming with the official Java client: the calls a service makes, pushes to
 * a subscriber, persistent instances, and a client JVM killed. Each test
 * works in services of its own, named after it.
 */
abstract class NamingSuite {
    /** The node the tests run against. */
    abstract UnderstudyExtension understudy();

    private final List<NamingService> clients = new ArrayList<>();
    private final List<Process> forked = new ArrayList<>();

    NamingService client() throws Exception {
        return client(new Properties());
    }

    NamingService client(Properties extra) throws Exception {
        Properties props = Support.props(understudy(), understudy().serverAddr());
        props.putAll(extra);
        NamingService naming = NamingFactory.createNamingService(props);
        clients.add(naming);
        return naming;
    }

    @AfterEach
    void closeClients() throws Exception {
        for (Process p : forked) {
            p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
        for (NamingService naming : clients) {
            naming.shutDown();
        }
    }

    static String service(TestInfo test) {
        return "java." + test.getTestMethod().orElseThrow().getName();
    }

    static List<String> addresses(List<Instance> instances) {
        return instances.stream().map(i -> i.getIp() + ":" + i.getPort()).sorted().toList();
    }

    static Instance instance(String ip, int port, Map<String, String> metadata) {
        Instance instance = new Instance();
        instance.setIp(ip);
        instance.setPort(port);
        instance.setMetadata(new java.util.HashMap<>(metadata));
        return instance;
    }

    @Test
    void registersQueriesAndDeregisters(TestInfo test) throws Exception {
        String svc = service(test);
        NamingService naming = client();
        Instance a = instance("10.0.0.1", 8080, Map.of("zone", "hz"));
        a.setClusterName("c1");
        a.setWeight(2.0);
        naming.registerInstance(svc, a);
        // As in Nacos 2 and 3, a connection holds one instance of a service
        // (a second registration replaces the first): another client.
        client().registerInstance(svc, "10.0.0.2", 8080, "c2");

        List<Instance> all = await("both instances listed", Duration.ofSeconds(5),
                () -> uncheck(() -> naming.getAllInstances(svc)), l -> l.size() == 2);
        assertEquals(List.of("10.0.0.1:8080", "10.0.0.2:8080"), addresses(all));
        Instance first = all.stream().filter(i -> i.getIp().equals("10.0.0.1")).findFirst().orElseThrow();
        assertEquals("hz", first.getMetadata().get("zone"));
        assertEquals("c1", first.getClusterName());
        assertEquals(2.0, first.getWeight());
        assertTrue(first.isEphemeral() && first.isHealthy() && first.isEnabled(), first.toString());
        assertEquals(2, naming.selectInstances(svc, true).size());
        assertTrue(naming.selectOneHealthyInstance(svc).getIp().startsWith("10.0.0."));
        // Last: as with Nacos, the client's subscription narrowed to a
        // cluster replaces its subscription of the whole service.
        assertEquals(List.of("10.0.0.2:8080"),
                addresses(naming.getAllInstances(svc, List.of("c2"))));

        clients.get(1).deregisterInstance(svc, "10.0.0.2", 8080, "c2");
        await("the deregistered instance gone", Duration.ofSeconds(5),
                () -> uncheck(() -> addresses(naming.getAllInstances(svc, false))),
                l -> l.equals(List.of("10.0.0.1:8080")));
    }

    @Test
    void batchRegistersAndDeregisters(TestInfo test) throws Exception {
        String svc = service(test);
        NamingService naming = client();
        List<Instance> batch = List.of(instance("10.0.1.1", 80, Map.of()),
                instance("10.0.1.2", 80, Map.of()), instance("10.0.1.3", 80, Map.of()));
        naming.batchRegisterInstance(svc, "DEFAULT_GROUP", batch);
        await("the batch listed", Duration.ofSeconds(5),
                () -> uncheck(() -> addresses(naming.getAllInstances(svc, false))),
                l -> l.equals(List.of("10.0.1.1:80", "10.0.1.2:80", "10.0.1.3:80")));
        naming.batchDeregisterInstance(svc, "DEFAULT_GROUP", batch.subList(0, 2));
        await("two of the batch gone", Duration.ofSeconds(5),
                () -> uncheck(() -> addresses(naming.getAllInstances(svc, false))),
                l -> l.equals(List.of("10.0.1.3:80")));
    }

    @Test
    void aPersistentInstanceGoesOverGrpcAndStaysHealthyUntilRemoved(TestInfo test) throws Exception {
        String svc = service(test);
        NamingService naming = client();
        String grpcPersistent = "understudy_grpc_requests_total";
        double grpcBefore = Support.metric(understudy().metrics(), grpcPersistent,
                "type=\"PersistentInstanceRequest\"");
        double httpBefore = Support.metric(understudy().metrics(), "understudy_http_requests_total",
                "route=\"/nacos/v1/ns/instance\"", "method=\"POST\"");
        Instance persistent = instance("10.0.2.1", 9000, Map.of());
        persistent.setEphemeral(false);
        naming.registerInstance(svc, persistent);
        List<Instance> listed = await("the persistent instance listed", Duration.ofSeconds(5),
                () -> uncheck(() -> naming.getAllInstances(svc, false)), l -> l.size() == 1);
        assertFalse(listed.get(0).isEphemeral(), listed.toString());
        // The client chose gRPC: the server announces persistent instances
        // over gRPC (SERVER_SUPPORT_PERSISTENT_INSTANCE_BY_GRPC).
        String metrics = understudy().metrics();
        assertEquals(grpcBefore + 1, Support.metric(metrics, grpcPersistent,
                "type=\"PersistentInstanceRequest\""), "PersistentInstanceRequests seen");
        assertEquals(httpBefore, Support.metric(metrics, "understudy_http_requests_total",
                "route=\"/nacos/v1/ns/instance\"", "method=\"POST\""), "HTTP registrations seen");

        naming.deregisterInstance(svc, persistent);
        await("the persistent instance gone", Duration.ofSeconds(5),
                () -> uncheck(() -> naming.getAllInstances(svc, false)), List::isEmpty);
    }

    @Test
    void pagesTheServicesOfAGroup(TestInfo test) throws Exception {
        String group = "G_" + test.getTestMethod().orElseThrow().getName();
        NamingService naming = client();
        for (int i = 0; i < 5; i++) {
            naming.registerInstance("paged-" + i, group, "10.0.3." + i, 80);
        }
        ListView<String> first = await("five services", Duration.ofSeconds(5),
                () -> uncheck(() -> naming.getServicesOfServer(1, 2, group)), v -> v.getCount() == 5);
        assertEquals(2, first.getData().size(), first.getData().toString());
        ListView<String> last = naming.getServicesOfServer(3, 2, group);
        assertEquals(1, last.getData().size(), last.getData().toString());
        List<String> seen = new ArrayList<>(first.getData());
        seen.addAll(naming.getServicesOfServer(2, 2, group).getData());
        seen.addAll(last.getData());
        assertEquals(List.of("paged-0", "paged-1", "paged-2", "paged-3", "paged-4"),
                seen.stream().sorted().toList());
    }

    @Test
    void aNamespaceKeepsItsServicesApart(TestInfo test) throws Exception {
        String svc = service(test);
        Properties inNs = new Properties();
        inNs.setProperty("namespace", "java-ns-" + Support.line());
        NamingService isolated = client(inNs);
        NamingService shared = client();
        isolated.registerInstance(svc, "10.0.4.1", 80);
        shared.registerInstance(svc, "10.0.4.2", 80);
        await("each namespace lists its own", Duration.ofSeconds(5),
                () -> uncheck(() -> addresses(isolated.getAllInstances(svc, false))
                        + " " + addresses(shared.getAllInstances(svc, false))),
                s -> s.equals("[10.0.4.1:80] [10.0.4.2:80]"));
    }

    @Test
    void aSubscriberSeesAnAddAMetadataChangeAndARemoval(TestInfo test) throws Exception {
        String svc = service(test);
        NamingService subscriber = client();
        NamingService provider = client();
        List<List<Instance>> events = new CopyOnWriteArrayList<>();
        subscriber.subscribe(svc, event -> events.add(((NamingEvent) event).getInstances()));

        provider.registerInstance(svc, instance("10.0.5.1", 80, Map.of("v", "1")));
        awaitEvent(events, "the add", l -> l.size() == 1 && "1".equals(l.get(0).getMetadata().get("v")));
        provider.registerInstance(svc, instance("10.0.5.1", 80, Map.of("v", "2")));
        awaitEvent(events, "the metadata change",
                l -> l.size() == 1 && "2".equals(l.get(0).getMetadata().get("v")));
        provider.deregisterInstance(svc, "10.0.5.1", 80);
        awaitEvent(events, "the removal", List::isEmpty);
    }

    static void awaitEvent(List<List<Instance>> events, String what,
            java.util.function.Predicate<List<Instance>> matches) {
        await("a push of " + what + " within 3 s", Duration.ofSeconds(3),
                () -> events.isEmpty() ? null : events.get(events.size() - 1),
                last -> last != null && matches.test(last));
    }

    @Test
    void aKilledClientJvmsInstanceIsRemovedAndPushed(TestInfo test) throws Exception {
        String svc = service(test);
        NamingService subscriber = client();
        List<List<Instance>> events = new CopyOnWriteArrayList<>();
        subscriber.subscribe(svc, event -> events.add(((NamingEvent) event).getInstances()));

        Process jvm = fork(svc, "10.0.6.1", 7001);
        awaitEvent(events, "the forked JVM's registration",
                l -> addresses(l).equals(List.of("10.0.6.1:7001")));
        jvm.destroyForcibly();
        assertTrue(jvm.waitFor(10, TimeUnit.SECONDS), "the forked JVM did not die");
        awaitEvent(events, "the killed JVM's instance removed", List::isEmpty);
        assertTrue(subscriber.getAllInstances(svc, false).isEmpty());
    }

    /** Starts a {@link Registrant} JVM and waits until it has registered. */
    Process fork(String svc, String ip, int port) throws Exception {
        Path javaBin = Path.of(System.getProperty("java.home"), "bin", "java");
        List<String> command = new ArrayList<>(List.of(javaBin.toString(), "-cp",
                System.getProperty("java.class.path"), Registrant.class.getName(),
                understudy().serverAddr(), svc, ip, String.valueOf(port)));
        if (understudy().username() != null) {
            command.addAll(List.of(understudy().username(), understudy().password()));
        }
        Process jvm = new ProcessBuilder(command).redirectErrorStream(true).start();
        forked.add(jvm);
        BufferedReader out = new BufferedReader(new InputStreamReader(jvm.getInputStream(), StandardCharsets.UTF_8));
        StringBuilder printed = new StringBuilder();
        String line;
        while ((line = out.readLine()) != null) {
            if (line.equals("registered")) {
                Thread drain = new Thread(() -> {
                    try {
                        out.transferTo(java.io.Writer.nullWriter());
                    } catch (java.io.IOException ignored) {
                        // It was killed.
                    }
                });
                drain.setDaemon(true);
                drain.start();
                return jvm;
            }
            printed.append(line).append('\n');
        }
        throw new AssertionError("the forked client exited (" + jvm.waitFor() + ") before registering:\n" + printed);
    }

    interface Call<T> {
        T call() throws Exception;
    }

    static <T> T uncheck(Call<T> call) {
        try {
            return call.call();
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }
}
