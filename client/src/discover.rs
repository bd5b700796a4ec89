//! A [`Directory`] as tower's service discovery: [`Discover`] is a stream
//! of `tower::discover::Change`s (an instance inserted or removed) that
//! `tower::balance`, and through [`balanced_channel`] tonic's balanced
//! `Channel`, take as their list of endpoints. It follows the directory's
//! list, so it inherits the directory's empty-push protection: a push that
//! would empty the list and is held back removes nothing here either.
//!
//! Only the plumbing lives here: the cluster layer ([`crate::cluster`])
//! does not depend on tower.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use tokio_stream::wrappers::WatchStream;
use tower::discover::Change;

use crate::{Directory, Instance};

/// What identifies an instance to a balancer: its address and cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceKey {
    /// Ip or host name.
    pub ip: String,
    /// Port.
    pub port: u16,
    /// Cluster.
    pub cluster: String,
}

impl InstanceKey {
    fn of(instance: &Instance) -> Self {
        Self {
            ip: instance.ip.clone(),
            port: instance.port,
            cluster: instance.cluster.clone(),
        }
    }
}

impl std::fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}@{}", self.ip, self.port, self.cluster)
    }
}

/// Whether an instance takes traffic: healthy, enabled and weighted above
/// zero, as a Nacos client chooses.
fn takes_traffic(instance: &Instance) -> bool {
    instance.healthy && instance.enabled && instance.weight > 0.0
}

/// A directory's instances as a `tower::discover::Discover`: each instance
/// that takes traffic is inserted as the service `make` builds for it, and
/// removed when it leaves the list or stops taking traffic (unhealthy,
/// disabled, weight 0). An instance whose metadata changes is inserted
/// again, so `make` sees the new metadata. The stream ends when the
/// directory's client is dropped.
pub struct Discover<S, F> {
    list: WatchStream<Arc<[Instance]>>,
    /// What was inserted, by key.
    live: HashMap<InstanceKey, Instance>,
    pending: VecDeque<Change<InstanceKey, S>>,
    make: F,
}

impl<S, F> std::fmt::Debug for Discover<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discover")
            .field("live", &self.live.keys().collect::<Vec<_>>())
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl<S, F> Discover<S, F>
where
    F: FnMut(&Instance) -> S,
{
    /// Follows `directory`, making each instance's service with `make`.
    pub fn new(directory: &Directory, make: F) -> Self {
        Self::following(directory.changes(), make)
    }

    fn following(list: tokio::sync::watch::Receiver<Arc<[Instance]>>, make: F) -> Self {
        Self {
            list: WatchStream::new(list),
            live: HashMap::new(),
            pending: VecDeque::new(),
            make,
        }
    }

    /// Queues the changes from what was inserted to `list`.
    fn diff(&mut self, list: &[Instance]) {
        let wanted: HashMap<InstanceKey, &Instance> = list
            .iter()
            .filter(|i| takes_traffic(i))
            .map(|i| (InstanceKey::of(i), i))
            .collect();
        let gone: Vec<InstanceKey> = self
            .live
            .keys()
            .filter(|key| !wanted.contains_key(*key))
            .cloned()
            .collect();
        for key in gone {
            self.live.remove(&key);
            self.pending.push_back(Change::Remove(key));
        }
        let mut keys: Vec<&InstanceKey> = wanted.keys().collect();
        keys.sort();
        for key in keys {
            let instance = wanted[key];
            let fresh = self
                .live
                .get(key)
                .is_none_or(|old| old.metadata != instance.metadata);
            if fresh {
                let service = (self.make)(instance);
                self.live.insert(key.clone(), instance.clone());
                self.pending.push_back(Change::Insert(key.clone(), service));
            }
        }
    }
}

impl<S, F> Stream for Discover<S, F>
where
    S: Unpin,
    F: FnMut(&Instance) -> S + Unpin,
{
    type Item = Result<Change<InstanceKey, S>, std::convert::Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(change) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(change)));
            }
            match Pin::new(&mut this.list).poll_next(cx) {
                Poll::Ready(Some(list)) => {
                    let list: Arc<[Instance]> = list;
                    this.diff(&list);
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A tonic `Channel` balanced over `directory`'s instances: tonic's own
/// balanced channel, fed by a task that forwards [`Discover`]'s changes
/// with the endpoint `endpoint` builds for each instance (scheme, TLS,
/// timeouts). The task ends when the channel and all its clones are
/// dropped, or the directory's client is. Must be called inside a tokio
/// runtime.
pub fn balanced_channel(
    directory: &Directory,
    endpoint: impl FnMut(&Instance) -> tonic::transport::Endpoint + Send + Unpin + 'static,
) -> tonic::transport::Channel {
    use futures_util::StreamExt as _;
    let (channel, changes) = tonic::transport::Channel::balance_channel(64);
    let mut discover = Discover::new(directory, endpoint);
    tokio::spawn(async move {
        while let Some(Ok(change)) = discover.next().await {
            let change = match change {
                Change::Insert(key, endpoint) => {
                    tonic::transport::channel::Change::Insert(key, endpoint)
                }
                Change::Remove(key) => tonic::transport::channel::Change::Remove(key),
            };
            if changes.send(change).await.is_err() {
                break;
            }
        }
    });
    channel
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt as _;

    fn instance(ip: &str, healthy: bool, version: &str) -> Instance {
        Instance {
            instance_id: String::new(),
            ip: ip.to_owned(),
            port: 80,
            weight: 1.0,
            healthy,
            enabled: true,
            cluster: "DEFAULT".to_owned(),
            zone: String::new(),
            metadata: [("version".to_owned(), version.to_owned())].into(),
        }
    }

    /// The changes ready now, as text.
    async fn ready<F: FnMut(&Instance) -> String + Unpin>(
        discover: &mut Discover<String, F>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(Some(Ok(change))) =
            tokio::time::timeout(Duration::from_millis(50), discover.next()).await
        {
            out.push(match change {
                Change::Insert(key, made) => format!("+{key} {made}"),
                Change::Remove(key) => format!("-{key}"),
            });
        }
        out
    }

    use std::time::Duration;

    #[tokio::test]
    async fn inserts_what_takes_traffic_and_removes_what_stops() {
        let (tx, rx) = tokio::sync::watch::channel::<Arc<[Instance]>>(Arc::from(vec![
            instance("10.0.0.1", true, "1"),
            instance("10.0.0.2", false, "1"),
        ]));
        let mut discover = Discover::following(rx, |i: &Instance| i.metadata["version"].clone());
        assert_eq!(ready(&mut discover).await, ["+10.0.0.1:80@DEFAULT 1"]);
        // New metadata is inserted again; a recovered instance joins.
        tx.send(Arc::from(vec![
            instance("10.0.0.1", true, "2"),
            instance("10.0.0.2", true, "1"),
        ]))
        .unwrap();
        assert_eq!(
            ready(&mut discover).await,
            ["+10.0.0.1:80@DEFAULT 2", "+10.0.0.2:80@DEFAULT 1"]
        );
        // Unhealthy, disabled, weight 0 or gone: removed.
        let mut disabled = instance("10.0.0.2", true, "1");
        disabled.enabled = false;
        tx.send(Arc::from(vec![disabled])).unwrap();
        let mut removed = ready(&mut discover).await;
        removed.sort();
        assert_eq!(removed, ["-10.0.0.1:80@DEFAULT", "-10.0.0.2:80@DEFAULT"]);
        // The list's sender gone: the stream ends.
        drop(tx);
        assert!(discover.next().await.is_none());
    }
}
