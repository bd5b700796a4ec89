package dev.understudy.seed002;

/** The service the provider exports and every consumer calls. */
public interface Greeter {
    String greet(String name);
}
