//! Liveness of beat-driven ephemeral instances and of lost connections:
//! a pure structure that takes beats, registry changes and connection
//! events with the time, tells its next deadline and yields the
//! transitions due. It is not replicated: the node responsible for an
//! instance keeps it and proposes the transitions as commands; beats
//! themselves never become commands.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::{
    Change, Event, HealthSource, HealthTimeouts, Instance, InstanceKey, Millis, Op, Owner,
    RegistrySnapshot, RemovalCause, ServiceKey,
};

/// An instance tracked by the liveness rules.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LiveKey {
    /// Its service.
    pub service: ServiceKey,
    /// The instance.
    pub instance: InstanceKey,
}

/// A transition that fell due: the server turns it into a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// No beat for the unhealthy timeout.
    Unhealthy {
        /// The instance.
        key: LiveKey,
        /// Its owner when the decision was made.
        owner: Owner,
    },
    /// No beat for the delete timeout.
    Expired {
        /// The instance.
        key: LiveKey,
        /// Its owner when the decision was made.
        owner: Owner,
    },
    /// A lost connection did not come back within its grace period.
    OwnerLost {
        /// The owner whose instances go.
        owner: Owner,
    },
}

impl Transition {
    /// The command that carries the transition out.
    pub fn into_op(self) -> Op {
        match self {
            Transition::Unhealthy { key, owner } => Op::SetHealth {
                service: key.service,
                key: key.instance,
                healthy: false,
                source: HealthSource::Liveness { owner },
            },
            Transition::Expired { key, owner } => Op::Expire {
                service: key.service,
                key: key.instance,
                owner,
            },
            Transition::OwnerLost { owner } => Op::RemoveOwner {
                owner,
                cause: RemovalCause::OwnerLost,
            },
        }
    }
}

/// What a beat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BeatOutcome {
    /// The instance is not tracked here (unknown, or not beat-driven):
    /// Nacos answers 20404 so that the client registers again.
    Unknown,
    /// Refreshed; it was healthy.
    Alive,
    /// Refreshed, but the registry holds it as unhealthy: propose it
    /// healthy again.
    Revived,
}

/// The nodes that time beat-driven instances: the `voters`, less those
/// declared `lost` (all voters if that leaves none). Every node computes
/// the same ring from its replicated state.
pub fn beat_ring(voters: &[u64], lost: &BTreeSet<u64>) -> Vec<u64> {
    let alive: Vec<u64> = voters
        .iter()
        .copied()
        .filter(|v| !lost.contains(v))
        .collect();
    if alive.is_empty() {
        voters.to_vec()
    } else {
        alive
    }
}

/// The node of `ring` responsible for a beat-driven owner: rendezvous
/// hashing of the owner's `ip:port` with each node id, so a change of the
/// ring moves only the owners of the nodes that came or went. `None` for
/// an empty ring or an owner that is not beat-driven.
pub fn responsible(ring: &[u64], owner: &Owner) -> Option<u64> {
    let Owner::Beat { ip, port } = owner else {
        return None;
    };
    responsible_for(ring, ip, *port)
}

/// The node of `ring` responsible for the address `ip:port` (the same
/// rendezvous hashing as [`responsible`]): it times the beats of a
/// beat-driven instance there, and probes a persistent one.
pub fn responsible_for(ring: &[u64], ip: &str, port: u16) -> Option<u64> {
    use std::hash::Hasher;
    ring.iter().copied().max_by_key(|node| {
        let mut hash = fnv::FnvHasher::default();
        // Fixed byte order: every node must compute the same score.
        hash.write(&node.to_le_bytes());
        hash.write(ip.as_bytes());
        hash.write(&port.to_le_bytes());
        (hash.finish(), *node)
    })
}

/// The deadline of a parked entry: never.
const PARKED: Millis = Millis::MAX;

#[derive(Debug, Clone)]
struct Entry {
    owner: Owner,
    last_beat: Millis,
    timeouts: HealthTimeouts,
    /// The healthy flag as the registry last reported it.
    healthy: bool,
    deadline: Millis,
}

impl Entry {
    /// The next moment something is due for this instance. A transition
    /// already proposed but not yet seen applied is retried a beat period
    /// later, so a lost proposal cannot leave an instance behind.
    fn next_deadline(&self, now: Millis) -> Millis {
        let unhealthy_at = self.last_beat.saturating_add(self.timeouts.unhealthy_after);
        let delete_at = self.last_beat.saturating_add(self.timeouts.delete_after);
        let retry_at = now.saturating_add(self.timeouts.beat_interval);
        if self.healthy && unhealthy_at > now {
            unhealthy_at
        } else if delete_at > now {
            if self.healthy {
                retry_at.min(delete_at)
            } else {
                delete_at
            }
        } else {
            retry_at
        }
    }
}

/// The liveness tracker.
#[derive(Debug, Clone, Default)]
pub struct Liveness {
    entries: HashMap<LiveKey, Entry>,
    deadlines: BTreeSet<(Millis, LiveKey)>,
    lost: BTreeMap<Owner, Millis>,
}

