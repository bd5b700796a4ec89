//! The liveness rules driven by an injected clock: a registry, a tracker
//! and a `now` that the test moves by hand. No runtime, no sleeps.

use understudy_core::*;

/// A registry and its liveness tracker, with the server's wiring between
/// them: transitions become commands, applied changes feed the tracker.
struct Node {
    registry: Registry,
    liveness: Liveness,
    now: Millis,
}

impl Node {
    fn new() -> Self {
        Self {
            registry: Registry::new(RegistryOptions::default()),
            liveness: Liveness::new(),
            now: 1_000_000,
        }
    }

    fn apply(&mut self, op: Op) -> Vec<Change> {
        let changes = self.registry.apply(&Command::new(self.now, op)).unwrap();
        for change in &changes {
            self.liveness.observe(change, self.now);
        }
        changes
    }

    /// Moves the clock to `at`, stepping through every deadline on the way
    /// as the server's sleeping task would.
    fn advance_to(&mut self, at: Millis) {
        while let Some(deadline) = self.liveness.next_deadline().filter(|d| *d <= at) {
            self.now = self.now.max(deadline);
            for transition in self.liveness.due(self.now) {
                self.apply(transition.into_op());
            }
        }
        self.now = at;
    }

    fn register(&mut self, service: &ServiceKey, spec: InstanceSpec) {
        let owner = Owner::Beat {
            ip: spec.ip.as_str().into(),
            port: spec.port,
        };
        self.apply(Op::Register {
            service: service.clone(),
            owner,
            instances: vec![spec],
        });
    }

    fn beat(&mut self, key: &LiveKey) -> BeatOutcome {
        let outcome = self.liveness.beat(key, self.now);
        if outcome == BeatOutcome::Revived {
            let owner = self
                .registry
                .service(&key.service)
                .and_then(|s| s.instance(&key.instance).map(|i| i.owner.clone()))
                .unwrap();
            self.apply(Op::SetHealth {
                service: key.service.clone(),
                key: key.instance.clone(),
                healthy: true,
                source: HealthSource::Liveness { owner },
            });
        }
        outcome
    }

    fn health(&self, key: &LiveKey) -> Option<bool> {
        self.registry
            .service(&key.service)
            .and_then(|s| s.instance(&key.instance).map(|i| i.healthy))
    }
}

fn live_key(service: &ServiceKey, spec: &InstanceSpec) -> LiveKey {
    LiveKey {
        service: service.clone(),
        instance: spec.key(),
    }
}

#[test]
fn a_node_restored_from_a_snapshot_times_out_the_beat_instances_in_it() {
    let mut source = Node::new();
    let svc = ServiceKey::parse("", "", "restored").unwrap();
    let beat = InstanceSpec::new("10.0.0.1", 80);
    let key = live_key(&svc, &beat);
    source.register(&svc, beat);
    // A connection's instance is not the tracker's to time out.
    source.apply(Op::Register {
        service: svc.clone(),
        owner: Owner::Connection {
            node: 1,
            id: "c1".into(),
        },
        instances: vec![InstanceSpec::new("10.0.0.2", 80)],
    });

    // A follower far behind installs the snapshot instead of the log.
    let mut node = Node::new();
    node.now = source.now + 5_000;
    let snapshot = source.registry.snapshot();
    node.liveness = Liveness::restored(&snapshot, node.now);
    node.registry = Registry::restore(snapshot, RegistryOptions::default());
    assert_eq!(node.liveness.len(), 1, "only the beat instance is timed");
    let t0 = node.now;
    assert_eq!(
        node.liveness.next_deadline(),
        Some(t0 + 15_000),
        "a fresh grace period from the restore"
    );
    node.advance_to(t0 + 30_000);
    assert_eq!(node.health(&key), None, "removed 30 s after the restore");
    assert_eq!(
        node.registry.service(&svc).map(|s| s.instances().len()),
        Some(1),
        "the connection's instance stays"
    );
}

#[test]
fn a_silent_instance_turns_unhealthy_at_15s_and_is_removed_at_30s() {
    let mut node = Node::new();
    let svc = ServiceKey::parse("", "", "silent").unwrap();
    let spec = InstanceSpec::new("10.0.0.1", 80);
    let key = live_key(&svc, &spec);
    let t0 = node.now;
    node.register(&svc, spec);
    assert_eq!(node.liveness.next_deadline(), Some(t0 + 15_000));

    node.advance_to(t0 + 14_999);
    assert_eq!(node.health(&key), Some(true));
    node.advance_to(t0 + 15_000);
    assert_eq!(node.health(&key), Some(false));
    node.advance_to(t0 + 29_999);
    assert_eq!(node.health(&key), Some(false));
    node.advance_to(t0 + 30_000);
    assert_eq!(node.health(&key), None, "removed at 30 s");
    assert!(node.liveness.is_empty());
    assert_eq!(node.liveness.next_deadline(), None);
}

