//! Registry behaviour through its public API: commands in, changes out.

use understudy_core::*;

fn key(ns: &str, group: &str, name: &str) -> ServiceKey {
    ServiceKey::parse(ns, group, name).unwrap()
}

fn beat_owner(ip: &str, port: u16) -> Owner {
    Owner::Beat {
        ip: ip.into(),
        port,
    }
}

fn register(
    reg: &mut Registry,
    at: Millis,
    service: &ServiceKey,
    spec: InstanceSpec,
) -> Vec<Change> {
    let owner = beat_owner(&spec.ip, spec.port);
    reg.apply(&Command::new(
        at,
        Op::Register {
            service: service.clone(),
            owner,
            instances: vec![spec],
        },
    ))
    .unwrap()
}

fn all(service: &Service) -> Selected {
    service.select(&Selection {
        enabled_only: true,
        ..Selection::default()
    })
}

#[test]
fn blank_and_public_namespace_hold_the_same_services() {
    let mut reg = Registry::new(RegistryOptions::default());
    register(
        &mut reg,
        0,
        &key("", "", "orders"),
        InstanceSpec::new("10.0.0.1", 80),
    );
    let via_public = reg.service(&key("public", "", "orders")).unwrap();
    assert_eq!(via_public.instances().len(), 1);
    let page = reg.list_services(&NamespaceId::parse("").unwrap(), None, 1, 10);
    assert_eq!(page.count, 1);
}

#[test]
fn unknown_namespaces_are_empty_not_errors() {
    let reg = Registry::new(RegistryOptions::default());
    let ns = NamespaceId::parse("nowhere").unwrap();
    assert_eq!(reg.list_services(&ns, None, 1, 10).count, 0);
    assert!(select(
        reg.service(&key("nowhere", "", "x")).as_deref(),
        &Selection::default()
    )
    .instances
    .is_empty());
}

#[test]
fn groups_isolate_services_of_the_same_name() {
    let mut reg = Registry::new(RegistryOptions::default());
    register(
        &mut reg,
        0,
        &key("", "a", "svc"),
        InstanceSpec::new("10.0.0.1", 80),
    );
    register(
        &mut reg,
        0,
        &key("", "b", "svc"),
        InstanceSpec::new("10.0.0.2", 80),
    );
    let a = reg.service(&key("", "a", "svc")).unwrap();
    let b = reg.service(&key("", "b", "svc")).unwrap();
    assert_eq!(a.instances().next().unwrap().ip.as_ref(), "10.0.0.1");
    assert_eq!(b.instances().next().unwrap().ip.as_ref(), "10.0.0.2");
    let ns = NamespaceId::public();
    let group_a = GroupName::parse("a").unwrap();
    let page = reg.list_services(&ns, Some(&group_a), 1, 10);
    assert_eq!(page.count, 1);
    assert_eq!(page.items[0].group, group_a);
    assert_eq!(reg.list_services(&ns, None, 1, 10).count, 2);
}

#[test]
fn paging_counts_everything_and_clips_pages() {
    let mut reg = Registry::new(RegistryOptions::default());
    for i in 0..25 {
        register(
            &mut reg,
            0,
            &key("", "", &format!("svc-{i:02}")),
            InstanceSpec::new("10.0.0.1", 80),
        );
    }
    let ns = NamespaceId::public();
    let cases: &[(u64, u64, usize, Option<&str>)] = &[
        (1, 10, 10, Some("svc-00")),
        (2, 10, 10, Some("svc-10")),
        (3, 10, 5, Some("svc-20")),
        (4, 10, 0, None),
        (0, 10, 10, Some("svc-00")),
        (1, u64::from(u32::MAX), 25, Some("svc-00")),
        (u64::MAX, u64::MAX, 0, None),
    ];
    for (page_no, size, len, first) in cases {
        let page = reg.list_services(&ns, None, *page_no, *size);
        assert_eq!(page.count, 25);
        assert_eq!(page.items.len(), *len, "page {page_no} of {size}");
        assert_eq!(page.items.first().map(|k| k.name.as_str()), *first);
    }
}

