//! understudy's answers held against a real Nacos': every transcript
//! under `tests/golden/nacos-<version>/`, recorded from a running Nacos
//! with `understudy compat record` (docs/nacos-compatibility.md says how),
//! is replayed against a fresh understudy and compared answer by answer,
//! field by field. A difference fails unless `tests/golden/allowed.toml`
//! keeps it with its kind and reason; at most 5% of a version's answers
//! may be kept, and an entry no answer needs fails too, so the list
//! shrinks as understudy comes closer.

use std::path::{Path, PathBuf};

use understudy_compat::diff::Allowlist;
use understudy_compat::run::Target;
use understudy_server::config::Settings;
use understudy_tests::Server;

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn recorded_versions() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(golden())
        .expect("tests/golden exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("meta.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

async fn replay(dir: &Path) -> anyhow::Result<understudy_compat::Report> {
    let (meta, transcripts) = understudy_compat::transcript::read(dir)?;
    assert!(
        !meta.version.is_empty() && !meta.commit.is_empty() && !meta.recorded.is_empty(),
        "{}: a transcript names its server's version, commit and date",
        dir.display()
    );
    let sequences = understudy_compat::corpus::load(None)?;
    let allowlist = Allowlist::read(&golden().join("allowed.toml"))?;
    let server = Server::start(Settings::default()).await?;
    let target = Target {
        http: format!("http://{}", server.http),
        grpc: server.grpc,
    };
    let report =
        understudy_compat::check_transcripts(&target, &meta, &transcripts, &sequences, &allowlist)
            .await?;
    server.stop().await?;
    Ok(report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recorded_nacos_answer_is_answered_alike() -> anyhow::Result<()> {
    let versions = recorded_versions();
    assert!(
        versions.len() >= 2,
        "transcripts of Nacos 2.x and 3.x are committed"
    );
    let mut failed = String::new();
    for dir in versions {
        let report = replay(&dir).await?;
        println!("{}", report.describe());
        let limit = report.answers / 20;
        if report.failures().next().is_some()
            || !report.unused_allows.is_empty()
            || report.allowed() > limit
        {
            failed.push_str(&format!(
                "{}: {} answers differ without an allowlist entry, {} allowlist entries unused, {} allowed (at most {limit})\n",
                dir.display(),
                report.failures().count(),
                report.unused_allows.len(),
                report.allowed(),
            ));
        }
    }
    assert!(failed.is_empty(), "{failed}");
    Ok(())
}
