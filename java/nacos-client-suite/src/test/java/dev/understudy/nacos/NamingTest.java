package dev.understudy.nacos;

import dev.understudy.junit.UnderstudyExtension;
import org.junit.jupiter.api.extension.RegisterExtension;

/** {@link NamingSuite} on one node. */
class NamingTest extends NamingSuite {
    @RegisterExtension
    static final UnderstudyExtension UNDERSTUDY = UnderstudyExtension.node();

    @Override
    UnderstudyExtension understudy() {
        return UNDERSTUDY;
    }
}
