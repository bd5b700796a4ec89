//! `docs/nacos3.md` lists every endpoint of Nacos 3's HTTP API and what
//! understudy does with it; this test calls each one (without parameters)
//! and checks the answer agrees: *served* and *served differently*
//! endpoints are routed (no 404, 405 or 501), *501* ones answer 501 with
//! what understudy does instead, *not yet* ones are not routed (404 or
//! 405). The console plane is out of scope and not called.

use reqwest::{Method, StatusCode};
use understudy_server::config::Settings;
use understudy_tests::Server;

pub(crate) struct Row {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) status: String,
}

pub(crate) fn rows() -> Vec<Row> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/nacos3.md"))
        .expect("docs/nacos3.md is readable");
    doc.lines()
        .filter(|l| l.starts_with("| ") && l.contains("| `/"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            Row {
                method: cells[1].parse().expect("a method"),
                path: cells[2].trim_matches('`').to_owned(),
                status: cells[3].to_owned(),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_as_the_table_of_nacos3_endpoints_says() -> anyhow::Result<()> {
    let rows = rows();
    assert!(
        rows.len() > 150,
        "the table lists every endpoint: {}",
        rows.len()
    );
    let server = Server::start(Settings::default()).await?;
    let client = reqwest::Client::new();
    let mut wrong = Vec::new();
    for row in rows.iter().filter(|r| r.status != "out of scope") {
        let response = client
            .request(row.method.clone(), server.url(&row.path))
            .send()
            .await?;
        let status = response.status();
        let body = response.text().await?;
        let agrees = match row.status.as_str() {
            "served" | "served differently" => {
                ![
                StatusCode::NOT_FOUND,
                StatusCode::METHOD_NOT_ALLOWED,
                StatusCode::NOT_IMPLEMENTED,
            ]
            .contains(&status)
                // A 404 in the envelope is an answer about a resource,
                // not a missing route.
                || (status == StatusCode::NOT_FOUND && body.starts_with("{\"code\""))
            }
            "501" => status == StatusCode::NOT_IMPLEMENTED && body.contains("understudy"),
            "not yet" => {
                [StatusCode::NOT_FOUND, StatusCode::METHOD_NOT_ALLOWED].contains(&status)
                    && !body.starts_with("{\"code\"")
            }
            other => panic!(
                "{} {}: unknown status '{other}' in the table",
                row.method, row.path
            ),
        };
        if !agrees {
            wrong.push(format!(
                "{} {} ({}): {status} {body}",
                row.method, row.path, row.status
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "the table is wrong about:\n{}",
        wrong.join("\n")
    );
    server.stop().await
}
