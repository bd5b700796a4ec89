package dev.understudy.junit;

import java.time.Duration;
import java.util.function.Predicate;
import java.util.function.Supplier;

/**
 * Waiting on a condition with a deadline, for tests of a registry whose
 * answers settle (a push, a replication, a client's reconnection) rather
 * than sleeping and hoping.
 *
 * <pre>{@code
 * Await.until("the instance listed", Duration.ofSeconds(5),
 *         () -> naming.getAllInstances("orders"), list -> list.size() == 1);
 * }</pre>
 */
public final class Await {
    private Await() {}

    /**
     * Polls {@code check} every 20 ms until {@code done} accepts its value, and
     * returns that value; after {@code within}, fails with an
     * {@link AssertionError} naming {@code what} and the last value seen (and,
     * as its cause, the exception of a last check that threw).
     */
    public static <T> T until(String what, Duration within, Supplier<T> check, Predicate<T> done) {
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
