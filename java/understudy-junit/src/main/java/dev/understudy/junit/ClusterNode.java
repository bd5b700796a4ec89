package dev.understudy.junit;

/**
 * One node of a cluster started by {@link UnderstudyExtension#cluster}: its
 * id, its DC and its ports, as {@code understudy sim} printed them.
 */
public final class ClusterNode {
    private final int id;
    private final String dc;
    private final String host;
    private final int httpPort;
    private final int grpcPort;
    private volatile boolean killed;

    ClusterNode(int id, String dc, String host, int httpPort, int grpcPort) {
        this.id = id;
        this.dc = dc;
        this.host = host;
        this.httpPort = httpPort;
        this.grpcPort = grpcPort;
    }

    /** The node's id (1, 2, ... in the order of the DCs given). */
    public int id() {
        return id;
    }

    /** The node's DC. */
    public String dc() {
        return dc;
    }

    /** The HTTP port: the Nacos HTTP API, the admin and chaos API, /metrics. */
    public int httpPort() {
        return httpPort;
    }

    /** The gRPC port, {@link #httpPort()} + 1000 as Nacos clients assume. */
    public int grpcPort() {
        return grpcPort;
    }

    /** {@code host:port}, a Nacos client's {@code serverAddr} for this node alone. */
    public String serverAddr() {
        return host + ":" + httpPort;
    }

    /** {@code http://host:port}; the Nacos HTTP API is under {@code /nacos}. */
    public String url() {
        return "http://" + serverAddr();
    }

    /** Whether the node was killed through {@link UnderstudyExtension#kill(int)}. */
    public boolean killed() {
        return killed;
    }

    void markKilled() {
        killed = true;
    }

    @Override
    public String toString() {
        return "node " + id + " (" + dc + ") at " + serverAddr() + (killed ? ", killed" : "");
    }
}
