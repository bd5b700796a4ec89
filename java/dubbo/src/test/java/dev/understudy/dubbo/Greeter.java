package dev.understudy.dubbo;

/** The service the tests' providers expose. */
public interface Greeter {
    /** {@code hello WHO from PROVIDER}: the answer names the provider that gave it. */
    String greet(String who);
}
