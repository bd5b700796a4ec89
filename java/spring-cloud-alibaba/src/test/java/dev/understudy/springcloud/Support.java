package dev.understudy.springcloud;

import java.io.IOException;
import java.io.UncheckedIOException;
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
import java.util.function.Predicate;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import dev.understudy.junit.UnderstudyExtension;

/** What the tests share: waiting on conditions, and understudy's HTTP API. */
final class Support {
    private static final HttpClient HTTP = HttpClient.newBuilder()
            .connectTimeout(Duration.ofSeconds(5))
            .version(HttpClient.Version.HTTP_1_1)
            .build();
    private static final ObjectMapper JSON = new ObjectMapper();

    private Support() {}

    /**
     * Waits until {@code check} returns a value {@code done} accepts, within
     * {@code within}; fails with {@code what} and the last value seen.
     */
    static <T> T await(String what, Duration within, Supplier<T> check, Predicate<T> done) {
        return dev.understudy.junit.Await.until(what, within, check, done);
    }

    /** The instances understudy lists for {@code service}, as {@code ip:port}: {@code GET /nacos/v1/ns/instance/list}. */
    static List<String> listed(UnderstudyExtension understudy, String service) {
        String body = call("GET", understudy.url(), "/nacos/v1/ns/instance/list", Map.of("serviceName", service));
        try {
            JsonNode hosts = JSON.readTree(body).path("hosts");
            List<String> found = new ArrayList<>();
            for (JsonNode host : hosts) {
                found.add(host.path("ip").asText() + ":" + host.path("port").asInt());
            }
            return found;
        } catch (IOException e) {
            throw new IllegalStateException("instance list is not JSON: " + body, e);
        }
    }

    /** Publishes a config in {@code DEFAULT_GROUP}: {@code POST /nacos/v1/cs/configs}. */
    static void publish(UnderstudyExtension understudy, String dataId, String content) {
        String answer = call("POST", understudy.url(), "/nacos/v1/cs/configs",
                Map.of("dataId", dataId, "group", "DEFAULT_GROUP", "content", content, "type", "properties"));
        if (!answer.trim().equals("true")) {
            throw new AssertionError("publishing " + dataId + " answered " + answer);
        }
    }

    /**
     * The sum of every sample of metric {@code name} whose labels include
     * {@code label} (as {@code key="value"} text), in understudy's metrics.
     */
    static double metric(UnderstudyExtension understudy, String name, String label) {
        Pattern sample = Pattern.compile("^" + Pattern.quote(name) + "(\\{[^}]*\\})?\\s+(\\S+)$",
                Pattern.MULTILINE);
        Matcher m = sample.matcher(understudy.metrics());
        double sum = 0;
        while (m.find()) {
            if (m.group(1) != null && m.group(1).contains(label)) {
                sum += Double.parseDouble(m.group(2));
            }
        }
        return sum;
    }

    /** A plain HTTP call (no service discovery): the body of a 200 answer, else an error. */
    static String get(String url) {
        return send(HttpRequest.newBuilder(URI.create(url)).GET(), url);
    }

    /** A call of understudy's HTTP API; form parameters in the query (GET) or the body. */
    static String call(String method, String base, String path, Map<String, String> form) {
        String encoded = form.entrySet().stream()
                .map(e -> URLEncoder.encode(e.getKey(), StandardCharsets.UTF_8) + "="
                        + URLEncoder.encode(e.getValue(), StandardCharsets.UTF_8))
                .collect(Collectors.joining("&"));
        HttpRequest.Builder request;
        if (method.equals("GET")) {
            request = HttpRequest.newBuilder(URI.create(base + path + "?" + encoded)).GET();
        } else {
            request = HttpRequest.newBuilder(URI.create(base + path))
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .method(method, HttpRequest.BodyPublishers.ofString(encoded));
        }
        return send(request, method + " " + path);
    }

    private static String send(HttpRequest.Builder request, String what) {
        try {
            HttpResponse<String> answer = HTTP.send(request.timeout(Duration.ofSeconds(30)).build(),
                    HttpResponse.BodyHandlers.ofString());
            if (answer.statusCode() != 200) {
                throw new IllegalStateException(what + " answered " + answer.statusCode() + ": " + answer.body());
            }
            return answer.body();
        } catch (IOException e) {
            throw new UncheckedIOException(what, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted: " + what, e);
        }
    }
}
