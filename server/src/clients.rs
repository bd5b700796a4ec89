//! The clients connected to this node, as the admin API reports them:
//! each Nacos gRPC connection, what it subscribes to and which configs it
//! listens to (with the md5 it last reported). The gRPC adapter keeps the
//! connections and answers through [`Clients`]; the node holds it weakly.

use understudy_core::{ConfigKey, Millis, ServiceKey};

/// One connected client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientInfo {
    /// Its connection id (`<ms>_<ip>_<port>`).
    pub(crate) id: String,
    /// Its address.
    pub(crate) ip: String,
    /// Its port.
    pub(crate) port: u16,
    /// The version it announced (`Nacos-Java-Client:v2.4.0`, …).
    pub(crate) version: String,
    /// The application it named in its labels, if any.
    pub(crate) app_name: String,
    /// When it last sent anything, epoch ms.
    pub(crate) last_active: Millis,
}

/// What the gRPC adapter answers about its connections.
pub(crate) trait Clients: Send + Sync {
    /// Every connection set up on this node.
    fn connections(&self) -> Vec<ClientInfo>;
    /// What connection `id` subscribes to; `None` if there is no such
    /// connection here.
    fn subscriptions(&self, id: &str) -> Option<Vec<ServiceKey>>;
    /// The connections that subscribe to `service`.
    fn subscribers(&self, service: &ServiceKey) -> Vec<ClientInfo>;
    /// The connections that subscribe to `service`, each with the
    /// registry revision of the newest push of it that it acknowledged.
    fn acknowledged(&self, service: &ServiceKey) -> Vec<(ClientInfo, u64)>;
    /// The connections that listen to `config`, with the md5 each holds.
    fn listeners(&self, config: &ConfigKey) -> Vec<(ClientInfo, String)>;
    /// What the connections from `ip` listen to, with the md5s they hold.
    fn listening(&self, ip: &str) -> Vec<(ConfigKey, String)>;
}