#[test]
fn protect_threshold_serves_unhealthy_instances_as_healthy() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "guarded");
    reg.apply(&Command::new(
        0,
        Op::CreateService {
            service: svc.clone(),
            kind: ServiceKind::Persistent,
            meta: ServiceMeta {
                protect_threshold: 0.5,
                ..ServiceMeta::default()
            },
        },
    ))
    .unwrap();
    for (i, healthy) in [true, false, false].into_iter().enumerate() {
        let ip = format!("10.0.0.{i}");
        let mut spec = InstanceSpec::new(ip.clone(), 80);
        spec.healthy = healthy;
        reg.apply(&Command::new(
            0,
            Op::Register {
                service: svc.clone(),
                owner: Owner::Persistent {
                    ip: ip.into(),
                    port: 80,
                },
                instances: vec![spec],
            },
        ))
        .unwrap();
    }
    let service = reg.service(&svc).unwrap();
    // 1 of 3 healthy: 0.33 <= 0.5, so everything is served as healthy.
    let selected = all(&service);
    assert!(selected.reach_protection_threshold);
    assert_eq!(selected.instances.len(), 3);
    assert!(selected.instances.iter().all(|i| i.healthy));
    // healthyOnly: the ratio is computed over the healthy-only list (1/1).
    let healthy_only = service.select(&Selection {
        healthy_only: true,
        enabled_only: true,
        ..Selection::default()
    });
    assert!(!healthy_only.reach_protection_threshold);
    assert_eq!(healthy_only.instances.len(), 1);
}

#[test]
fn protect_threshold_is_skipped_for_implicit_services() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "implicit");
    let mut spec = InstanceSpec::new("10.0.0.1", 80);
    spec.healthy = false;
    register(&mut reg, 0, &svc, spec);
    let selected = all(&reg.service(&svc).unwrap());
    assert!(!selected.reach_protection_threshold);
    assert!(!selected.instances[0].healthy);
}

#[test]
fn default_threshold_fires_only_when_no_instance_is_healthy() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "zero");
    reg.apply(&Command::new(
        0,
        Op::CreateService {
            service: svc.clone(),
            kind: ServiceKind::Persistent,
            meta: ServiceMeta::default(),
        },
    ))
    .unwrap();
    assert!(
        !all(&reg.service(&svc).unwrap()).reach_protection_threshold,
        "empty never fires"
    );
    let mut spec = InstanceSpec::new("10.0.0.1", 80);
    spec.healthy = false;
    reg.apply(&Command::new(
        0,
        Op::Register {
            service: svc.clone(),
            owner: Owner::Persistent {
                ip: "10.0.0.1".into(),
                port: 80,
            },
            instances: vec![spec],
        },
    ))
    .unwrap();
    assert!(all(&reg.service(&svc).unwrap()).reach_protection_threshold);
}

#[test]
fn cluster_filter_and_disabled_instances() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "clustered");
    let mut a = InstanceSpec::new("10.0.0.1", 80);
    a.cluster = ClusterName::parse("A").unwrap();
    let mut b = InstanceSpec::new("10.0.0.2", 80);
    b.cluster = ClusterName::parse("B").unwrap();
    b.enabled = false;
    register(&mut reg, 0, &svc, a);
    register(&mut reg, 0, &svc, b);
    let service = reg.service(&svc).unwrap();
    let only_a = [ClusterName::parse("A").unwrap()];
    let selected = service.select(&Selection {
        clusters: &only_a,
        enabled_only: true,
        ..Selection::default()
    });
    assert_eq!(selected.instances.len(), 1);
    assert_eq!(all(&service).instances.len(), 1, "disabled B is hidden");
    assert_eq!(service.instances().len(), 2);
}

