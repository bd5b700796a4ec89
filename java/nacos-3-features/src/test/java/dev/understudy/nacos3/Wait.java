package dev.understudy.nacos3;

import java.time.Duration;
import java.util.function.Predicate;
import java.util.function.Supplier;

/** Waiting on a condition with a deadline. */
final class Wait {
    private Wait() {}

    /** Polls {@code check} until {@code done} accepts its value; fails with {@code what} and the last value. */
    static <T> T until(String what, Duration within, Supplier<T> check, Predicate<T> done) {
        long deadline = System.nanoTime() + within.toNanos();
        T last = null;
        RuntimeException error = null;
        while (true) {
            try {
                last = check.get();
                error = null;
                if (done.test(last)) {
                    return last;
                }
            } catch (RuntimeException e) {
                error = e;
            }
            if (System.nanoTime() > deadline) {
                AssertionError failure = new AssertionError(
                        what + ": not within " + within.toMillis() + " ms; last seen: " + last);
                if (error != null) {
                    failure.initCause(error);
                }
                throw failure;
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted waiting for " + what, e);
            }
        }
    }
}
