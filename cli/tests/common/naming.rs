//! The official Rust Nacos client (`nacos-sdk`) against the processes, and
//! a listener that records every pushed instance list.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nacos_sdk::api::naming::{
    NamingChangeEvent, NamingEventListener, NamingService, NamingServiceBuilder,
};
use nacos_sdk::api::props::ClientProps;

use super::Proc;

/// A naming client that knows `servers`; `name` keeps its cache apart.
pub(crate) async fn client(servers: &[&Proc], name: &str) -> NamingService {
    let addresses: Vec<String> = servers
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.http))
        .collect();
    let cache = std::env::temp_dir().join(format!(
        "understudy-process-cache-{}-{name}",
        std::process::id()
    ));
    NamingServiceBuilder::new(
        ClientProps::new()
            .server_addr(addresses.join(","))
            .namespace("")
            .app_name("understudy-processes")
            .naming_load_cache_at_start(false)
            .naming_push_empty_protection(false)
            .cache_dir(cache)
            .env_first(false),
    )
    .build()
    .await
    .expect("the client connects")
}

/// Every pushed list (`ip:port`, sorted), in order, with when it arrived.
#[derive(Default)]
pub(crate) struct History {
    lists: Mutex<Vec<(Instant, Vec<String>)>>,
}

impl NamingEventListener for History {
    fn event(&self, event: Arc<NamingChangeEvent>) {
        let mut list: Vec<String> = event
            .instances
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|i| format!("{}:{}", i.ip, i.port))
            .collect();
        list.sort();
        self.lists.lock().unwrap().push((Instant::now(), list));
    }
}

impl History {
    /// The newest list.
    pub(crate) fn latest(&self) -> Option<Vec<String>> {
        self.lists.lock().unwrap().last().map(|(_, l)| l.clone())
    }

    /// The first list pushed at or after `since` that `differs` says
    /// differs, with how long after `since` it came.
    fn first_since(
        &self,
        since: Instant,
        differs: impl Fn(&[String]) -> bool,
    ) -> Option<(Duration, Vec<String>)> {
        self.lists
            .lock()
            .unwrap()
            .iter()
            .find(|(at, list)| *at >= since && differs(list))
            .map(|(at, list)| (at.duration_since(since), list.clone()))
    }

    /// Whether a list pushed at or after `since` lacked `endpoint`.
    pub(crate) fn lost_since(
        &self,
        endpoint: &str,
        since: Instant,
    ) -> Option<(Duration, Vec<String>)> {
        self.first_since(since, |list| !list.iter().any(|e| e == endpoint))
    }

    /// When `endpoint` first went missing after `since`.
    pub(crate) fn removed_after(&self, endpoint: &str, since: Instant) -> Option<Duration> {
        self.lost_since(endpoint, since).map(|(after, _)| after)
    }

    /// The first list pushed at or after `since` that is not `want`.
    pub(crate) fn differed_since(&self, want: &[String], since: Instant) -> Option<Vec<String>> {
        self.first_since(since, |list| list != want)
            .map(|(_, list)| list)
    }
}