#[test]
fn beats_keep_an_instance_healthy_and_revive_an_unhealthy_one() {
    let mut node = Node::new();
    let svc = ServiceKey::parse("", "", "beating").unwrap();
    let spec = InstanceSpec::new("10.0.0.1", 80);
    let key = live_key(&svc, &spec);
    let t0 = node.now;
    node.register(&svc, spec);
    for step in 1..=10 {
        node.advance_to(t0 + step * 5_000);
        assert_eq!(node.beat(&key), BeatOutcome::Alive);
    }
    assert_eq!(node.health(&key), Some(true));
    let t1 = node.now;
    node.advance_to(t1 + 20_000);
    assert_eq!(node.health(&key), Some(false));
    assert_eq!(node.beat(&key), BeatOutcome::Revived);
    assert_eq!(node.health(&key), Some(true));
    // The revived instance gets a full new period.
    node.advance_to(t1 + 34_999);
    assert_eq!(node.health(&key), Some(true));
    node.advance_to(t1 + 35_000);
    assert_eq!(node.health(&key), Some(false));
}

#[test]
fn per_instance_metadata_overrides_the_timeouts() {
    let mut node = Node::new();
    let svc = ServiceKey::parse("", "", "quick").unwrap();
    let mut spec = InstanceSpec::new("10.0.0.1", 80);
    spec.metadata
        .insert(META_BEAT_INTERVAL.into(), "1000".into());
    spec.metadata
        .insert(META_BEAT_TIMEOUT.into(), "3000".into());
    spec.metadata
        .insert(META_DELETE_TIMEOUT.into(), "6000".into());
    let key = live_key(&svc, &spec);
    let t0 = node.now;
    node.register(&svc, spec);
    assert_eq!(node.liveness.beat_interval(&key), Some(1000));
    node.advance_to(t0 + 2_999);
    assert_eq!(node.health(&key), Some(true));
    node.advance_to(t0 + 3_000);
    assert_eq!(node.health(&key), Some(false));
    node.advance_to(t0 + 6_000);
    assert_eq!(node.health(&key), None);
}

#[test]
fn unknown_instances_and_connection_owned_ones_are_not_beat_driven() {
    let mut node = Node::new();
    let svc = ServiceKey::parse("", "", "conn").unwrap();
    let spec = InstanceSpec::new("10.0.0.1", 80);
    let key = live_key(&svc, &spec);
    assert_eq!(node.beat(&key), BeatOutcome::Unknown);
    node.apply(Op::Register {
        service: svc.clone(),
        owner: Owner::Connection {
            node: 1,
            id: "c".into(),
        },
        instances: vec![spec],
    });
    assert_eq!(node.beat(&key), BeatOutcome::Unknown);
    let t0 = node.now;
    node.advance_to(t0 + 3_600_000);
    assert_eq!(
        node.health(&key),
        Some(true),
        "connection instances never expire by beats"
    );
}

#[test]
fn persistent_instances_never_expire() {
    let mut node = Node::new();
    let svc = ServiceKey::parse("", "", "durable").unwrap();
    let spec = InstanceSpec::new("10.0.0.1", 80);
    let key = live_key(&svc, &spec);
    node.apply(Op::Register {
        service: svc.clone(),
        owner: Owner::Persistent {
            ip: "10.0.0.1".into(),
            port: 80,
        },
        instances: vec![spec],
    });
    let t0 = node.now;
    node.advance_to(t0 + 86_400_000);
    assert_eq!(node.health(&key), Some(true));
    assert_eq!(node.liveness.next_deadline(), None);
}

#[test]
fn a_lost_connection_is_dropped_after_its_grace_unless_restored() {
    let mut node = Node::new();
    let svc = ServiceKey::parse("", "", "grace").unwrap();
    let spec = InstanceSpec::new("10.0.0.1", 80);
    let key = live_key(&svc, &spec);
    let owner = Owner::Connection {
        node: 1,
        id: "c".into(),
    };
    node.apply(Op::Register {
        service: svc.clone(),
        owner: owner.clone(),
        instances: vec![spec],
    });
    let t0 = node.now;
    node.liveness.connection_lost(owner.clone(), t0, 10_000);
    node.advance_to(t0 + 5_000);
    node.liveness.connection_restored(&owner);
    node.advance_to(t0 + 20_000);
    assert_eq!(node.health(&key), Some(true));

    node.liveness.connection_lost(owner, node.now, 10_000);
    let t1 = node.now;
    node.advance_to(t1 + 9_999);
    assert_eq!(node.health(&key), Some(true));
    node.advance_to(t1 + 10_000);
    assert_eq!(node.health(&key), None);
}