impl Liveness {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many instances are tracked.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.lost.is_empty()
    }

    /// Follows the registry: beat-owned instances are tracked from their
    /// registration (which counts as a beat), updated on change and
    /// forgotten on removal or when they move to another kind of owner.
    pub fn observe(&mut self, change: &Change, now: Millis) {
        match &change.event {
            Event::InstanceAdded { service, instance }
            | Event::InstanceChanged { service, instance } => {
                let key = LiveKey {
                    service: service.clone(),
                    instance: instance.key(),
                };
                if matches!(instance.owner, Owner::Beat { .. }) {
                    self.track(key, instance, now);
                } else {
                    self.forget(&key);
                }
            }
            Event::InstanceRemoved {
                service, instance, ..
            } => self.forget(&LiveKey {
                service: service.clone(),
                instance: instance.key(),
            }),
            _ => {}
        }
    }

    /// The tracker of a registry restored from `snapshot`, which holds no
    /// beat times: each beat-owned instance starts a fresh grace period,
    /// as if it had beaten at `now`. Without this, a node that catches up
    /// by snapshot would never time out the beat instances it holds.
    pub fn restored(snapshot: &RegistrySnapshot, now: Millis) -> Self {
        let mut liveness = Self::new();
        for service in &snapshot.services {
            for instance in service.instances() {
                if matches!(instance.owner, Owner::Beat { .. }) {
                    let key = LiveKey {
                        service: service.key().clone(),
                        instance: instance.key(),
                    };
                    liveness.track(key, instance, now);
                }
            }
        }
        liveness
    }

    fn track(&mut self, key: LiveKey, instance: &Instance, now: Millis) {
        let last_beat = match self.entries.get(&key) {
            Some(entry) if entry.owner == instance.owner => entry.last_beat,
            _ => now,
        };
        self.schedule(
            key,
            Entry {
                owner: instance.owner.clone(),
                last_beat,
                timeouts: instance.timeouts(),
                healthy: instance.healthy,
                deadline: 0,
            },
            now,
        );
    }

    fn schedule(&mut self, key: LiveKey, mut entry: Entry, now: Millis) {
        if let Some(old) = self.entries.get(&key) {
            self.deadlines.remove(&(old.deadline, key.clone()));
        }
        entry.deadline = entry.next_deadline(now);
        self.deadlines.insert((entry.deadline, key.clone()));
        self.entries.insert(key, entry);
    }

    /// Stops tracking an instance.
    pub fn forget(&mut self, key: &LiveKey) {
        if let Some(entry) = self.entries.remove(key) {
            self.deadlines.remove(&(entry.deadline, key.clone()));
        }
    }

    /// A beat for an instance.
    pub fn beat(&mut self, key: &LiveKey, now: Millis) -> BeatOutcome {
        let Some(entry) = self.entries.get(key) else {
            return BeatOutcome::Unknown;
        };
        let mut entry = entry.clone();
        entry.last_beat = entry.last_beat.max(now);
        let outcome = if entry.healthy {
            BeatOutcome::Alive
        } else {
            BeatOutcome::Revived
        };
        self.schedule(key.clone(), entry, now);
        outcome
    }

    /// The beat period to tell the client, if the instance is tracked.
    pub fn beat_interval(&self, key: &LiveKey) -> Option<Millis> {
        self.entries.get(key).map(|e| e.timeouts.beat_interval)
    }

    /// A connection (or owner node) stopped answering: unless it comes back
    /// within `grace`, its instances go.
    pub fn connection_lost(&mut self, owner: Owner, now: Millis, grace: Millis) {
        self.lost.insert(owner, now.saturating_add(grace));
    }

    /// Responsibility for the owners `moved` accepts has just come to this
    /// node: their instances start a fresh grace period, as if they had
    /// beaten now.
    pub fn take_over(&mut self, now: Millis, moved: impl Fn(&Owner) -> bool) {
        let keys: Vec<LiveKey> = self
            .entries
            .iter()
            .filter(|(_, entry)| moved(&entry.owner))
            .map(|(key, _)| key.clone())
            .collect();
        for key in keys {
            if let Some(mut entry) = self.entries.get(&key).cloned() {
                entry.last_beat = entry.last_beat.max(now);
                self.schedule(key, entry, now);
            }
        }
    }

    /// A lost connection came back in time.
    pub fn connection_restored(&mut self, owner: &Owner) {
        self.lost.remove(owner);
    }

    /// When the next transition falls due.
    pub fn next_deadline(&self) -> Option<Millis> {
        let beats = self.deadlines.first().map(|(at, _)| *at);
        let lost = self.lost.values().min().copied();
        beats.into_iter().chain(lost).min()
    }

    /// The transitions due at `now`, earliest first.
    pub fn due(&mut self, now: Millis) -> Vec<Transition> {
        self.due_for(now, |_| true)
    }

    /// The transitions due at `now` for the owners `mine` accepts (in a
    /// cluster, those this node is responsible for). Other owners' entries
    /// fall due without a transition and are parked: still tracked, but
    /// without a deadline until a beat or [`Liveness::take_over`] wakes
    /// them.
    pub fn due_for(&mut self, now: Millis, mine: impl Fn(&Owner) -> bool) -> Vec<Transition> {
        let mut transitions = Vec::new();
        while let Some((at, _)) = self.deadlines.first() {
            if *at > now {
                break;
            }
            let (_, key) = self.deadlines.pop_first().expect("checked above");
            let Some(mut entry) = self.entries.remove(&key) else {
                continue;
            };
            if !mine(&entry.owner) {
                entry.deadline = PARKED;
                self.entries.insert(key, entry);
                continue;
            }
            let silent = now.saturating_sub(entry.last_beat);
            if silent >= entry.timeouts.delete_after {
                transitions.push(Transition::Expired {
                    key: key.clone(),
                    owner: entry.owner.clone(),
                });
            } else if entry.healthy && silent >= entry.timeouts.unhealthy_after {
                transitions.push(Transition::Unhealthy {
                    key: key.clone(),
                    owner: entry.owner.clone(),
                });
            }
            entry.deadline = entry.next_deadline(now);
            self.deadlines.insert((entry.deadline, key.clone()));
            self.entries.insert(key, entry);
        }
        let lost: Vec<Owner> = self
            .lost
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(owner, _)| owner.clone())
            .collect();
        for owner in lost {
            self.lost.remove(&owner);
            transitions.push(Transition::OwnerLost { owner });
        }
        transitions
    }
}
