package dev.understudy.junit;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * A JUnit 5 extension that runs understudy for a test: one node, or a
 * multi-DC cluster ({@code understudy sim}), on free ports.
 *
 * <pre>{@code
 * @RegisterExtension
 * static final UnderstudyExtension understudy = UnderstudyExtension.node();
 *
 * @Test
 * void registers() throws Exception {
 *     NamingService naming = NacosFactory.createNamingService(understudy.serverAddr());
 *     ...
 * }
 * }</pre>
 *
 * <p>In a {@code static} field the process is started before the class's
 * first test and stopped once the class is done, after every other
 * extension's {@code afterAll} (so a Spring context closed then still
 * deregisters from a live node); in an instance field, each test gets its
 * own. Reading an address ({@link #serverAddr()}, {@link #nodes()}, ...)
 * before that starts it early, as a Spring {@code @DynamicPropertySource}
 * may. Outside JUnit, {@link #start()} and {@link #stop()} do the same. The
 * binary is found by {@link UnderstudyBinary#locate()}.
 */
public final class UnderstudyExtension implements BeforeAllCallback, BeforeEachCallback {
    private static final String HOST = "127.0.0.1";
    private static final Pattern NODE_ROW = Pattern.compile(
            "^(\\d+)\\s+(\\S+)\\s+(\\S+):(\\d+)\\s+(\\S+):(\\d+)\\s+(\\S+)$");

    private final List<String> dcs;
    private final List<String> args = new ArrayList<>();
    private final List<String> links = new ArrayList<>();
    private Duration startTimeout = Duration.ofSeconds(60);
    private String username;
    private String password;
    private Duration tokenTtl;
    private final List<String> exported = new ArrayList<>();

    private final HttpClient http = HttpClient.newBuilder()
            .connectTimeout(Duration.ofSeconds(5))
            .version(HttpClient.Version.HTTP_1_1)
            .build();
    private Child child;
    private int httpPort;
    private final Map<Integer, ClusterNode> nodes = new LinkedHashMap<>();
    private int leader;
    private boolean perClass;

    private UnderstudyExtension(List<String> dcs) {
        this.dcs = dcs;
    }

    /** One node: {@code understudy --http-port P --grpc-port P+1000}. */
    public static UnderstudyExtension node() {
        return new UnderstudyExtension(List.of());
    }

    /**
     * A cluster in one process: {@code understudy sim --dc hz=2 --dc sh=1},
     * each DC given as {@code NAME=COUNT}; node ids follow the order given.
     */
    public static UnderstudyExtension cluster(String... dcs) {
        if (dcs.length == 0) {
            throw new IllegalArgumentException("a cluster needs at least one DC, as NAME=COUNT");
        }
        return new UnderstudyExtension(List.of(dcs));
    }

    /** More flags for the node (any of {@code understudy --help}'s but the ports) or the sim. */
    public UnderstudyExtension args(String... more) {
        args.addAll(Arrays.asList(more));
        return this;
    }

    /** Link faults from the start, as {@code understudy sim --link} takes them: {@code hz-sh=40ms~10ms,loss=1%}. */
    public UnderstudyExtension links(String... specs) {
        requireCluster("links");
        links.addAll(Arrays.asList(specs));
        return this;
    }

    /**
     * Sets the system property {@code name} to {@link #serverAddr()} while the
     * node or cluster runs, for settings read before a test can pass them
     * (Spring's {@code spring.config.import} reads
     * {@code spring.cloud.nacos.config.server-addr} before any
     * {@code @DynamicPropertySource}).
     */
    public UnderstudyExtension systemProperty(String name) {
        exported.add(name);
        return this;
    }

    /** How long the process may take to be ready (60 s by default). */
    public UnderstudyExtension startTimeout(Duration timeout) {
        startTimeout = timeout;
        return this;
    }

    /**
     * Auth on, with one admin user and tokens that live {@code tokenTtl}
     * (whole seconds), so a client must log in again within a test.
     */
    public UnderstudyExtension auth(String user, String pass, Duration ttl) {
        if (!dcs.isEmpty()) {
            throw new IllegalStateException("auth is set up for a single node; a sim runs without it");
        }
        if (ttl.toSeconds() < 1) {
            throw new IllegalArgumentException("the token lifetime is whole seconds, at least 1");
        }
        username = user;
        password = pass;
        tokenTtl = ttl;
        return this;
    }

    @Override
    public void beforeAll(ExtensionContext context) {
        perClass = true;
        ensureStarted();
        stopWhenClosed(context);
    }

    @Override
    public void beforeEach(ExtensionContext context) {
        if (!perClass) {
            ensureStarted();
            stopWhenClosed(context);
        }
    }

    /**
     * Stops the process when {@code context} closes: after every extension's
     * {@code afterAll} (or {@code afterEach}), whatever order they run in.
     */
    private void stopWhenClosed(ExtensionContext context) {
        context.getStore(ExtensionContext.Namespace.create(UnderstudyExtension.class, this))
                .put("stop", new Stopper(this));
    }

    /**
     * Closed by JUnit with its context: as an {@code AutoCloseable} from JUnit
     * 5.13, as a {@code CloseableResource} before (Spring Boot 3.2 brings 5.10).
     * Stopping twice stops once.
     */
    @SuppressWarnings("deprecation")
    private record Stopper(UnderstudyExtension extension)
            implements ExtensionContext.Store.CloseableResource, AutoCloseable {
        @Override
        public void close() {
            extension.stop();
        }
    }

    private synchronized void ensureStarted() {
        if (child == null) {
            start();
        }
    }

    /** Starts the node or cluster; returns once it serves. */
    public synchronized void start() {
        if (child != null) {
            throw new IllegalStateException("already started: " + child.describe());
        }
        Path binary = UnderstudyBinary.locate();
        try {
            if (dcs.isEmpty()) {
                startNode(binary);
            } else {
                startCluster(binary);
            }
            for (String name : exported) {
                System.setProperty(name, serverAddr());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            stop();
            throw new IllegalStateException("interrupted while understudy started", e);
        }
    }

    /** Stops the node or cluster (SIGTERM, then SIGKILL after 10 s); the exit code, or 0 if none ran. */
    public synchronized int stop() {
        if (child == null) {
            return 0;
        }
        int code = child.stop(Duration.ofSeconds(10));
        child = null;
        nodes.clear();
        for (String name : exported) {
            System.clearProperty(name);
        }
        return code;
    }

    private void startNode(Path binary) throws InterruptedException {
        Path config = username == null ? null : authConfig(binary);
        String failures = "";
        for (int attempt = 0; attempt < 5; attempt++) {
            int port = freePortPair();
            List<String> command = new ArrayList<>(List.of(binary.toString(),
                    "--bind", HOST, "--http-port", String.valueOf(port),
                    "--grpc-port", String.valueOf(port + 1000), "--log", "warn"));
            if (config != null) {
                command.addAll(List.of("--config", config.toString()));
            }
            command.addAll(args);
            Child started = new Child(command);
            long deadline = System.nanoTime() + startTimeout.toNanos();
            if (awaitReady(started, port, deadline)) {
                child = started;
                httpPort = port;
                return;
            }
            String why = started.describe();
            started.stop(Duration.ofSeconds(1));
            if (!why.contains("in use")) {
                throw new IllegalStateException("understudy did not get ready within "
                        + startTimeout.toSeconds() + " s: " + why);
            }
            failures += "\n" + why;
        }
        throw new IllegalStateException("understudy lost its ports to other processes five times:" + failures);
    }

    private void startCluster(Path binary) throws InterruptedException {
        List<String> command = new ArrayList<>(List.of(binary.toString(), "sim", "--base-port", "0",
                "--bind", HOST, "--log", "warn"));
        for (String dc : dcs) {
            command.addAll(List.of("--dc", dc));
        }
        for (String link : links) {
            command.addAll(List.of("--link", link));
        }
        command.addAll(args);
        Child started = new Child(command);
        long deadline = System.nanoTime() + startTimeout.toNanos();
        String leaderLine = started.awaitLine("leader: node ", deadline);
        if (leaderLine == null) {
            String why = started.describe();
            started.stop(Duration.ofSeconds(1));
            throw new IllegalStateException("understudy sim printed no leader within "
                    + startTimeout.toSeconds() + " s: " + why);
        }
        for (String line : started.stdout()) {
            Matcher row = NODE_ROW.matcher(line.trim());
            if (row.matches()) {
                int id = Integer.parseInt(row.group(1));
                nodes.put(id, new ClusterNode(id, row.group(2), row.group(3),
                        Integer.parseInt(row.group(4)), Integer.parseInt(row.group(6))));
            }
        }
        leader = Integer.parseInt(leaderLine.substring("leader: node ".length()).trim());
        for (ClusterNode node : nodes.values()) {
            if (!awaitReady(started, node.httpPort(), deadline)) {
                String why = started.describe();
                started.stop(Duration.ofSeconds(1));
                nodes.clear();
                throw new IllegalStateException(node + " was not ready within "
                        + startTimeout.toSeconds() + " s: " + why);
            }
        }
        child = started;
    }

    /** Waits for {@code GET /ready} to answer 200 and the gRPC port to accept. */
    private boolean awaitReady(Child process, int port, long deadlineNanos) throws InterruptedException {
        URI ready = URI.create("http://" + HOST + ":" + port + "/ready");
        while (System.nanoTime() < deadlineNanos && process.alive()) {
            try {
                HttpResponse<Void> answer = http.send(
                        HttpRequest.newBuilder(ready).timeout(Duration.ofSeconds(2)).build(),
                        HttpResponse.BodyHandlers.discarding());
                if (answer.statusCode() == 200 && accepts(port + 1000)) {
                    return true;
                }
            } catch (IOException notYet) {
                // Not listening yet.
            }
            Thread.sleep(20);
        }
        return false;
    }

    private static boolean accepts(int port) {
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress(HOST, port), 1000);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** A free port P whose P + 1000 was free too. */
    private static int freePortPair() {
        for (int i = 0; i < 100; i++) {
            try (ServerSocket http = new ServerSocket(0, 1, java.net.InetAddress.getByName(HOST))) {
                int port = http.getLocalPort();
                if (port + 1000 > 65535) {
                    continue;
                }
                try (ServerSocket grpc = new ServerSocket(port + 1000, 1, java.net.InetAddress.getByName(HOST))) {
                    return port;
                } catch (IOException taken) {
                    // Try another.
                }
            } catch (IOException e) {
                throw new UncheckedIOException("no free port on " + HOST, e);
            }
        }
        throw new IllegalStateException("no free port pair P, P + 1000 in 100 tries");
    }

    /** A config file turning auth on, with the user's bcrypt hash as the binary makes it. */
    private Path authConfig(Path binary) throws InterruptedException {
        try {
            Process hash = new ProcessBuilder(binary.toString(), "ctl", "hash-password", "--cost", "4")
                    .redirectErrorStream(true)
                    .start();
            hash.getOutputStream().write(password.getBytes(StandardCharsets.UTF_8));
            hash.getOutputStream().close();
            String printed = new String(hash.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
            if (!hash.waitFor(30, TimeUnit.SECONDS) || hash.exitValue() != 0 || !printed.startsWith("$2")) {
                throw new IllegalStateException("understudy ctl hash-password failed: " + printed);
            }
            byte[] secret = new byte[32];
            new SecureRandom().nextBytes(secret);
            String toml = "auth_enabled = true\n"
                    + "auth_token_secret = \"" + HexFormat.of().formatHex(secret) + "\"\n"
                    + "auth_token_ttl_s = " + tokenTtl.toSeconds() + "\n"
                    + "[[users]]\n"
                    + "name = \"" + username.replace("\"", "\\\"") + "\"\n"
                    + "password_hash = \"" + printed + "\"\n"
                    + "admin = true\n";
            Path file = Files.createTempFile("understudy-auth", ".toml");
            file.toFile().deleteOnExit();
            Files.writeString(file, toml, StandardCharsets.UTF_8);
            return file;
        } catch (IOException e) {
            throw new UncheckedIOException("writing the auth config", e);
        }
    }

    // ---- what a test reads

    /**
     * A Nacos client's {@code serverAddr}: {@code 127.0.0.1:P} for a node, every
     * node's address comma-separated for a cluster.
     */
    public String serverAddr() {
        running();
        if (dcs.isEmpty()) {
            return HOST + ":" + httpPort;
        }
        return nodes.values().stream().map(ClusterNode::serverAddr).collect(Collectors.joining(","));
    }

    /** The node's HTTP port (for a cluster, node 1's). */
    public int httpPort() {
        running();
        return dcs.isEmpty() ? httpPort : nodes.values().iterator().next().httpPort();
    }

    /** The node's gRPC port: {@link #httpPort()} + 1000, where Nacos clients look. */
    public int grpcPort() {
        return httpPort() + 1000;
    }

    /** {@code http://127.0.0.1:P} (for a cluster, node 1's); the Nacos HTTP API is under {@code /nacos}. */
    public String url() {
        return "http://" + HOST + ":" + httpPort();
    }

    /** What the process has logged so far (its stderr). */
    public String log() {
        running();
        return child.log();
    }

    /** The process id of the node, or of the sim that runs the cluster. */
    public long pid() {
        running();
        return child.pid();
    }

    /** The auth user given to {@link #auth}, or null. */
    public String username() {
        return username;
    }

    /** The auth password given to {@link #auth}, or null. */
    public String password() {
        return password;
    }

    /** Logs in as the auth user over HTTP and returns the access token. */
    public String login() {
        if (username == null) {
            throw new IllegalStateException("auth is off: give auth(user, password, ttl) to log in");
        }
        String body = "username=" + URLEncoder.encode(username, StandardCharsets.UTF_8)
                + "&password=" + URLEncoder.encode(password, StandardCharsets.UTF_8);
        String answer = call("POST", url(), "/nacos/v1/auth/users/login", body);
        Matcher token = Pattern.compile("\"accessToken\"\\s*:\\s*\"([^\"]+)\"").matcher(answer);
        if (!token.find()) {
            throw new IllegalStateException("no accessToken in the login answer: " + answer);
        }
        return token.group(1);
    }

    /** The node's Prometheus metrics, as {@code GET /metrics} answers (for a cluster, node 1's). */
    public String metrics() {
        return call("GET", url(), "/metrics", null);
    }

    /** SIGKILL to the node's process (for a cluster, to the sim: every node). */
    public synchronized void kill() {
        running();
        child.kill();
    }

    // ---- a cluster

    /** Every node of the cluster, by id. */
    public List<ClusterNode> nodes() {
        requireCluster("nodes");
        running();
        return List.copyOf(nodes.values());
    }

    /** Node {@code id}. */
    public ClusterNode node(int id) {
        requireCluster("node");
        running();
        ClusterNode node = nodes.get(id);
        if (node == null) {
            throw new IllegalArgumentException("no node " + id + " in " + nodes.values());
        }
        return node;
    }

    /** A DC's nodes, in id order. */
    public List<ClusterNode> inDc(String dc) {
        return nodes().stream().filter(n -> n.dc().equals(dc)).toList();
    }

    /** The leader the sim printed once it was ready. */
    public int leader() {
        requireCluster("leader");
        running();
        return leader;
    }

    /** Cuts DCs {@code a} and {@code b} apart (both directions). */
    public void partition(String a, String b) {
        chaos("partition?a=" + enc(a) + "&b=" + enc(b), -1);
    }

    /** Heals every cut and resumes every paused node. */
    public void heal() {
        chaos("heal", -1);
    }

    /** Heals the cut between DCs {@code a} and {@code b}. */
    public void heal(String a, String b) {
        chaos("heal?a=" + enc(a) + "&b=" + enc(b), -1);
    }

    /** Sets DC links, as {@code hz-sh=300ms~50ms,loss=5%} ({@code perfect} clears one). */
    public void link(String spec) {
        chaos("links?link=" + enc(spec), -1);
    }

    /** Cuts every raft link of node {@code id}; its client APIs keep answering from its stale view. */
    public void pause(int id) {
        chaos("pause?node=" + id, -1);
    }

    /** Undoes {@link #pause(int)}. */
    public void resume(int id) {
        chaos("resume?node=" + id, -1);
    }

    /** Crashes node {@code id}: its ports close at once, its clients lose their connections. */
    public void kill(int id) {
        ClusterNode victim = node(id);
        chaos("kill?node=" + id, id);
        victim.markKilled();
    }

    /** A chaos admin call, made on a live node other than {@code avoid}. */
    private void chaos(String action, int avoid) {
        requireCluster("chaos");
        running();
        ClusterNode through = nodes.values().stream()
                .filter(n -> !n.killed() && n.id() != avoid)
                .findFirst()
                .orElseThrow(() -> new IllegalStateException("no live node to ask for " + action));
        call("POST", through.url(), "/understudy/v1/chaos/" + action, null);
    }

    private String call(String method, String base, String path, String form) {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(base + path))
                .timeout(Duration.ofSeconds(30));
        if (form != null) {
            request.header("Content-Type", "application/x-www-form-urlencoded")
                    .method(method, HttpRequest.BodyPublishers.ofString(form));
        } else {
            request.method(method, HttpRequest.BodyPublishers.noBody());
        }
        try {
            HttpResponse<String> answer = http.send(request.build(), HttpResponse.BodyHandlers.ofString());
            if (answer.statusCode() != 200) {
                throw new IllegalStateException(method + " " + path + " answered "
                        + answer.statusCode() + ": " + answer.body());
            }
            return answer.body();
        } catch (IOException e) {
            throw new UncheckedIOException(method + " " + base + path, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted: " + method + " " + path, e);
        }
    }

    private static String enc(String text) {
        return URLEncoder.encode(text, StandardCharsets.UTF_8);
    }

    private void requireCluster(String what) {
        if (dcs.isEmpty()) {
            throw new IllegalStateException(what + " is for a cluster: UnderstudyExtension.cluster(\"hz=2\", ...)");
        }
    }

    /** Starts the node or cluster if nothing runs yet: a test reads its addresses. */
    private void running() {
        ensureStarted();
    }
}