#[test]
fn every_change_gets_the_next_revision_and_the_service_remembers_its_last() {
    let mut reg = Registry::new(RegistryOptions::default());
    let a = key("", "", "a");
    let b = key("", "", "b");
    let first = register(&mut reg, 0, &a, InstanceSpec::new("10.0.0.1", 80));
    // ServiceCreated + InstanceAdded.
    assert_eq!(
        first.iter().map(|c| c.revision).collect::<Vec<_>>(),
        vec![1, 2]
    );
    register(&mut reg, 0, &b, InstanceSpec::new("10.0.0.1", 81));
    assert_eq!(reg.revision(), 4);
    assert_eq!(reg.service(&a).unwrap().revision(), 2);
    assert_eq!(reg.service(&b).unwrap().revision(), 4);
    // Registering the same thing again changes nothing and takes no revision.
    assert!(register(&mut reg, 0, &a, InstanceSpec::new("10.0.0.1", 80)).is_empty());
    assert_eq!(reg.revision(), 4);
}

#[test]
fn the_change_log_resumes_or_says_it_is_compacted() {
    let mut reg = Registry::new(RegistryOptions {
        change_log_capacity: 4,
        ..RegistryOptions::default()
    });
    for port in 0..3 {
        register(
            &mut reg,
            0,
            &key("", "", "svc"),
            InstanceSpec::new("10.0.0.1", 8000 + port),
        );
    }
    // Revisions 1..=4 exist; the log keeps the last four.
    let revisions: Vec<u64> = reg.changes_since(1).unwrap().map(|c| c.revision).collect();
    assert_eq!(revisions, vec![2, 3, 4]);
    assert_eq!(reg.changes_since(4).unwrap().count(), 0);
    register(
        &mut reg,
        0,
        &key("", "", "svc"),
        InstanceSpec::new("10.0.0.1", 9000),
    );
    assert!(matches!(
        reg.changes_since(0),
        Err(Error::HistoryCompacted {
            requested: 0,
            oldest: 2
        })
    ));
    // Past the eviction, each change still carries its own revision.
    let resumed: Vec<(u64, Option<u16>)> = reg
        .changes_since(2)
        .unwrap()
        .map(|c| {
            let port = match &c.event {
                Event::InstanceAdded { instance, .. } => Some(instance.port),
                _ => None,
            };
            (c.revision, port)
        })
        .collect();
    assert_eq!(
        resumed,
        vec![(3, Some(8001)), (4, Some(8002)), (5, Some(9000))]
    );
    assert!(reg.changes_since(99).is_err(), "a revision from the future");
}

#[test]
fn a_refused_batch_changes_nothing() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "batch");
    let good = InstanceSpec::new("10.0.0.1", 80);
    let mut bad = InstanceSpec::new("10.0.0.2", 80);
    bad.weight = -1.0;
    let result = reg.apply(&Command::new(
        0,
        Op::Register {
            service: svc.clone(),
            owner: Owner::Connection {
                node: 1,
                id: "c1".into(),
            },
            instances: vec![good, bad],
        },
    ));
    assert!(matches!(
        result,
        Err(Error::Invalid {
            field: "weight",
            ..
        })
    ));
    assert!(reg.service(&svc).is_none());
    assert_eq!(reg.revision(), 0);
}

#[test]
fn a_connection_register_replaces_its_entry_and_deregister_removes_it_whole() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "conn");
    let owner = Owner::Connection {
        node: 1,
        id: "c1".into(),
    };
    let reg_op = |instances: Vec<InstanceSpec>| Op::Register {
        service: svc.clone(),
        owner: owner.clone(),
        instances,
    };
    reg.apply(&Command::new(
        0,
        reg_op(vec![
            InstanceSpec::new("10.0.0.1", 80),
            InstanceSpec::new("10.0.0.1", 81),
        ]),
    ))
    .unwrap();
    let changes = reg
        .apply(&Command::new(
            0,
            reg_op(vec![InstanceSpec::new("10.0.0.1", 82)]),
        ))
        .unwrap();
    let removed = changes
        .iter()
        .filter(|c| {
            matches!(
                c.event,
                Event::InstanceRemoved {
                    cause: RemovalCause::Replaced,
                    ..
                }
            )
        })
        .count();
    assert_eq!(removed, 2);
    assert_eq!(reg.service(&svc).unwrap().instances().len(), 1);
    reg.apply(&Command::new(
        0,
        Op::Deregister {
            service: svc.clone(),
            owner: owner.clone(),
        },
    ))
    .unwrap();
    assert_eq!(reg.service(&svc).unwrap().instances().len(), 0);
    assert_eq!(reg.counts().instances, 0);
}

