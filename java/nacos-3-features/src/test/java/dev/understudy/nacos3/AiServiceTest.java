package dev.understudy.nacos3;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.alibaba.nacos.api.ai.AiFactory;
import com.alibaba.nacos.api.ai.AiService;
import com.alibaba.nacos.api.ai.model.a2a.AgentCard;
import com.alibaba.nacos.api.ai.model.a2a.AgentCardDetailInfo;
import com.alibaba.nacos.api.ai.model.a2a.AgentSkill;
import com.alibaba.nacos.api.ai.model.mcp.McpEndpointSpec;
import com.alibaba.nacos.api.ai.model.mcp.McpServerBasicInfo;
import com.alibaba.nacos.api.ai.model.mcp.McpServerDetailInfo;
import com.alibaba.nacos.api.ai.model.mcp.McpServerRemoteServiceConfig;
import com.alibaba.nacos.api.ai.model.mcp.McpTool;
import com.alibaba.nacos.api.ai.model.mcp.McpToolSpecification;
import com.alibaba.nacos.api.ai.model.mcp.registry.ServerVersionDetail;
import dev.understudy.junit.Await;
import dev.understudy.junit.UnderstudyExtension;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The 3.x client's AI service: an MCP server and an A2A agent card, released and read back. */
class AiServiceTest {
    @RegisterExtension
    static final UnderstudyExtension UNDERSTUDY = UnderstudyExtension.node();

    private AiService ai;

    @BeforeEach
    void connect() throws Exception {
        Properties props = new Properties();
        props.setProperty("serverAddr", UNDERSTUDY.serverAddr());
        ai = AiFactory.createAiService(props);
    }

    @AfterEach
    void close() throws Exception {
        ai.shutdown();
    }

    static McpServerBasicInfo server(String version, boolean latest) {
        McpServerBasicInfo info = new McpServerBasicInfo();
        info.setName("java-weather");
        info.setProtocol("mcp-sse");
        info.setFrontProtocol("mcp-sse");
        info.setDescription("forecasts");
        ServerVersionDetail detail = new ServerVersionDetail();
        detail.setVersion(version);
        detail.setIs_latest(latest);
        info.setVersionDetail(detail);
        McpServerRemoteServiceConfig remote = new McpServerRemoteServiceConfig();
        remote.setExportPath("/sse");
        info.setRemoteServerConfig(remote);
        return info;
    }

    static McpToolSpecification tools(String... names) {
        McpToolSpecification spec = new McpToolSpecification();
        spec.setTools(java.util.Arrays.stream(names).map(name -> {
            McpTool tool = new McpTool();
            tool.setName(name);
            tool.setDescription("the " + name + " forecast");
            tool.setInputSchema(Map.of("type", "object"));
            return tool;
        }).toList());
        return spec;
    }

    @Test
    void anMcpServerIsReleasedInTwoVersionsAndResolvedToItsEndpoint() throws Exception {
        McpEndpointSpec endpoint = new McpEndpointSpec();
        endpoint.setType("REF");
        endpoint.setData(Map.of("serviceName", "java-weather-sse", "groupName", "DEFAULT_GROUP"));
        String id = ai.releaseMcpServer(server("1.0.0", false), tools("today"), endpoint);
        assertNotNull(id);
        assertEquals(id, ai.releaseMcpServer(server("1.1.0", true), tools("today", "tomorrow"), endpoint));

        McpServerDetailInfo latest = ai.getMcpServer("java-weather", null);
        assertEquals("1.1.0", latest.getVersionDetail().getVersion());
        assertEquals(List.of("1.0.0", "1.1.0"),
                latest.getAllVersions().stream().map(ServerVersionDetail::getVersion).sorted().toList());
        assertEquals(List.of("today", "tomorrow"),
                latest.getToolSpec().getTools().stream().map(McpTool::getName).toList());
        McpServerDetailInfo first = ai.getMcpServer("java-weather", "1.0.0");
        assertEquals(List.of("today"), first.getToolSpec().getTools().stream().map(McpTool::getName).toList());

        ai.registerMcpServerEndpoint("java-weather", "10.3.0.1", 8080, "1.1.0");
        McpServerDetailInfo served = Await.until("the endpoint behind the MCP server", Duration.ofSeconds(5),
                () -> {
                    try {
                        return ai.getMcpServer("java-weather", "1.1.0");
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                },
                s -> s.getBackendEndpoints() != null && !s.getBackendEndpoints().isEmpty());
        assertEquals("10.3.0.1", served.getBackendEndpoints().get(0).getAddress());
        assertEquals(8080, served.getBackendEndpoints().get(0).getPort());
    }

    @Test
    void anAgentCardIsReleasedAndReadBack() throws Exception {
        AgentCard card = new AgentCard();
        card.setName("java-planner");
        card.setVersion("1.0.0");
        card.setDescription("plans trips");
        card.setProtocolVersion("0.3.0");
        card.setUrl("http://10.3.0.2:9000/a2a");
        card.setPreferredTransport("JSONRPC");
        card.setDefaultInputModes(List.of("text"));
        card.setDefaultOutputModes(List.of("text"));
        AgentSkill skill = new AgentSkill();
        skill.setId("plan");
        skill.setName("plan a trip");
        skill.setDescription("plans a trip");
        skill.setTags(List.of("travel"));
        card.setSkills(List.of(skill));
        ai.releaseAgentCard(card);

        AgentCardDetailInfo read = ai.getAgentCard("java-planner");
        assertEquals("1.0.0", read.getVersion());
        assertEquals("http://10.3.0.2:9000/a2a", read.getUrl());
        assertEquals(List.of("plan"), read.getSkills().stream().map(AgentSkill::getId).toList());
        assertTrue(read.getName().equals("java-planner"), read.toString());
    }
}
