//! Config history: what each publish and removal keeps, the retention by
//! count and by age (judged by command timestamps), and snapshots.

use understudy_core::*;

fn key(data_id: &str) -> ConfigKey {
    ConfigKey::parse("", "g", data_id).unwrap()
}

fn source(ip: &str) -> ConfigSource {
    ConfigSource {
        ip: ip.to_owned(),
        user: "ops".to_owned(),
    }
}

fn publish(reg: &mut Registry, at: Millis, data_id: &str, content: &str) {
    reg.apply(&Command::new(
        at,
        Op::PublishConfigFrom {
            key: key(data_id),
            spec: ConfigSpec {
                content: content.to_owned(),
                ..ConfigSpec::default()
            },
            cas_md5: None,
            source: source("10.0.0.1"),
        },
    ))
    .unwrap();
}

fn remove(reg: &mut Registry, at: Millis, data_id: &str) {
    reg.apply(&Command::new(
        at,
        Op::RemoveConfigFrom {
            key: key(data_id),
            source: source("10.0.0.2"),
        },
    ))
    .unwrap();
}

/// A config's history, newest first, as (op, content).
fn history(reg: &Registry, data_id: &str) -> Vec<(&'static str, String)> {
    reg.config_history(&key(data_id))
        .map(|e| (e.op.letter(), e.item.content.clone()))
        .collect()
}

#[test]
fn publishes_and_removals_keep_what_they_wrote_and_what_they_replaced() {
    let mut reg = Registry::new(RegistryOptions::default());
    publish(&mut reg, 1, "a", "one");
    let created = reg.config(&key("a")).unwrap();
    assert_eq!(created.created_by, source("10.0.0.1"));
    publish(&mut reg, 2, "a", "two");
    // The same again changes nothing but the time: no entry.
    publish(&mut reg, 3, "a", "two");
    let item = reg.config(&key("a")).unwrap();
    assert_eq!(item.id, created.id, "a config keeps its id");
    assert_eq!(item.created, 1);
    assert_eq!(item.last_modified, 3);
    remove(&mut reg, 4, "a");
    assert_eq!(
        history(&reg, "a"),
        vec![
            ("D", "two".to_owned()),
            ("U", "one".to_owned()),
            ("I", "one".to_owned()),
        ]
    );
    let entries: Vec<_> = reg.config_history(&key("a")).cloned().collect();
    assert!(entries.windows(2).all(|w| w[0].nid > w[1].nid), "ids grow");
    assert_eq!(entries[0].source, source("10.0.0.2"));
    assert_eq!(entries[0].at, 4);
    assert_eq!(
        reg.history_entry(entries[1].nid).unwrap().op,
        HistoryOp::Update
    );
    assert_eq!(
        reg.latest_history_of(created.id).unwrap().nid,
        entries[0].nid
    );
    // Published again after removal: a new config, with a new id.
    publish(&mut reg, 5, "a", "three");
    assert_ne!(reg.config(&key("a")).unwrap().id, created.id);
}

#[test]
fn history_is_bounded_by_count_per_config_and_by_age() {
    let options = RegistryOptions {
        history: HistoryRetention {
            max_per_config: 2,
            max_age: 1_000,
        },
        ..RegistryOptions::default()
    };
    let mut reg = Registry::new(options);
    for (at, content) in [(10, "1"), (20, "2"), (30, "3"), (40, "4")] {
        publish(&mut reg, at, "a", content);
    }
    assert_eq!(
        history(&reg, "a"),
        vec![("U", "3".to_owned()), ("U", "2".to_owned())],
        "two entries per config"
    );
    publish(&mut reg, 500, "b", "x");
    assert_eq!(history(&reg, "a").len(), 2, "nothing is old yet");
    // A write to another config at 1_045 makes a's entries (written at
    // 30 and 40) older than 1_000 ms: they go; b's (500) stays.
    publish(&mut reg, 1_035, "b", "y");
    assert_eq!(
        history(&reg, "a"),
        vec![("U", "3".to_owned())],
        "the one at 30 went"
    );
    publish(&mut reg, 1_045, "b", "z");
    assert!(history(&reg, "a").is_empty(), "{:?}", history(&reg, "a"));
    assert_eq!(history(&reg, "b").len(), 2, "two per config");
}