#[test]
fn a_new_owner_takes_an_instance_over_in_place() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "moving");
    let old = Owner::Connection {
        node: 1,
        id: "old".into(),
    };
    let new = Owner::Connection {
        node: 2,
        id: "new".into(),
    };
    for owner in [&old, &new] {
        reg.apply(&Command::new(
            0,
            Op::Register {
                service: svc.clone(),
                owner: owner.clone(),
                instances: vec![InstanceSpec::new("10.0.0.1", 80)],
            },
        ))
        .unwrap();
    }
    // The old connection closing must not take the moved instance along.
    let changes = reg
        .apply(&Command::new(
            0,
            Op::RemoveOwner {
                owner: old,
                cause: RemovalCause::ConnectionClosed,
            },
        ))
        .unwrap();
    assert!(changes.is_empty());
    let service = reg.service(&svc).unwrap();
    assert_eq!(service.instances().next().unwrap().owner, new);
}

#[test]
fn a_lost_node_loses_what_its_connections_still_own_and_nothing_else() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "owned");
    let conn = |node: u64, id: &str| Owner::Connection {
        node,
        id: id.into(),
    };
    let registrations = [
        (conn(1, "a"), 80),
        (conn(1, "b"), 81),
        (conn(1, "moving"), 82),
        (conn(2, "c"), 83),
        (conn(3, "d"), 84),
        (beat_owner("10.0.0.9", 85), 85),
    ];
    for (owner, port) in &registrations {
        reg.apply(&Command::new(
            0,
            Op::Register {
                service: svc.clone(),
                owner: owner.clone(),
                instances: vec![InstanceSpec::new("10.0.0.1", *port)],
            },
        ))
        .unwrap();
    }
    // The client of "moving" reconnected to node 2 in time.
    reg.apply(&Command::new(
        0,
        Op::Register {
            service: svc.clone(),
            owner: conn(2, "moved"),
            instances: vec![InstanceSpec::new("10.0.0.1", 82)],
        },
    ))
    .unwrap();
    assert_eq!(reg.owner_nodes().into_iter().collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(reg.owners_on(1).count(), 2);

    let changes = reg
        .apply(&Command::new(1, Op::NodeLost { node: 1 }))
        .unwrap();
    let mut removed: Vec<u16> = changes
        .iter()
        .map(|c| match &c.event {
            Event::InstanceRemoved {
                instance,
                cause: RemovalCause::OwnerLost,
                ..
            } => instance.port,
            other => panic!("unexpected change {other:?}"),
        })
        .collect();
    removed.sort_unstable();
    assert_eq!(removed, [80, 81]);
    let ports: Vec<u16> = reg
        .service(&svc)
        .unwrap()
        .instances()
        .map(|i| i.port)
        .collect();
    assert_eq!(ports, [82, 83, 84, 85]);
    assert_eq!(reg.lost_nodes().iter().copied().collect::<Vec<_>>(), [1]);
    assert_eq!(reg.owner_nodes().into_iter().collect::<Vec<_>>(), [2, 3]);

    // The mark travels in snapshots and goes when the node is back.
    let restored = Registry::restore(reg.snapshot(), RegistryOptions::default());
    assert!(restored.lost_nodes().contains(&1));
    reg.apply(&Command::new(2, Op::NodeBack { node: 1 }))
        .unwrap();
    assert!(reg.lost_nodes().is_empty());
}

#[test]
fn ephemeral_and_persistent_never_mix() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "mixed");
    register(&mut reg, 0, &svc, InstanceSpec::new("10.0.0.1", 80));
    let err = reg
        .apply(&Command::new(
            0,
            Op::Register {
                service: svc.clone(),
                owner: Owner::Persistent {
                    ip: "10.0.0.2".into(),
                    port: 80,
                },
                instances: vec![InstanceSpec::new("10.0.0.2", 80)],
            },
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "errCode: 400, errMsg: Current service DEFAULT_GROUP@@mixed is ephemeral service, can't register persistent instance. "
    );
}

