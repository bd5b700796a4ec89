package dev.understudy.nacos3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.alibaba.nacos.api.config.model.ConfigHistoryBasicInfo;
import com.alibaba.nacos.api.model.Page;
import com.alibaba.nacos.api.model.response.Namespace;
import com.alibaba.nacos.api.naming.pojo.Instance;
import com.alibaba.nacos.api.naming.pojo.maintainer.ServiceView;
import com.alibaba.nacos.maintainer.client.NacosMaintainerFactory;
import com.alibaba.nacos.maintainer.client.config.ConfigMaintainerService;
import com.alibaba.nacos.maintainer.client.naming.NamingMaintainerFactory;
import com.alibaba.nacos.maintainer.client.naming.NamingMaintainerService;
import dev.understudy.junit.UnderstudyExtension;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** nacos-maintainer-client on the v3 admin plane: namespaces, services and instances, configs and their history. */
class MaintainerClientTest {
    @RegisterExtension
    static final UnderstudyExtension UNDERSTUDY = UnderstudyExtension.node();

    @Test
    void namespacesAreCreatedListedAndDeleted() throws Exception {
        NamingMaintainerService admin = NamingMaintainerFactory.createNamingMaintainerService(UNDERSTUDY.serverAddr());
        try {
            assertTrue(admin.createNamespace("java-admin", "java admin", "made by the maintainer client"));
            assertTrue(admin.checkNamespaceIdExist("java-admin"));
            Namespace made = admin.getNamespace("java-admin");
            assertEquals("java admin", made.getNamespaceShowName());
            assertTrue(admin.getNamespaceList().stream().anyMatch(n -> n.getNamespace().equals("java-admin")));
            assertTrue(admin.deleteNamespace("java-admin"));
            assertTrue(admin.getNamespaceList().stream().noneMatch(n -> n.getNamespace().equals("java-admin")));
        } finally {
            admin.shutdown();
        }
    }

    @Test
    void servicesAndInstancesAreManaged() throws Exception {
        NamingMaintainerService admin = NamingMaintainerFactory.createNamingMaintainerService(UNDERSTUDY.serverAddr());
        try {
            admin.createService("java-admin-svc");
            Instance instance = new Instance();
            instance.setIp("10.4.0.1");
            instance.setPort(8080);
            instance.setEphemeral(false);
            admin.registerInstance("java-admin-svc", instance);
            List<Instance> listed = admin.listInstances("java-admin-svc", null, false);
            assertEquals(List.of("10.4.0.1:8080"), listed.stream().map(i -> i.getIp() + ":" + i.getPort()).toList());
            assertEquals(1, view(admin).getIpCount());
            admin.deregisterInstance("java-admin-svc", "10.4.0.1", 8080);
            // The service stays, empty (listing its instances now answers, as
            // in Nacos, that its DEFAULT cluster is not found).
            assertEquals(0, view(admin).getIpCount());
        } finally {
            admin.shutdown();
        }
    }

    static ServiceView view(NamingMaintainerService admin) throws Exception {
        Page<ServiceView> services = admin.listServices("public", "DEFAULT_GROUP", "java-admin", false, 1, 100);
        return services.getPageItems().stream()
                .filter(s -> s.getName().equals("java-admin-svc")).findFirst().orElseThrow();
    }

    @Test
    void configsArePublishedReadAndKeepAHistory() throws Exception {
        ConfigMaintainerService admin = NacosMaintainerFactory.createConfigMaintainerService(UNDERSTUDY.serverAddr());
        try {
            assertTrue(admin.publishConfig("java-admin.properties", "DEFAULT_GROUP", "v=1"));
            assertTrue(admin.publishConfig("java-admin.properties", "DEFAULT_GROUP", "v=2"));
            assertEquals("v=2", admin.getConfig("java-admin.properties", "DEFAULT_GROUP").getContent());
            Page<ConfigHistoryBasicInfo> history =
                    admin.listConfigHistory("java-admin.properties", "DEFAULT_GROUP", "public", 1, 10);
            assertEquals(2, history.getTotalCount(), "history entries");
            ConfigHistoryBasicInfo newest = history.getPageItems().get(0);
            assertEquals("v=1", admin.getConfigHistoryInfo("java-admin.properties", "DEFAULT_GROUP", "public",
                    history.getPageItems().get(1).getId()).getContent());
            assertTrue(newest.getId() > history.getPageItems().get(1).getId(), "newest first: " + history.getPageItems());
        } finally {
            admin.shutdown();
        }
    }
}
