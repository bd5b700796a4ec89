package dev.understudy.nacos;

import dev.understudy.junit.UnderstudyExtension;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@link ConfigSuite} once more with auth on: every client logs in with the
 * user's password, and the HTTP calls carry a token. (Renewal is
 * {@link AuthTest}'s: these tests end before a token does.)
 */
class AuthOnConfigTest extends ConfigSuite {
    @RegisterExtension
    static final UnderstudyExtension UNDERSTUDY =
            UnderstudyExtension.node().auth("nacos", "s3cret", AuthTest.TTL);

    @Override
    UnderstudyExtension understudy() {
        return UNDERSTUDY;
    }
}