#[test]
fn implicit_empty_services_are_purged_after_their_ttl_and_explicit_ones_stay() {
    let mut reg = Registry::new(RegistryOptions::default());
    let implicit = key("", "", "implicit");
    let explicit = key("", "", "explicit");
    register(&mut reg, 0, &implicit, InstanceSpec::new("10.0.0.1", 80));
    reg.apply(&Command::new(
        0,
        Op::CreateService {
            service: explicit.clone(),
            kind: ServiceKind::Ephemeral,
            meta: ServiceMeta::default(),
        },
    ))
    .unwrap();
    reg.apply(&Command::new(
        10_000,
        Op::Deregister {
            service: implicit.clone(),
            owner: beat_owner("10.0.0.1", 80),
        },
    ))
    .unwrap();
    assert_eq!(reg.next_purge_deadline(), Some(70_000));
    assert!(reg
        .apply(&Command::new(69_999, Op::PurgeEmptyServices))
        .unwrap()
        .is_empty());
    let purged = reg
        .apply(&Command::new(70_000, Op::PurgeEmptyServices))
        .unwrap();
    assert!(
        matches!(&purged[..], [Change { event: Event::ServiceRemoved { service }, .. }] if *service == implicit)
    );
    assert!(reg.service(&explicit).is_some());
    assert_eq!(reg.next_purge_deadline(), None);
}

#[test]
fn services_with_instances_cannot_be_deleted_and_missing_ones_say_so() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "busy");
    register(&mut reg, 0, &svc, InstanceSpec::new("10.0.0.1", 80));
    assert!(matches!(
        reg.apply(&Command::new(
            0,
            Op::DeleteService {
                service: svc.clone()
            }
        )),
        Err(Error::ServiceNotEmpty { .. })
    ));
    assert!(matches!(
        reg.apply(&Command::new(
            0,
            Op::DeleteService {
                service: key("", "", "nope")
            }
        )),
        Err(Error::ServiceNotFound { .. })
    ));
}

#[test]
fn operator_updates_overlay_later_registrations() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "overlay");
    let spec = InstanceSpec::new("10.0.0.1", 80);
    register(&mut reg, 0, &svc, spec.clone());
    reg.apply(&Command::new(
        0,
        Op::UpdateInstance {
            service: svc.clone(),
            key: spec.key(),
            patch: InstancePatch {
                weight: Some(3.0),
                enabled: Some(false),
                metadata: Some([("zone".to_owned(), "hz".to_owned())].into()),
            },
            mode: UpdateMode::Overlay,
        },
    ))
    .unwrap();
    let instance = reg
        .service(&svc)
        .unwrap()
        .instance(&spec.key())
        .cloned()
        .unwrap();
    assert_eq!(
        (instance.weight, instance.enabled, instance.zone()),
        (3.0, false, "hz")
    );
    // Re-registration keeps the operator's overlay.
    reg.apply(&Command::new(
        1,
        Op::Deregister {
            service: svc.clone(),
            owner: beat_owner("10.0.0.1", 80),
        },
    ))
    .unwrap();
    register(&mut reg, 2, &svc, spec.clone());
    let instance = reg
        .service(&svc)
        .unwrap()
        .instance(&spec.key())
        .cloned()
        .unwrap();
    assert_eq!(instance.weight, 3.0);
}

#[test]
fn zone_comes_from_metadata_else_the_cluster() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "zoned");
    let mut hz = InstanceSpec::new("10.0.0.1", 80);
    hz.metadata.insert("zone".into(), "hz".into());
    let mut sh = InstanceSpec::new("10.0.0.2", 80);
    sh.cluster = ClusterName::parse("sh").unwrap();
    register(&mut reg, 0, &svc, hz);
    register(&mut reg, 0, &svc, sh);
    let service = reg.service(&svc).unwrap();
    let zones: Vec<(&str, usize)> = service
        .zones()
        .into_iter()
        .map(|(z, v)| (z, v.len()))
        .collect();
    assert_eq!(zones, vec![("hz", 1), ("sh", 1)]);
}

