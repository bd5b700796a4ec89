package dev.understudy.dubbo;

import com.alibaba.nacos.common.utils.JacksonUtils;
import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.NetworkInterface;
import java.net.SocketException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Predicate;
import java.util.function.Supplier;
import java.util.stream.Collectors;

/** What the tests share: waiting on conditions, and reading understudy's Nacos HTTP API. */
final class Support {
    private static final HttpClient HTTP = HttpClient.newBuilder()
            .connectTimeout(Duration.ofSeconds(5))
            .version(HttpClient.Version.HTTP_1_1)
            .build();

    private Support() {}

    /**
     * Waits until {@code check} returns a value {@code done} accepts, within
     * {@code within}; fails with {@code what} and the last value seen.
     */
    static <T> T await(String what, Duration within, Supplier<T> check, Predicate<T> done) {
        return dev.understudy.junit.Await.until(what, within, check, done);
    }

    /**
     * Fails unless lo is this JVM's only interface up: the network namespace
     * of netns/bin/java, Surefire's JVM here. Elsewhere Dubbo would register
     * and call the machine's network address, where the tests send nothing.
     */
    static void requireLoopbackOnly() {
        List<String> others = new ArrayList<>();
        try {
            for (NetworkInterface nic : java.util.Collections.list(NetworkInterface.getNetworkInterfaces())) {
                if (nic.isUp() && !nic.isLoopback()) {
                    others.add(nic.getName());
                }
            }
        } catch (SocketException e) {
            throw new IllegalStateException("listing the network interfaces", e);
        }
        if (!others.isEmpty()) {
            throw new IllegalStateException("interfaces up besides lo: " + others + "; run the tests with"
                    + " Maven, whose Surefire runs them in a network namespace (netns/bin/java)");
        }
    }

    /** A port free on every address now, for a provider to bind. */
    static int freePort() {
        try (ServerSocket socket = new ServerSocket()) {
            socket.bind(new InetSocketAddress(0));
            return socket.getLocalPort();
        } catch (IOException e) {
            throw new UncheckedIOException("no free port", e);
        }
    }

    /** An HTTP answer: status and body. */
    record Answer(int status, String body) {}

    /** {@code GET base + path?query} on understudy's HTTP API. */
    static Answer get(String base, String path, Map<String, String> query) {
        String encoded = query.entrySet().stream()
                .map(e -> URLEncoder.encode(e.getKey(), StandardCharsets.UTF_8) + "="
                        + URLEncoder.encode(e.getValue(), StandardCharsets.UTF_8))
                .collect(Collectors.joining("&"));
        HttpRequest request = HttpRequest.newBuilder(URI.create(base + path + "?" + encoded))
                .timeout(Duration.ofSeconds(10))
                .GET()
                .build();
        try {
            HttpResponse<String> answer = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
            return new Answer(answer.statusCode(), answer.body());
        } catch (IOException e) {
            throw new UncheckedIOException("GET " + base + path + "?" + encoded, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** An instance as understudy lists it: address and metadata. */
    record Listed(String address, Map<String, String> metadata) {}

    /** The instances of {@code service} in DEFAULT_GROUP, by address: GET /nacos/v1/ns/instance/list. */
    static List<Listed> instances(String base, String service) {
        Answer answer = get(base, "/nacos/v1/ns/instance/list", Map.of("serviceName", service));
        if (answer.status() != 200) {
            throw new IllegalStateException("instance list of " + service + " answered "
                    + answer.status() + ": " + answer.body());
        }
        List<Listed> listed = new ArrayList<>();
        for (JsonNode host : JacksonUtils.toObj(answer.body()).path("hosts")) {
            Map<String, String> metadata = new TreeMap<>();
            host.path("metadata").fields().forEachRemaining(e -> metadata.put(e.getKey(), e.getValue().asText()));
            listed.add(new Listed(host.path("ip").asText() + ":" + host.path("port").asInt(), metadata));
        }
        listed.sort(java.util.Comparator.comparing(Listed::address));
        return listed;
    }

    /** The addresses of {@link #instances}. */
    static List<String> addresses(String base, String service) {
        return instances(base, service).stream().map(Listed::address).toList();
    }

    /** A config's content (GET /nacos/v1/cs/configs), or null when understudy has none. */
    static String config(String base, String dataId, String group) {
        Answer answer = get(base, "/nacos/v1/cs/configs", Map.of("dataId", dataId, "group", group));
        if (answer.status() == 404) {
            return null;
        }
        if (answer.status() != 200) {
            throw new IllegalStateException("config " + dataId + "/" + group + " answered "
                    + answer.status() + ": " + answer.body());
        }
        return answer.body();
    }
}
