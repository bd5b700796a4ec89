package dev.understudy.junit;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.alibaba.nacos.api.naming.NamingFactory;
import com.alibaba.nacos.api.naming.NamingService;
import com.alibaba.nacos.api.naming.pojo.Instance;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The example of docs/java.md, word for word. */
class ExampleTest {
    @RegisterExtension
    static final UnderstudyExtension understudy = UnderstudyExtension.node();

    @Test
    void registersAndListsAnInstance() throws Exception {
        NamingService naming = NamingFactory.createNamingService(understudy.serverAddr());
        try {
            naming.registerInstance("orders", "10.0.0.7", 8080);
            List<Instance> instances = naming.getAllInstances("orders");
            assertEquals(List.of("10.0.0.7:8080"),
                    instances.stream().map(i -> i.getIp() + ":" + i.getPort()).toList());
        } finally {
            naming.shutDown();
        }
    }
}