#[test]
fn snapshot_and_restore_round_trip() {
    let mut reg = Registry::new(RegistryOptions::default());
    reg.apply(&Command::new(
        0,
        Op::CreateNamespace {
            namespace: NamespaceId::parse("dev").unwrap(),
            name: "dev".into(),
            description: "development".into(),
        },
    ))
    .unwrap();
    register(
        &mut reg,
        0,
        &key("dev", "g", "a"),
        InstanceSpec::new("10.0.0.1", 80),
    );
    register(
        &mut reg,
        0,
        &key("", "", "b"),
        InstanceSpec::new("10.0.0.2", 80),
    );
    let snapshot = reg.snapshot();
    let restored = Registry::restore(snapshot.clone(), RegistryOptions::default());
    assert_eq!(restored.snapshot(), snapshot);
    assert_eq!(restored.revision(), reg.revision());
    assert_eq!(restored.counts(), reg.counts());
    // The owner index was rebuilt: deregistering works after a restore.
    let mut restored = restored;
    let changes = restored
        .apply(&Command::new(
            1,
            Op::Deregister {
                service: key("dev", "g", "a"),
                owner: beat_owner("10.0.0.1", 80),
            },
        ))
        .unwrap();
    assert_eq!(changes.len(), 1);
}

#[test]
fn a_taken_view_does_not_move_while_writes_continue() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("", "", "steady");
    register(&mut reg, 0, &svc, InstanceSpec::new("10.0.0.1", 80));
    let view = reg.namespace_view(&NamespaceId::public());
    register(&mut reg, 0, &svc, InstanceSpec::new("10.0.0.2", 80));
    assert_eq!(view.services[0].instances().len(), 1);
    assert_eq!(reg.service(&svc).unwrap().instances().len(), 2);
}

#[test]
fn namespaces_are_created_listed_and_only_deleted_when_empty() {
    let mut reg = Registry::new(RegistryOptions::default());
    let dev = NamespaceId::parse("dev").unwrap();
    let create = Op::CreateNamespace {
        namespace: dev.clone(),
        name: "Dev".into(),
        description: "d".into(),
    };
    reg.apply(&Command::new(0, create.clone())).unwrap();
    assert!(matches!(
        reg.apply(&Command::new(0, create)),
        Err(Error::NamespaceExists { .. })
    ));
    register(
        &mut reg,
        0,
        &key("dev", "", "svc"),
        InstanceSpec::new("10.0.0.1", 80),
    );
    register(
        &mut reg,
        0,
        &key("implicit", "", "svc"),
        InstanceSpec::new("10.0.0.1", 80),
    );
    let ids: Vec<String> = reg.namespaces().iter().map(|n| n.id.to_string()).collect();
    assert_eq!(ids, vec!["public", "dev", "implicit"]);
    assert!(matches!(
        reg.apply(&Command::new(
            0,
            Op::DeleteNamespace {
                namespace: dev.clone()
            }
        )),
        Err(Error::NamespaceNotEmpty { services: 1, .. })
    ));
    assert!(reg
        .apply(&Command::new(
            0,
            Op::DeleteNamespace {
                namespace: NamespaceId::public()
            }
        ))
        .is_err());
}

fn publish(
    reg: &mut Registry,
    at: Millis,
    content: &str,
    cas: Option<&str>,
) -> Result<Vec<Change>, Error> {
    reg.apply(&Command::new(
        at,
        Op::PublishConfig {
            key: ConfigKey::parse("", "mapping", "com.foo.Demo").unwrap(),
            spec: ConfigSpec {
                content: content.to_owned(),
                ..ConfigSpec::default()
            },
            cas_md5: cas.map(str::to_owned),
        },
    ))
}

#[test]
fn config_cas_publishes_compare_md5s_and_a_failure_changes_nothing() {
    let mut reg = Registry::new(RegistryOptions::default());
    let key = ConfigKey::parse("public", "mapping", "com.foo.Demo").unwrap();
    // A CAS publish of a missing item inserts (Dubbo sends "0" first).
    publish(&mut reg, 1, "app1", Some("0")).unwrap();
    assert_eq!(reg.config(&key).unwrap().md5, content_md5("app1"));
    let revision = reg.revision();
    assert!(matches!(
        publish(&mut reg, 2, "app1,app2", Some("0")),
        Err(Error::CasMismatch { .. })
    ));
    assert_eq!(reg.revision(), revision, "a failed CAS takes no revision");
    assert_eq!(reg.config(&key).unwrap().content, "app1");
    publish(&mut reg, 3, "app1,app2", Some(&content_md5("app1"))).unwrap();
    assert_eq!(reg.config(&key).unwrap().content, "app1,app2");
    assert_eq!(reg.config(&key).unwrap().last_modified, 3);
}

