//! What an instance derives instead of storing: its generated id, rendered
//! from its service's key, and its zone, read off its metadata or its
//! cluster; both through changes and snapshots. (A snapshot written when
//! every id was stored is read in `instance.rs`' own tests.)

use understudy_core::*;

fn key(group: &str, name: &str) -> ServiceKey {
    ServiceKey::parse("", group, name).unwrap()
}

fn register(reg: &mut Registry, service: &ServiceKey, spec: InstanceSpec) {
    reg.apply(&Command::new(
        0,
        Op::Register {
            service: service.clone(),
            owner: Owner::Beat {
                ip: spec.ip.clone().into(),
                port: spec.port,
            },
            instances: vec![spec],
        },
    ))
    .unwrap();
}

fn only(reg: &Registry, service: &ServiceKey) -> Instance {
    let service = reg.service(service).unwrap();
    assert_eq!(service.instances().len(), 1);
    let instance = service.instances().next().unwrap().clone();
    instance
}

fn in_zone(ip: &str, zone: &str) -> InstanceSpec {
    let mut spec = InstanceSpec::new(ip, 80);
    spec.metadata.insert("version".into(), "1.2".into());
    spec.metadata.insert("zone".into(), zone.into());
    spec.metadata.insert("a".into(), "hz".into());
    spec
}

/// The snapshot through postcard, as raft writes it.
fn through_bytes(snapshot: &RegistrySnapshot) -> RegistrySnapshot {
    postcard::from_bytes(&postcard::to_allocvec(snapshot).unwrap()).unwrap()
}

#[test]
fn a_generated_id_is_rendered_from_the_service_and_a_given_one_is_kept() {
    let mut reg = Registry::new(RegistryOptions::default());
    let orders = key("g", "orders");
    register(&mut reg, &orders, InstanceSpec::new("10.0.0.1", 80));
    let generated = only(&reg, &orders);
    assert_eq!(
        generated.instance_id(&orders),
        "10.0.0.1#80#DEFAULT#g@@orders"
    );
    assert_eq!(generated.given_instance_id(), None);

    let carts = key("g", "carts");
    let mut spec = InstanceSpec::new("10.0.0.2", 80);
    spec.instance_id = Some("cart-1".into());
    register(&mut reg, &carts, spec);
    assert_eq!(only(&reg, &carts).instance_id(&carts), "cart-1");

    // A client that sends the id it would be given stores nothing.
    let users = key("DEFAULT_GROUP", "users");
    let mut spec = InstanceSpec::new("10.0.0.3", 80);
    spec.instance_id = Some("10.0.0.3#80#DEFAULT#DEFAULT_GROUP@@users".into());
    register(&mut reg, &users, spec);
    let user = only(&reg, &users);
    assert_eq!(user.given_instance_id(), None);
    assert_eq!(
        user.instance_id(&users),
        "10.0.0.3#80#DEFAULT#DEFAULT_GROUP@@users"
    );

    let restored = Registry::restore(through_bytes(&reg.snapshot()), RegistryOptions::default());
    assert_eq!(restored.snapshot(), reg.snapshot());
    assert_eq!(
        only(&restored, &orders).instance_id(&orders),
        "10.0.0.1#80#DEFAULT#g@@orders"
    );
    assert_eq!(only(&restored, &carts).given_instance_id(), Some("cart-1"));
}

#[test]
fn the_zone_is_read_off_the_metadata_or_the_cluster_through_changes_and_snapshots() {
    let mut reg = Registry::new(RegistryOptions::default());
    let svc = key("g", "orders");
    register(&mut reg, &svc, in_zone("10.0.0.1", "sh"));
    register(&mut reg, &svc, InstanceSpec::new("10.0.0.2", 80));
    let mut blank = in_zone("10.0.0.3", "  ");
    blank.cluster = ClusterName::parse("c1").unwrap();
    register(&mut reg, &svc, blank);
    let zones = |reg: &Registry| -> Vec<String> {
        let service = reg.service(&svc).unwrap();
        service.instances().map(|i| i.zone().to_owned()).collect()
    };
    assert_eq!(zones(&reg), ["sh", "DEFAULT", "c1"]);

    // A change to the metadata places the zone again.
    let first = InstanceSpec::new("10.0.0.1", 80).key();
    let mut metadata = Metadata::new();
    metadata.insert("zone".into(), "bj".into());
    metadata.insert("b".into(), "x".repeat(40));
    reg.apply(&Command::new(
        1,
        Op::UpdateInstance {
            service: svc.clone(),
            key: first.clone(),
            patch: InstancePatch {
                metadata: Some(metadata),
                ..InstancePatch::default()
            },
            mode: UpdateMode::Existing,
        },
    ))
    .unwrap();
    assert_eq!(zones(&reg), ["bj", "DEFAULT", "c1"]);
    reg.apply(&Command::new(
        2,
        Op::RemoveInstanceMetadata {
            service: svc.clone(),
            key: first,
            keys: vec!["zone".into()],
        },
    ))
    .unwrap();
    assert_eq!(zones(&reg), ["DEFAULT", "DEFAULT", "c1"]);

    register(&mut reg, &svc, in_zone("10.0.0.4", "hz"));
    let restored = Registry::restore(through_bytes(&reg.snapshot()), RegistryOptions::default());
    assert_eq!(zones(&restored), ["DEFAULT", "DEFAULT", "c1", "hz"]);
    assert_eq!(restored.snapshot(), reg.snapshot());
}
