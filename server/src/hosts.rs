//! Rendered hosts, shared: a service's selected instances are written as
//! JSON once per service revision and view, and every query answer and
//! push of that state reuses the bytes, so a change fanned out to a
//! thousand subscribers is rendered once, not a thousand times.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use understudy_core::{Service, ServiceKey};
use understudy_proto::nacos::{Hosts, View};

/// Services whose renderings are kept; past this the cache starts over.
const SERVICES: usize = 4096;
/// Views (cluster filter, healthy-only) kept per service.
const VIEWS: usize = 8;

#[derive(Debug)]
struct Entry {
    clusters_raw: Box<str>,
    healthy_only: bool,
    revision: u64,
    hosts: Arc<Hosts>,
}

impl Entry {
    fn is(&self, view: &View<'_>) -> bool {
        self.healthy_only == view.healthy_only && *self.clusters_raw == *view.clusters_raw
    }
}

/// The renderings, by service and view.
#[derive(Debug, Default)]
pub(crate) struct HostsCache {
    services: RwLock<HashMap<ServiceKey, Vec<Entry>>>,
}

impl HostsCache {
    /// The hosts of `service` (as read from the registry by the caller)
    /// in `view`: rendered now unless a rendering of the same revision is
    /// kept. A service's revision changes with every change to it, so a
    /// kept rendering is never stale.
    pub(crate) fn get(
        &self,
        key: &ServiceKey,
        service: Option<&Service>,
        view: View<'_>,
    ) -> Arc<Hosts> {
        let Some(service) = service else {
            return Arc::new(Hosts::render(key, None, view));
        };
        let revision = service.revision();
        {
            let services = self.services.read().unwrap_or_else(|p| p.into_inner());
            let kept = services
                .get(key)
                .and_then(|v| v.iter().find(|e| e.is(&view)));
            if let Some(entry) = kept.filter(|e| e.revision == revision) {
                return entry.hosts.clone();
            }
        }
        let hosts = Arc::new(Hosts::render(key, Some(service), view));
        let mut services = self.services.write().unwrap_or_else(|p| p.into_inner());
        if services.len() >= SERVICES && !services.contains_key(key) {
            services.clear();
        }
        let entries = services.entry(key.clone()).or_default();
        match entries.iter_mut().find(|e| e.is(&view)) {
            // A concurrent render of a newer state stays.
            Some(entry) if entry.revision >= revision => {}
            Some(entry) => {
                entry.revision = revision;
                entry.hosts = hosts.clone();
            }
            None => {
                if entries.len() >= VIEWS {
                    entries.clear();
                }
                entries.push(Entry {
                    clusters_raw: view.clusters_raw.into(),
                    healthy_only: view.healthy_only,
                    revision,
                    hosts: hosts.clone(),
                });
            }
        }
        hosts
    }
}