#[test]
fn a_deregistered_instance_is_no_longer_tracked() {
    let mut node = Node::new();
    let svc = ServiceKey::parse("", "", "gone").unwrap();
    let spec = InstanceSpec::new("10.0.0.1", 80);
    let key = live_key(&svc, &spec);
    node.register(&svc, spec);
    node.apply(Op::Deregister {
        service: svc,
        owner: Owner::Beat {
            ip: "10.0.0.1".into(),
            port: 80,
        },
    });
    assert_eq!(node.beat(&key), BeatOutcome::Unknown);
    assert_eq!(node.liveness.next_deadline(), None);
}

#[test]
fn another_nodes_instances_are_parked_and_taken_over_with_a_fresh_grace_period() {
    let mut node = Node::new();
    let svc = ServiceKey::parse("", "", "shared").unwrap();
    let mine = InstanceSpec::new("10.0.0.1", 80);
    let theirs = InstanceSpec::new("10.0.0.2", 80);
    let (mine_key, theirs_key) = (live_key(&svc, &mine), live_key(&svc, &theirs));
    let t0 = node.now;
    node.register(&svc, mine);
    node.register(&svc, theirs);
    let is_mine = |owner: &Owner| matches!(owner, Owner::Beat { ip, .. } if &**ip == "10.0.0.1");

    // Both fall silent: only this node's instance turns unhealthy here.
    let due = node.liveness.due_for(t0 + 15_000, is_mine);
    assert_eq!(
        due,
        vec![Transition::Unhealthy {
            key: mine_key.clone(),
            owner: Owner::Beat {
                ip: "10.0.0.1".into(),
                port: 80
            },
        }]
    );
    // The other one is parked: no deadline of its own any more.
    let next = node.liveness.next_deadline();
    assert!(next.is_some_and(|at| at > t0 + 15_000), "{next:?}");
    assert!(node
        .liveness
        .due_for(t0 + 60_000, |o| !is_mine(o))
        .iter()
        .all(|t| !matches!(t, Transition::Unhealthy { key, .. } | Transition::Expired { key, .. } if *key == theirs_key)));

    // Responsibility moves here at t0 + 100 s: a fresh 15 s before anything.
    let t1 = t0 + 100_000;
    node.liveness.take_over(t1, |o| !is_mine(o));
    assert!(node
        .liveness
        .due_for(t1 + 14_999, |_| true)
        .iter()
        .all(|t| !matches!(t, Transition::Unhealthy { key, .. } if *key == theirs_key)));
    let due = node.liveness.due_for(t1 + 15_000, |_| true);
    assert!(
        due.iter()
            .any(|t| matches!(t, Transition::Unhealthy { key, .. } if *key == theirs_key)),
        "{due:?}"
    );
}

#[test]
fn the_beat_ring_skips_lost_voters_and_a_changed_ring_moves_only_their_owners() {
    let lost = std::collections::BTreeSet::from([2]);
    assert_eq!(beat_ring(&[1, 2, 3], &lost), vec![1, 3]);
    assert_eq!(beat_ring(&[2], &lost), vec![2], "never an empty ring");
    let owners: Vec<Owner> = (0..300)
        .map(|i| Owner::Beat {
            ip: format!("10.0.{}.{}", i / 250, i % 250).into(),
            port: 80,
        })
        .collect();
    let mut per_node = std::collections::BTreeMap::<u64, usize>::new();
    for owner in &owners {
        let before = responsible(&[1, 2, 3], owner).unwrap();
        *per_node.entry(before).or_default() += 1;
        let after = responsible(&[1, 3], owner).unwrap();
        // Only node 2's owners move.
        if before != 2 {
            assert_eq!(after, before, "{owner:?}");
        }
    }
    assert!(per_node.values().all(|n| *n > 50), "{per_node:?}");
    let persistent = Owner::Persistent {
        ip: "10.0.0.1".into(),
        port: 80,
    };
    assert_eq!(responsible(&[1, 2, 3], &persistent), None);
    assert_eq!(responsible(&[], &owners[0]), None);
}
