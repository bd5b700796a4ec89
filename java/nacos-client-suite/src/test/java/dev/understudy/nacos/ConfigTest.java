package dev.understudy.nacos;

import dev.understudy.junit.UnderstudyExtension;
import org.junit.jupiter.api.extension.RegisterExtension;

/** {@link ConfigSuite} on one node. */
class ConfigTest extends ConfigSuite {
    @RegisterExtension
    static final UnderstudyExtension UNDERSTUDY = UnderstudyExtension.node();

    @Override
    UnderstudyExtension understudy() {
        return UNDERSTUDY;
    }
}
