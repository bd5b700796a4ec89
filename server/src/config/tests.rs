//! The settings' tests: layering, validation, the example file.

use std::time::Duration;

use super::*;

#[test]
fn flags_win_over_the_file_and_the_file_over_defaults() {
    let file = Settings::from_toml("http_port = 9000\nnode_id = 7\n").unwrap();
    let flags = Settings {
        http_port: Some(9100),
        ..Settings::default()
    };
    let config = ValidConfig::from_settings(flags.over(file)).unwrap();
    assert_eq!((config.http_port, config.node_id), (9100, 7));
    assert_eq!(config.bind.to_string(), "127.0.0.1");
}

#[test]
fn the_link_model_comes_from_flags_or_the_file() {
    let file = Settings::from_toml(
        "link = [\"hz-sh=40ms~10ms,loss=1%\", \"sh->hz=cut\"]\napply_delay = [\"sh=500ms\"]\nchaos_seed = 9\n",
    )
    .unwrap();
    let config = ValidConfig::from_settings(file).unwrap();
    let links: Vec<String> = config.chaos.links.iter().map(|l| l.to_string()).collect();
    assert_eq!(links, ["hz-sh=40ms~10ms,loss=1%", "sh->hz=cut"]);
    assert_eq!(config.chaos.seed, 9);
    assert_eq!(config.chaos.apply_delays["sh"], Duration::from_millis(500));
    assert_eq!(config.chaos.tick, Duration::from_millis(100));
}

#[test]
fn unknown_keys_in_the_file_are_errors() {
    let err = Settings::from_toml("http_prot = 1\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("http_prot"), "{err}");
}

#[test]
fn invalid_values_name_their_key() {
    let cases = [
        (
            Settings {
                health_check: Some("udp".into()),
                ..Settings::default()
            },
            "health_check",
        ),
        (
            Settings {
                health_check_timeout_ms: Some(5_000),
                ..Settings::default()
            },
            "health_check_timeout_ms",
        ),
        (
            Settings {
                unhealthy_timeout_ms: Some(1),
                ..Settings::default()
            },
            "unhealthy_timeout_ms",
        ),
        (
            Settings {
                delete_timeout_ms: Some(10_000),
                ..Settings::default()
            },
            "delete_timeout_ms",
        ),
        (
            Settings {
                max_body_bytes: Some(10),
                ..Settings::default()
            },
            "max_body_bytes",
        ),
        (
            Settings {
                dc: Some("a b".into()),
                ..Settings::default()
            },
            "dc",
        ),
        (
            Settings {
                write_queue: Some(0),
                ..Settings::default()
            },
            "write_queue",
        ),
        (
            Settings {
                log: Some("[[[".into()),
                ..Settings::default()
            },
            "log",
        ),
        (
            Settings {
                data_dir: Some(PathBuf::new()),
                ..Settings::default()
            },
            "data_dir",
        ),
        (
            Settings {
                link: Some(vec!["hz-sh=40".into()]),
                ..Settings::default()
            },
            "link",
        ),
        (
            Settings {
                apply_delay: Some(vec!["sh".into()]),
                ..Settings::default()
            },
            "apply_delay",
        ),
        (
            Settings {
                tick_ms: Some(1),
                ..Settings::default()
            },
            "tick_ms",
        ),
    ];
    for (settings, key) in cases {
        match ValidConfig::from_settings(settings) {
            Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key),
            other => panic!("{key}: expected an error, got {other:?}"),
        }
    }
}

