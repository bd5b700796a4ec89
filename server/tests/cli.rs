//! The `understudy` binary's handling of bad configuration: exit code 64
//! and a message naming the setting.

use std::io::Write;
use std::process::Command;

fn understudy() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_understudy"));
    // Nothing from the caller's environment may leak into these cases.
    for (key, _) in std::env::vars() {
        if key.starts_with("UNDERSTUDY_") {
            command.env_remove(key);
        }
    }
    command
}

#[test]
fn invalid_settings_exit_64_naming_the_setting() {
    let dir = std::env::temp_dir().join(format!("understudy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_file = dir.join("bad.toml");
    std::fs::File::create(&bad_file)
        .unwrap()
        .write_all(b"http_prot = 1\n")
        .unwrap();
    let bad_value_file = dir.join("bad-value.toml");
    std::fs::File::create(&bad_value_file)
        .unwrap()
        .write_all(b"delete_timeout_ms = 1000\n")
        .unwrap();

    /// Arguments, environment, and what stderr must name.
    type Case = (Vec<String>, Vec<(&'static str, &'static str)>, &'static str);
    let cases: Vec<Case> = vec![
        (
            vec!["--http-port".into(), "70000".into()],
            vec![],
            "http-port",
        ),
        (
            vec!["--unhealthy-timeout-ms".into(), "1".into()],
            vec![],
            "unhealthy_timeout_ms",
        ),
        (vec!["--bind".into(), "not-an-ip".into()], vec![], "bind"),
        (
            vec![],
            vec![("UNDERSTUDY_DELETE_TIMEOUT_MS", "abc")],
            "delete-timeout-ms",
        ),
        (vec![], vec![("UNDERSTUDY_DC", "a b")], "dc"),
        (
            vec!["--config".into(), bad_file.display().to_string()],
            vec![],
            "http_prot",
        ),
        (
            vec!["--config".into(), bad_value_file.display().to_string()],
            vec![],
            "delete_timeout_ms",
        ),
        (
            vec![
                "--config".into(),
                dir.join("missing.toml").display().to_string(),
            ],
            vec![],
            "missing.toml",
        ),
        (vec!["--no-such-flag".into()], vec![], "--no-such-flag"),
    ];
    for (args, env, mentions) in cases {
        let output = understudy().args(&args).envs(env.clone()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains(mentions),
            "{args:?} {env:?}: stderr does not name {mentions}: {stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_exits_zero() {
    let output = understudy().arg("--help").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("--http-port"));
}

#[test]
fn a_data_dir_it_cannot_use_stops_the_server_naming_the_file_and_leaves_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("understudy.redb");
    std::fs::write(&file, b"not a raft store").unwrap();
    let output = understudy()
        .args(["--http-port", "0", "--grpc-port", "0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("understudy.redb"), "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), b"not a raft store");
}
