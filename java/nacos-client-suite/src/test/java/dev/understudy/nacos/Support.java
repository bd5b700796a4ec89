package dev.understudy.nacos;

import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.function.Predicate;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import dev.understudy.junit.UnderstudyExtension;

/** What the suite's tests share: waiting on conditions, the HTTP API, metrics, client settings. */
final class Support {
    private static final HttpClient HTTP = HttpClient.newBuilder()
            .connectTimeout(Duration.ofSeconds(5))
            .version(HttpClient.Version.HTTP_1_1)
            .build();

    private Support() {}

    /** The client line under test: 2 or 3 (set by the module's pom). */
    static int line() {
        return Integer.parseInt(System.getProperty("nacos.client.line", "0"));
    }

    /**
     * Waits until {@code check} returns a value {@code done} accepts, within
     * {@code within}; fails with {@code what} and the last value seen.
     */
    static <T> T await(String what, Duration within, Supplier<T> check, Predicate<T> done) {
        return dev.understudy.junit.Await.until(what, within, check, done);
    }

    /** Client properties for {@code serverAddr}, with the user and password when auth is on. */
    static Properties props(UnderstudyExtension understudy, String serverAddr) {
        Properties props = new Properties();
        props.setProperty("serverAddr", serverAddr);
        if (understudy.username() != null) {
            props.setProperty("username", understudy.username());
            props.setProperty("password", understudy.password());
        }
        return props;
    }

    /** An HTTP answer: status and body. */
    record Answer(int status, String body) {}

    /** A call of the HTTP API of {@code base} ({@code http://host:port}); form parameters in the body. */
    static Answer http(String method, String base, String path, Map<String, String> form) {
        String encoded = form.entrySet().stream()
                .map(e -> URLEncoder.encode(e.getKey(), StandardCharsets.UTF_8) + "="
                        + URLEncoder.encode(e.getValue(), StandardCharsets.UTF_8))
                .collect(Collectors.joining("&"));
        HttpRequest.Builder request;
        if (method.equals("GET") || method.equals("DELETE")) {
            String query = encoded.isEmpty() ? "" : (path.contains("?") ? "&" : "?") + encoded;
            request = HttpRequest.newBuilder(URI.create(base + path + query))
                    .method(method, HttpRequest.BodyPublishers.noBody());
        } else {
            request = HttpRequest.newBuilder(URI.create(base + path))
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .method(method, HttpRequest.BodyPublishers.ofString(encoded));
        }
        try {
            HttpResponse<String> answer = HTTP.send(request.timeout(Duration.ofSeconds(30)).build(),
                    HttpResponse.BodyHandlers.ofString());
            return new Answer(answer.statusCode(), answer.body());
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(method + " " + base + path, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /**
     * The sum of every sample of metric {@code name} whose labels include
     * {@code labels} (as {@code key="value"} text), in Prometheus text.
     */
    static double metric(String metrics, String name, String... labels) {
        Pattern sample = Pattern.compile("^" + Pattern.quote(name) + "(\\{[^}]*\\})?\\s+(\\S+)$",
                Pattern.MULTILINE);
        Matcher m = sample.matcher(metrics);
        double sum = 0;
        outer:
        while (m.find()) {
            String set = m.group(1) == null ? "" : m.group(1);
            for (String label : labels) {
                if (!set.contains(label)) {
                    continue outer;
                }
            }
            sum += Double.parseDouble(m.group(2));
        }
        return sum;
    }
}