#[test]
fn one_member_list_may_name_this_node_which_must_agree_with_its_address_and_dc() {
    let list = ["1=node1:7001@hz", "2=node2:7001@hz", "3=node3:7001@sh"];
    let node = |id: u64, more: Settings| {
        ValidConfig::from_settings(Settings {
            node_id: Some(id),
            bind: Some("0.0.0.0".parse().unwrap()),
            raft_port: Some(7001),
            peers: Some(list.iter().map(|p| (*p).to_owned()).collect()),
            ..more
        })
    };
    // The same list on every node: each keeps the others as its peers and
    // takes its raft address and DC from its own entry.
    for (id, advertise, dc) in [(1, "node1:7001", "hz"), (3, "node3:7001", "sh")] {
        let config = node(id, Settings::default()).unwrap();
        let peers: Vec<u64> = config.cluster.peers.keys().copied().collect();
        assert_eq!(peers, (1..=3).filter(|p| *p != id).collect::<Vec<_>>());
        assert_eq!(config.cluster.advertise, advertise);
        assert_eq!(config.dc, dc);
    }
    // What it is told elsewhere must agree with its entry.
    let agreeing = Settings {
        raft_advertise: Some("node3:7001".into()),
        dc: Some("sh".into()),
        ..Settings::default()
    };
    assert!(node(3, agreeing).is_ok());
    let refused = |id: u64, more: Settings, why: &str| {
        let err = node(id, more).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { key, .. } if *key == "peer"),
            "{err}"
        );
        let err = err.to_string();
        assert!(err.contains(&format!("is this node (id {id})")), "{err}");
        assert!(err.contains(why), "{err}");
    };
    let advertise = Settings {
        raft_advertise: Some("elsewhere:7001".into()),
        ..Settings::default()
    };
    refused(3, advertise, "raft_advertise is 'elsewhere:7001'");
    let port = Settings {
        raft_port: Some(7002),
        ..Settings::default()
    };
    let err = ValidConfig::from_settings(Settings {
        node_id: Some(2),
        peers: Some(vec!["2=127.0.0.1:7001".into(), "1=127.0.0.1:7000".into()]),
        ..port
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("listens on raft_port 7002"), "{err}");
    let dc = Settings {
        dc: Some("hz".into()),
        ..Settings::default()
    };
    refused(3, dc, "its dc is 'hz'");
    // An IP address in its entry must be one it binds.
    let err = ValidConfig::from_settings(Settings {
        node_id: Some(1),
        bind: Some("127.0.0.1".parse().unwrap()),
        peers: Some(vec!["1=10.0.0.1:7848".into(), "2=10.0.0.2:7848".into()]),
        ..Settings::default()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("it binds 127.0.0.1"), "{err}");
}

#[test]
fn peers_parse_with_an_optional_dc_and_bad_ones_are_refused_by_name() {
    let with = |peers: &[&str]| {
        ValidConfig::from_settings(Settings {
            node_id: Some(1),
            peers: Some(peers.iter().map(|p| (*p).to_owned()).collect()),
            ..Settings::default()
        })
    };
    let config = with(&["2=10.0.0.2:7848@hz", "3=node-3:7849"]).unwrap();
    let peers: Vec<_> = config
        .cluster
        .peers
        .iter()
        .map(|(id, m)| (*id, m.raft_addr.as_str(), m.dc.as_str()))
        .collect();
    assert_eq!(peers, [(2, "10.0.0.2:7848", "hz"), (3, "node-3:7849", "")]);
    for bad in [
        "2",
        "x=10.0.0.2:7848",
        "0=10.0.0.2:7848",
        "2=10.0.0.2",
        "2=:7848",
        "2=10.0.0.2:0",
    ] {
        let err = with(&[bad]).unwrap_err().to_string();
        assert!(err.contains("peer"), "{bad}: {err}");
    }
    let err = with(&["2=a:1", "2=b:1"]).unwrap_err().to_string();
    assert!(err.contains("given twice"), "{err}");
    let err = with(&["1=127.0.0.1:7848", "1=127.0.0.1:7848"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("given twice"), "{err}");
    assert!(ValidConfig::default().cluster.peers.is_empty());
    assert_eq!(ValidConfig::default().cluster.raft_port, 7848);
}

#[test]
fn clients_are_sent_away_before_their_owner_is_lost() {
    let with = |grace: u64, reset: u64| {
        ValidConfig::from_settings(Settings {
            owner_grace_ms: Some(grace),
            quorum_loss_reset_ms: Some(reset),
            ..Settings::default()
        })
    };
    let config = with(8_000, 3_000).unwrap();
    assert_eq!(config.cluster.owner_grace, Duration::from_secs(8));
    assert_eq!(config.cluster.quorum_loss_reset, Duration::from_secs(3));
    let err = with(8_000, 8_000).unwrap_err().to_string();
    assert!(err.contains("quorum_loss_reset_ms"), "{err}");
    // No longer than the election timeout (200 ms by default).
    let err = with(200, 150).unwrap_err().to_string();
    assert!(err.contains("owner_grace_ms"), "{err}");
}

#[test]
fn auth_needs_a_long_secret_and_users_with_bcrypt_hashes() {
    let users = "[[users]]\nname = \"ops\"\npassword_hash = \"$2b$04$ZyKyjHE75QJ0aJEkUuInLeXiTJpnrTP5g/Wr0kVlSiKKpMakGPZTa\"\nadmin = true\n";
    let with = |extra: &str| {
        let settings = Settings::from_toml(&format!("{extra}\n{users}")).unwrap();
        ValidConfig::from_settings(settings)
    };
    let err = with("auth_enabled = true").unwrap_err().to_string();
    assert!(err.contains("auth_token_secret"), "{err}");
    let err = with("auth_enabled = true\nauth_token_secret = \"short\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least 32 bytes"), "{err}");
    let long = "auth_token_secret = \"0123456789abcdef0123456789abcdef\"";
    let config = with(&format!("auth_enabled = true\n{long}")).unwrap();
    assert!(config.auth.enabled);
    assert_eq!(config.auth.users[0].name, "ops");
    assert!(config.auth.users[0].admin);
    assert!(
        !format!("{:?}", config.auth).contains("$2b$"),
        "hashes stay out of logs"
    );
    let settings = Settings::from_toml(&format!(
        "auth_enabled = true\n{long}\n[[users]]\nname = \"x\"\npassword_hash = \"plain\""
    ))
    .unwrap();
    let err = ValidConfig::from_settings(settings)
        .unwrap_err()
        .to_string();
    assert!(err.contains("users") && err.contains("bcrypt"), "{err}");
    let settings = Settings::from_toml(&format!("auth_enabled = true\n{long}")).unwrap();
    let err = ValidConfig::from_settings(settings)
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least one [[users]]"), "{err}");
}

#[test]
fn tls_needs_a_certificate_and_key_and_with_peers_a_ca() {
    let dir = std::env::temp_dir().join(format!("understudy-tls-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(
        &key,
        "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let with = |cert: Option<&Path>, key: Option<&Path>, peers: bool| {
        ValidConfig::from_settings(Settings {
            tls_cert: cert.map(Path::to_owned),
            tls_key: key.map(Path::to_owned),
            peers: peers.then(|| vec!["2=127.0.0.1:7849".to_owned()]),
            ..Settings::default()
        })
    };
    let err = with(Some(&cert), None, false).unwrap_err().to_string();
    assert!(err.contains("tls_key"), "{err}");
    let err = with(Some(&dir.join("missing.pem")), Some(&key), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tls_cert") && err.contains("cannot read"),
        "{err}"
    );
    let err = with(Some(&key), Some(&key), false).unwrap_err().to_string();
    assert!(
        err.contains("tls_cert") && err.contains("CERTIFICATE"),
        "{err}"
    );
    let err = with(Some(&cert), Some(&key), true).unwrap_err().to_string();
    assert!(err.contains("tls_ca"), "{err}");
    assert!(with(Some(&cert), Some(&key), false).unwrap().tls.is_some());
    assert!(with(None, None, true).unwrap().tls.is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_shipped_example_config_parses_and_validates() {
    let text = include_str!("../../../understudy.example.toml");
    let settings = Settings::from_toml(text).unwrap();
    let mut config = ValidConfig::from_settings(settings).unwrap();
    // It says it shows the defaults (and an example user, as there are
    // none by default): it is checked to.
    assert_eq!(config.auth.users.len(), 1);
    config.auth.users.clear();
    assert_eq!(config, ValidConfig::default());
}

/// Every setting as the command line declares it: its file key (the
/// field), flag, environment variable and the default its help states.
struct Declared {
    key: String,
    flag: String,
    env: String,
    default: Option<String>,
}

fn declared() -> Vec<Declared> {
    use clap::Args as _;
    let command =
        crate::cli::with_stated_defaults(Settings::augment_args(clap::Command::new("serve")));
    command
        .get_arguments()
        .map(|arg| {
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let default = help.split_once("[default: ").map(|(_, rest)| {
                rest.split_once(']')
                    .map_or(rest, |(value, _)| value)
                    .to_owned()
            });
            Declared {
                key: arg.get_id().to_string(),
                flag: format!("--{}", arg.get_long().expect("every setting has a flag")),
                env: arg
                    .get_env()
                    .expect("every setting has a variable")
                    .to_string_lossy()
                    .into_owned(),
                default,
            }
        })
        .collect()
}

/// The stated default of every setting is the one the code applies:
/// giving it explicitly changes nothing in the validated configuration.
#[test]
fn every_stated_default_is_the_default_the_code_applies() {
    let defaults = ValidConfig::from_settings(Settings::default()).unwrap();
    assert_eq!(defaults, ValidConfig::default());
    let mut checked = 0;
    for setting in declared() {
        let Some(value) = setting.default else {
            assert!(
                DERIVED_DEFAULTS.contains(&setting.key.as_str()),
                "{}: its help states no default",
                setting.key
            );
            continue;
        };
        if value == "none" || DERIVED_DEFAULTS.contains(&setting.key.as_str()) {
            continue;
        }
        let literal = if value.parse::<f64>().is_ok() || value == "true" || value == "false" {
            value.clone()
        } else {
            format!("{value:?}")
        };
        let text = format!("{} = {literal}\n", setting.key);
        let settings = Settings::from_toml(&text).unwrap_or_else(|e| {
            panic!(
                "{}: the stated default {value} does not parse: {e}",
                setting.key
            )
        });
        let config = ValidConfig::from_settings(settings).unwrap_or_else(|e| {
            panic!(
                "{}: the stated default {value} is refused: {e}",
                setting.key
            )
        });
        assert_eq!(
            config, defaults,
            "{}: the stated default {value} is not the code's default",
            setting.key
        );
        checked += 1;
    }
    assert!(checked > 40, "only {checked} defaults checked");
}

/// Reading settings into the tree and writing the tree back as settings
/// are inverse: a configuration with every setting away from its default
/// reads back the same, and every key is written back.
#[test]
fn a_configuration_written_back_as_settings_reads_back_the_same() {
    let dir = std::env::temp_dir().join(format!("understudy-roundtrip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, marker) in [
        ("cert.pem", "CERTIFICATE"),
        ("key.pem", "PRIVATE KEY"),
        ("ca.pem", "CERTIFICATE"),
    ] {
        let pem = format!("-----BEGIN {marker}-----\n-----END {marker}-----\n");
        std::fs::write(dir.join(file), pem).unwrap();
    }
    let hash = bcrypt::hash("pw", 4).unwrap();
    let text = format!(
        r#"
bind = "127.0.0.2"
http_port = 9000
grpc_port = 9500
node_id = 3
dc = "hz"
log = "debug"
beat_interval_ms = 1000
unhealthy_timeout_ms = 3000
delete_timeout_ms = 6000
empty_service_ttl_ms = 7000
zone_key = "az"
change_log_capacity = 77
config_history_per_config = 9
config_history_max_age_ms = 60000
max_body_bytes = 2048
max_metadata_entries = 5
max_metadata_key_bytes = 6
max_metadata_value_bytes = 7
max_instances_per_registration = 8
max_instances_per_service = 9
max_services_per_namespace = 10
max_connections = 11
max_connections_per_ip = 12
max_subscriptions_per_connection = 13
max_watches_per_connection = 14
max_concurrent_requests = 15
request_queue_timeout_ms = 16
write_queue = 17
write_timeout_ms = 18
push_timeout_ms = 19
push_retry_ms = 20
push_merge_delay_ms = 21
push_queue = 22
connection_idle_ms = 23
detection_timeout_ms = 24
max_grpc_message_bytes = 25
watch_buffer = 26
max_config_bytes = 27
long_poll_floor_ms = 28
nacos_api_compat = "nacos3"
shutdown_grace_ms = 29
raft_port = 7001
raft_advertise = "node3.example:7001"
peers = ["1=10.0.0.1:7848@hz", "2=10.0.0.2:7848"]
cluster_secret = "s3cret"
raft_heartbeat_ms = 60
raft_election_timeout_ms = 500
owner_grace_ms = 9000
quorum_loss_reset_ms = 4000
data_dir = "{dir}"
link = ["hz-sh=40ms~10ms,loss=1%", "sh->hz=cut"]
chaos_seed = 42
tick_ms = 250
apply_delay = ["sh=500ms", "bj=250us"]
auth_enabled = true
auth_token_secret = "0123456789abcdef0123456789abcdef"
auth_token_ttl_s = 60
tls_cert = "{dir}/cert.pem"
tls_key = "{dir}/key.pem"
tls_ca = "{dir}/ca.pem"
health_check = "http:/ready"
health_check_interval_ms = 3000
health_check_timeout_ms = 300
health_check_unhealthy_threshold = 4
health_check_healthy_threshold = 3

[[users]]
name = "root"
password_hash = "{hash}"
admin = true
"#,
        dir = dir.display()
    );
    let settings = Settings::from_toml(&text).unwrap();
    let config = ValidConfig::from_settings(settings.clone()).unwrap();
    let defaults = ValidConfig::default().to_settings();
    let lowered = config.to_settings();
    let table = |s: &Settings| toml::Table::try_from(s).unwrap();
    for (key, value) in table(&settings) {
        assert_ne!(
            table(&defaults).get(&key),
            Some(&value),
            "{key}: the fixture gives it its default, which proves nothing"
        );
    }
    assert_eq!(
        table(&lowered).keys().collect::<Vec<_>>(),
        table(&settings).keys().collect::<Vec<_>>(),
        "every key is written back"
    );
    assert_eq!(ValidConfig::from_settings(lowered).unwrap(), config);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// docs/configuration.md lists every setting with its flag, variable and
/// the default its help states, and nothing else.
#[test]
fn the_configuration_reference_lists_every_setting_as_declared() {
    let doc = include_str!("../../../docs/configuration.md");
    let rows: Vec<Vec<&str>> = doc
        .lines()
        .filter(|l| l.starts_with("| `") || l.starts_with("| `[["))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .filter(|cells: &Vec<&str>| cells.len() == 5)
        .collect();
    let declared = declared();
    for setting in &declared {
        let quoted = |text: &str| format!("`{text}`");
        let row = rows
            .iter()
            .find(|cells| cells[0].split(", ").any(|key| key == quoted(&setting.key)))
            .unwrap_or_else(|| panic!("docs/configuration.md has no row for `{}`", setting.key));
        assert!(
            row[1].contains(&quoted(&setting.flag))
                || row[1].contains(&format!("`{} ", setting.flag)),
            "{}: the row names {} for the flag, not {}",
            setting.key,
            row[1],
            setting.flag
        );
        assert!(
            row[2].contains(&quoted(&setting.env)),
            "{}: the row names {} for the variable, not {}",
            setting.key,
            row[2],
            setting.env
        );
        let documented = row[3].replace('`', "");
        match &setting.default {
            None => assert_eq!(documented, "none", "{}: no default is stated", setting.key),
            Some(stated) => assert!(
                stated.starts_with(&documented) || stated.replace('`', "").starts_with(&documented),
                "{}: the row says the default is {documented}, the help says {stated}",
                setting.key
            ),
        }
    }
    for row in &rows {
        for key in row[0].split(", ") {
            let key = key.trim_matches('`');
            assert!(
                key == "[[users]]" || declared.iter().any(|s| s.key == key),
                "docs/configuration.md documents `{key}`, which is no setting"
            );
        }
    }
}

#[test]
fn changed_settings_lists_what_differs_from_the_defaults_without_secrets() {
    assert_eq!(ValidConfig::default().changed_settings(), []);
    let config = ValidConfig::from_settings(Settings {
        http_port: Some(8849),
        log: Some("debug".into()),
        cluster_secret: Some("hunter22".into()),
        auth_token_secret: Some("0123456789abcdef0123456789abcdef".into()),
        users: Some(vec![UserSetting {
            name: "root".into(),
            password_hash: "$2b$04$ZyKyjHE75QJ0aJEkUuInLeXiTJpnrTP5g/Wr0kVlSiKKpMakGPZTa".into(),
            admin: true,
        }]),
        peers: Some(vec!["2=127.0.0.1:7849".into()]),
        ..Settings::default()
    })
    .unwrap();
    let changed = config.changed_settings();
    let shown: Vec<(&str, &str)> = changed
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    // The gRPC port follows the HTTP port (derived, so not listed).
    assert_eq!(
        shown,
        [
            ("auth_token_secret", "(set)"),
            ("cluster_secret", "(set)"),
            ("http_port", "8849"),
            ("log", "debug"),
            ("peers", "2=127.0.0.1:7849"),
            ("users", "root"),
        ]
    );
    let moved = ValidConfig::from_settings(Settings {
        grpc_port: Some(9000),
        ..Settings::default()
    })
    .unwrap();
    assert_eq!(
        moved.changed_settings(),
        [("grpc_port".to_owned(), "9000".to_owned())]
    );
}