#[test]
fn configs_written_together_are_written_all_or_none() {
    let mut reg = Registry::new(RegistryOptions {
        limits: Limits {
            max_config_bytes: 8,
            ..Limits::default()
        },
        ..RegistryOptions::default()
    });
    let key = |id: &str| ConfigKey::parse("public", "g", id).unwrap();
    let spec = |content: &str| ConfigSpec {
        content: content.to_owned(),
        ..ConfigSpec::default()
    };
    let write = |expect: Vec<(ConfigKey, Option<String>)>,
                 publish: Vec<(ConfigKey, ConfigSpec)>,
                 remove: Vec<ConfigKey>| {
        Command::new(
            1,
            Op::WriteConfigs {
                expect,
                publish,
                remove,
            },
        )
    };
    // Expected absent, and it is: both written, and the old one removed.
    publish(&mut reg, 1, "old", None).unwrap();
    let old = ConfigKey::parse("", "mapping", "com.foo.Demo").unwrap();
    reg.apply(&write(
        vec![(key("list"), None)],
        vec![(key("list"), spec("v1")), (key("v1"), spec("one"))],
        vec![old.clone()],
    ))
    .unwrap();
    assert_eq!(reg.config(&key("v1")).unwrap().content, "one");
    assert!(reg.config(&old).is_none());
    let revision = reg.revision();
    // Expected absent but there: nothing written.
    assert!(matches!(
        reg.apply(&write(
            vec![(key("list"), None)],
            vec![(key("list"), spec("v2")), (key("v2"), spec("two"))],
            vec![key("v1")],
        )),
        Err(Error::CasMismatch { .. })
    ));
    // Of the right md5, but one item too large to store: nothing written.
    let md5 = reg.config(&key("list")).unwrap().md5.clone();
    assert!(reg
        .apply(&write(
            vec![(key("list"), Some(md5.clone()))],
            vec![
                (key("list"), spec("v2")),
                (key("v2"), spec("much too long"))
            ],
            Vec::new(),
        ))
        .is_err());
    assert_eq!(
        reg.revision(),
        revision,
        "a refused write takes no revision"
    );
    assert_eq!(reg.config(&key("list")).unwrap().content, "v1");
    assert!(reg.config(&key("v1")).is_some() && reg.config(&key("v2")).is_none());
    reg.apply(&write(
        vec![(key("list"), Some(md5))],
        vec![(key("list"), spec("v2")), (key("v2"), spec("two"))],
        Vec::new(),
    ))
    .unwrap();
    assert_eq!(reg.config(&key("list")).unwrap().content, "v2");
}

#[test]
fn config_changes_say_whether_the_content_changed_and_removal_of_nothing_is_quiet() {
    let mut reg = Registry::new(RegistryOptions::default());
    let changed = |changes: Vec<Change>| match &changes[..] {
        [Change {
            event: Event::ConfigPublished { changed, .. },
            ..
        }] => *changed,
        other => panic!("{other:?}"),
    };
    assert!(changed(publish(&mut reg, 1, "a", None).unwrap()));
    assert!(!changed(publish(&mut reg, 2, "a", None).unwrap()));
    assert!(changed(publish(&mut reg, 3, "b", None).unwrap()));
    let key = ConfigKey::parse("", "mapping", "com.foo.Demo").unwrap();
    assert_eq!(
        reg.apply(&Command::new(4, Op::RemoveConfig { key: key.clone() }))
            .unwrap()
            .len(),
        1
    );
    assert!(reg
        .apply(&Command::new(5, Op::RemoveConfig { key: key.clone() }))
        .unwrap()
        .is_empty());
    assert_eq!(reg.config_md5(&key), "");
}