#[test]
fn history_and_ids_travel_in_snapshots() {
    let mut reg = Registry::new(RegistryOptions::default());
    publish(&mut reg, 1, "a", "one");
    publish(&mut reg, 2, "a", "two");
    let restored = Registry::restore(reg.snapshot(), RegistryOptions::default());
    assert_eq!(history(&restored, "a"), history(&reg, "a"));
    let mut restored = restored;
    publish(&mut restored, 3, "b", "x");
    let ids: Vec<u64> = reg
        .config_history(&key("a"))
        .map(|e| e.nid)
        .chain([reg.config(&key("a")).unwrap().id])
        .collect();
    let new_id = restored.config(&key("b")).unwrap().id;
    assert!(
        ids.iter().all(|id| *id < new_id),
        "no id is handed out twice"
    );
}

fn gray(reg: &mut Registry, at: Millis, rule: GrayRule, content: &str) {
    reg.apply(&Command::new(
        at,
        Op::PublishConfigGray {
            key: key("a"),
            rule,
            spec: ConfigSpec {
                content: content.to_owned(),
                ..ConfigSpec::default()
            },
            source: source("10.0.0.3"),
        },
    ))
    .unwrap();
}

/// What a client at `ip` carrying `tag` reads of config a.
fn read(reg: &Registry, ip: &str, tag: Option<&str>) -> Option<(String, Option<String>)> {
    reg.config_for(&key("a"), ip, tag)
        .map(|(item, gray)| (item.content.clone(), gray.map(|g| g.rule.name())))
}

#[test]
fn gray_releases_reach_the_clients_their_rules_take_and_are_kept_in_history() {
    let mut reg = Registry::new(RegistryOptions::default());
    publish(&mut reg, 1, "a", "formal");
    let beta = GrayRule::Beta {
        ips: vec!["127.0.0.2".to_owned()],
    };
    gray(&mut reg, 2, beta, "beta");
    gray(
        &mut reg,
        3,
        GrayRule::Tag {
            tag: "canary".to_owned(),
        },
        "tagged",
    );
    assert_eq!(read(&reg, "127.0.0.1", None), Some(("formal".into(), None)));
    assert_eq!(
        read(&reg, "127.0.0.2", None),
        Some(("beta".into(), Some("beta".into())))
    );
    assert_eq!(
        read(&reg, "127.0.0.1", Some("canary")),
        Some(("tagged".into(), Some("tag_canary".into())))
    );
    // A beta release wins over a tag release, as in Nacos.
    assert_eq!(read(&reg, "127.0.0.2", Some("canary")).unwrap().0, "beta");
    let restored = Registry::restore(reg.snapshot(), RegistryOptions::default());
    assert_eq!(read(&restored, "127.0.0.2", None).unwrap().0, "beta");

    // Stopping a release sends its clients back to the formal content,
    // and the change wakes the config's listeners.
    let changes = reg
        .apply(&Command::new(
            4,
            Op::RemoveConfigGray {
                key: key("a"),
                name: "beta".to_owned(),
                source: source("10.0.0.3"),
            },
        ))
        .unwrap();
    assert!(changes.iter().any(|c| c.event.config() == Some(&key("a"))));
    assert_eq!(read(&reg, "127.0.0.2", None), Some(("formal".into(), None)));
    let grays: Vec<String> = reg
        .config_history(&key("a"))
        .filter(|e| !e.gray_name.is_empty())
        .map(|e| format!("{}:{}", e.op.letter(), e.gray_name))
        .collect();
    assert_eq!(grays, ["D:beta", "I:tag_canary", "I:beta"]);
    assert_eq!(
        reg.config(&key("a")).unwrap().content,
        "formal",
        "untouched"
    );
}
