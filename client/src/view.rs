//! A view: a whole namespace, or one group of it, as it is: every service
//! with its instances, services appearing and going. One background task
//! writes it from a native watch of the namespace or group (the server's
//! view watch: one snapshot, then every change of every covered service
//! in revision order), resuming from its last revision after a reconnect;
//! readers get cheap `Arc` snapshots.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;
use understudy_core::{GroupName, NamespaceId, ServiceKey};
use understudy_proto::native::{change, watch_event, WatchRequest};

use crate::connection::Inner;
use crate::watch::{Follow, Job, ServedBy};
use crate::{ClientError, Instance};

/// Every service of the view with its instances, sorted.
pub type Services = BTreeMap<ServiceKey, Arc<[Instance]>>;

#[derive(Debug)]
struct Shared {
    namespace: NamespaceId,
    group: Option<GroupName>,
    services: watch::Sender<Arc<Services>>,
    ready: watch::Sender<bool>,
    revision: AtomicU64,
    served: watch::Sender<Option<ServedBy>>,
}

/// The services of a namespace, or of one group of it, each with its
/// instances.
#[derive(Debug, Clone)]
pub struct View {
    shared: Arc<Shared>,
}

impl View {
    pub(crate) fn start(
        inner: Arc<Inner>,
        namespace: NamespaceId,
        group: Option<GroupName>,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let shared = Arc::new(Shared {
            namespace,
            group,
            services: watch::channel(Arc::new(Services::new())).0,
            ready: watch::channel(false).0,
            revision: AtomicU64::new(0),
            served: watch::channel(None).0,
        });
        let follower = Follower {
            shared: shared.clone(),
            state: BTreeMap::new(),
            reset: None,
        };
        let task = crate::watch::run(Arc::downgrade(&inner), inner.cancel.clone(), follower);
        (Self { shared }, task)
    }

    /// The namespace.
    pub fn namespace(&self) -> &NamespaceId {
        &self.shared.namespace
    }

    /// The group, when the view is of one group.
    pub fn group(&self) -> Option<&GroupName> {
        self.shared.group.as_ref()
    }

    /// Every service now, with its instances (sorted by ip, port and
    /// cluster). An existing service with no instance is listed, empty.
    pub fn services(&self) -> Arc<Services> {
        self.shared.services.borrow().clone()
    }

    /// Follows the services: each change is a new snapshot.
    pub fn changes(&self) -> watch::Receiver<Arc<Services>> {
        self.shared.services.subscribe()
    }

    /// Waits until the view has received its first snapshot.
    pub async fn wait_until_ready(&self) -> Result<(), ClientError> {
        let mut ready = self.shared.ready.subscribe();
        ready
            .wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| ClientError::Closed)
    }

    /// The revision of the last event applied.
    pub fn revision(&self) -> u64 {
        self.shared.revision.load(Ordering::Relaxed)
    }

    /// Which node the view follows now (see [`crate::Directory::served_by`]).
    pub fn served_by(&self) -> Option<ServedBy> {
        self.shared.served.borrow().clone()
    }
}

type Key = (String, u16, String);

fn key_of(i: &Instance) -> Key {
    (i.ip.clone(), i.port, i.cluster.clone())
}

type State = BTreeMap<ServiceKey, BTreeMap<Key, Instance>>;

struct Follower {
    shared: Arc<Shared>,
    state: State,
    reset: Option<State>,
}

impl Follower {
    fn publish(&self, changed: Option<&ServiceKey>) {
        let list = |instances: &BTreeMap<Key, Instance>| -> Arc<[Instance]> {
            instances.values().cloned().collect()
        };
        let services: Services = match changed {
            // One service changed: the others keep their lists.
            Some(key) => {
                let mut services = Services::clone(&self.shared.services.borrow());
                match self.state.get(key) {
                    Some(instances) => {
                        services.insert(key.clone(), list(instances));
                    }
                    None => {
                        services.remove(key);
                    }
                }
                services
            }
            None => self
                .state
                .iter()
                .map(|(key, instances)| (key.clone(), list(instances)))
                .collect(),
        };
        self.shared.services.send_replace(Arc::new(services));
        self.shared.ready.send_replace(true);
    }
}

impl Follow for Follower {
    fn request(&self) -> WatchRequest {
        WatchRequest {
            namespace: self.shared.namespace.to_string(),
            group: self
                .shared
                .group
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            ..WatchRequest::default()
        }
    }

    fn restart(&mut self) {
        self.reset = None;
    }

    fn apply(&mut self, event: watch_event::Event) -> Option<Job> {
        match event {
            watch_event::Event::Reset(reset) => {
                let pending = self.reset.get_or_insert_with(State::new);
                for state in reset.services {
                    let Some(key) = state
                        .service
                        .as_ref()
                        .and_then(|s| ServiceKey::try_from(s).ok())
                    else {
                        continue;
                    };
                    let instances = pending.entry(key).or_default();
                    for instance in state.instances {
                        let instance = Instance::from(instance);
                        instances.insert(key_of(&instance), instance);
                    }
                }
                if reset.last {
                    self.state = self.reset.take().unwrap_or_default();
                    self.publish(None);
                }
            }
            watch_event::Event::Change(c) => {
                let key = c
                    .service
                    .as_ref()
                    .and_then(|s| ServiceKey::try_from(s).ok())?;
                match c.kind? {
                    change::Kind::Upsert(instance) => {
                        let instance = Instance::from(instance);
                        self.state
                            .entry(key.clone())
                            .or_default()
                            .insert(key_of(&instance), instance);
                    }
                    change::Kind::Removed(removed) => {
                        if let (Some(instance), Some(instances)) =
                            (removed.instance, self.state.get_mut(&key))
                        {
                            instances.remove(&key_of(&Instance::from(instance)));
                        }
                    }
                    change::Kind::Created(_) => {
                        self.state.entry(key.clone()).or_default();
                    }
                    change::Kind::DoesNotExist(_) => {
                        self.state.remove(&key);
                    }
                }
                self.publish(Some(&key));
            }
            watch_event::Event::Progress(_) => {}
        }
        None
    }

    fn complete(&self) -> bool {
        self.reset.is_none()
    }

    fn reached(&mut self, revision: u64) {
        self.shared.revision.store(revision, Ordering::Relaxed);
    }

    fn served(&self) -> &watch::Sender<Option<ServedBy>> {
        &self.shared.served
    }
}
