package dev.understudy.seed002;

import com.alibaba.nacos.common.utils.JacksonUtils;
import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;

/**
 * The calls the test makes to understudy over HTTP: the Nacos instance
 * update the seed's console makes, and the client-race endpoints of the
 * chaos API (trace, hold, holds, events, acks).
 */
final class Understudy {
    private static final HttpClient HTTP = HttpClient.newBuilder()
            .connectTimeout(Duration.ofSeconds(5))
            .version(HttpClient.Version.HTTP_1_1)
            .build();

    private final String base;

    Understudy(String base) {
        this.base = base;
    }

    /** An answer: its status and JSON body. */
    record Answer(int status, JsonNode body) {}

    private Answer send(String method, String path, Map<String, String> form) {
        String query = form.entrySet().stream()
                .map(e -> URLEncoder.encode(e.getKey(), StandardCharsets.UTF_8) + "="
                        + URLEncoder.encode(e.getValue(), StandardCharsets.UTF_8))
                .collect(Collectors.joining("&"));
        HttpRequest request = HttpRequest.newBuilder(URI.create(base + path + (query.isEmpty() ? "" : "?" + query)))
                .timeout(Duration.ofSeconds(60))
                .method(method, HttpRequest.BodyPublishers.noBody())
                .build();
        try {
            HttpResponse<String> response = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
            String text = response.body();
            JsonNode body = text.startsWith("{") || text.startsWith("[")
                    ? JacksonUtils.toObj(text)
                    : JacksonUtils.createEmptyJsonNode().put("text", text);
            return new Answer(response.statusCode(), body);
        } catch (IOException e) {
            throw new IllegalStateException(method + " " + path + " failed", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    private JsonNode ok(String method, String path, Map<String, String> form) {
        Answer answer = send(method, path, form);
        if (answer.status() != 200) {
            throw new AssertionError(method + " " + path + " " + form + ": " + answer.status() + " " + answer.body());
        }
        return answer.body();
    }

    private static Map<String, String> form(String... pairs) {
        Map<String, String> form = new LinkedHashMap<>();
        for (int i = 0; i + 1 < pairs.length; i += 2) {
            form.put(pairs[i], pairs[i + 1]);
        }
        return form;
    }

    /** Enables or disables an instance, as the console's online and offline do. */
    void setEnabled(String service, String ip, int port, boolean enabled) {
        ok("PUT", "/nacos/v1/ns/instance", form(
                "serviceName", service, "ip", ip, "port", Integer.toString(port),
                "ephemeral", "true", "enabled", Boolean.toString(enabled)));
    }

    /** How many instances of {@code service} are listed (enabled ones: the v1 list leaves disabled ones out). */
    int listed(String service) {
        Answer answer = send("GET", "/nacos/v1/ns/instance/list", form("serviceName", service));
        return answer.status() == 200 ? answer.body().path("hosts").size() : 0;
    }

    /** Traces {@code service}'s events. */
    void trace(String service) {
        ok("POST", "/understudy/v1/chaos/trace", form("serviceName", service));
    }

    /** Holds the next request of {@code service}'s first subscriber while the instance is enabled; the hold's id. */
    long holdEnabling(String service, String ip, int port, Duration timeout) {
        JsonNode hold = ok("POST", "/understudy/v1/chaos/hold", form(
                "serviceName", service, "ip", ip, "port", Integer.toString(port), "enabled", "true",
                "timeout", timeout.toMillis() + "ms"));
        return hold.path("id").asLong();
    }

    /** Hold {@code id} as the API shows it, or a missing node. */
    JsonNode hold(long id) {
        for (JsonNode hold : ok("GET", "/understudy/v1/chaos/holds", Map.of()).path("holds")) {
            if (hold.path("id").asLong() == id) {
                return hold;
            }
        }
        return JacksonUtils.createEmptyJsonNode();
    }

    /** The traced events of {@code service}, oldest first. */
    JsonNode events(String service) {
        return ok("GET", "/understudy/v1/chaos/events", form("serviceName", service)).path("events");
    }

    /** The connections subscribed to {@code service} now. */
    Set<String> subscribers(String service) {
        Set<String> ids = new TreeSet<>();
        for (JsonNode c : ok("GET", "/understudy/v1/chaos/acks", form("serviceName", service)).path("connections")) {
            ids.add(c.path("connectionId").asText());
        }
        return ids;
    }

    /**
     * Waits until every subscriber of {@code service} has acknowledged its
     * current revision; the answer (409 when {@code wait} ran out).
     */
    Answer acknowledged(String service, Duration wait) {
        return send("GET", "/understudy/v1/chaos/acks", form("serviceName", service, "wait", wait.toMillis() + "ms"));
    }
}