#[test]
fn configs_travel_in_snapshots_and_keep_a_namespace_from_being_deleted() {
    let mut reg = Registry::new(RegistryOptions::default());
    let dev = NamespaceId::parse("dev").unwrap();
    reg.apply(&Command::new(
        0,
        Op::CreateNamespace {
            namespace: dev.clone(),
            name: "dev".into(),
            description: String::new(),
        },
    ))
    .unwrap();
    reg.apply(&Command::new(
        0,
        Op::PublishConfig {
            key: ConfigKey::parse("dev", "g", "d").unwrap(),
            spec: ConfigSpec {
                content: "x".into(),
                ..ConfigSpec::default()
            },
            cas_md5: None,
        },
    ))
    .unwrap();
    let restored = Registry::restore(reg.snapshot(), RegistryOptions::default());
    assert_eq!(restored.config_count(&dev), 1);
    assert!(matches!(
        reg.apply(&Command::new(0, Op::DeleteNamespace { namespace: dev })),
        Err(Error::NamespaceNotEmpty { .. })
    ));
}

#[test]
fn oversized_or_blank_config_content_is_refused() {
    let mut reg = Registry::new(RegistryOptions {
        limits: Limits {
            max_config_bytes: 8,
            ..Limits::default()
        },
        ..RegistryOptions::default()
    });
    for content in ["123456789", "   "] {
        assert!(matches!(
            publish(&mut reg, 0, content, None),
            Err(Error::Invalid {
                field: "content",
                ..
            })
        ));
    }
    assert_eq!(reg.revision(), 0);
}

#[test]
fn instance_and_service_limits_refuse_by_setting_name_and_change_nothing() {
    let mut options = RegistryOptions::default();
    options.limits.max_instances_per_service = 2;
    options.limits.max_services_per_namespace = 2;
    let mut reg = Registry::new(options);
    let svc = key("", "", "full");
    let conn = Owner::Connection {
        node: 1,
        id: "c1".into(),
    };
    let batch = |ports: &[u16]| {
        Command::new(
            0,
            Op::Register {
                service: svc.clone(),
                owner: conn.clone(),
                instances: ports
                    .iter()
                    .map(|p| InstanceSpec::new("10.0.0.1", *p))
                    .collect(),
            },
        )
    };
    reg.apply(&batch(&[1, 2])).unwrap();
    let revision = reg.revision();
    // A third instance, from another owner, is one too many.
    let third = reg.apply(&Command::new(
        0,
        Op::Register {
            service: svc.clone(),
            owner: beat_owner("10.0.0.3", 80),
            instances: vec![InstanceSpec::new("10.0.0.3", 80)],
        },
    ));
    match third {
        Err(Error::OverLimit { setting, max, what }) => {
            assert_eq!((setting, max), ("max_instances_per_service", 2));
            assert!(what.contains("DEFAULT_GROUP@@full"), "{what}");
        }
        other => panic!("expected the instance limit, got {other:?}"),
    }
    assert_eq!(reg.revision(), revision);
    // Replacing the owner's own entry is not growth: it stays allowed,
    // and so is re-registering what is there.
    reg.apply(&batch(&[2, 3])).unwrap();
    reg.apply(&batch(&[2, 3])).unwrap();
    assert_eq!(all(&reg.service(&svc).unwrap()).instances.len(), 2);

    register(
        &mut reg,
        0,
        &key("", "", "second"),
        InstanceSpec::new("10.0.0.1", 80),
    );
    let revision = reg.revision();
    let refused = reg.apply(&Command::new(
        0,
        Op::Register {
            service: key("", "", "third"),
            owner: beat_owner("10.0.0.1", 80),
            instances: vec![InstanceSpec::new("10.0.0.1", 80)],
        },
    ));
    assert!(
        matches!(
            refused,
            Err(Error::OverLimit {
                setting: "max_services_per_namespace",
                max: 2,
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(reg.service(&key("", "", "third")).is_none());
    assert_eq!(reg.revision(), revision);
    // Another namespace has room of its own.
    register(
        &mut reg,
        0,
        &key("other", "", "third"),
        InstanceSpec::new("10.0.0.1", 80),
    );
}
