//! The web console in headless Chromium, driven over the DevTools
//! protocol: each page is loaded, what it shows is checked against the
//! registry, a change made through the API must appear without a reload
//! (server-sent events), and a screenshot of each page is saved under
//! `target/console-screenshots/`.
//!
//! Chromium is Debian's `chromium` package, which `.ci/run` installs: the
//! tests are ignored by a plain `cargo test` (which counts them as
//! ignored and says why), and `.ci/run` runs them with `--ignored`; run
//! without a browser, they fail.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::Message;
use understudy_server::auth::hash_password;
use understudy_server::config::{Settings, UserSetting};
use understudy_tests::Server;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The browser binary, if there is one.
const NO_CHROMIUM: &str =
    "no Chromium: install Debian's `chromium` package or set UNDERSTUDY_CHROMIUM";

fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("UNDERSTUDY_CHROMIUM") {
        return Some(PathBuf::from(path)).filter(|p| p.exists());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser", "google-chrome"].map(|n| dir.join(n)))
        .find(|candidate| candidate.is_file())
}

fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/console-screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot directory");
    dir
}

/// A headless Chromium with one page, spoken to over the DevTools
/// protocol; the browser is killed when this is dropped.
struct Browser {
    _process: tokio::process::Child,
    _profile: tempfile::TempDir,
    socket: Socket,
    session: String,
    next_id: u64,
}

impl Browser {
    async fn start(binary: &PathBuf) -> anyhow::Result<Self> {
        let profile = tempfile::tempdir()?;
        let mut process = tokio::process::Command::new(binary)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1280,860",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stderr = process.stderr.take().expect("piped stderr");
        let mut lines = BufReader::new(stderr).lines();
        let endpoint = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(at) = line.find("ws://") {
                    return Ok(line[at..].trim().to_owned());
                }
            }
            anyhow::bail!("Chromium exited without a DevTools endpoint")
        })
        .await??;
        // Keep draining its stderr so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let (socket, _) = tokio_tungstenite::connect_async(endpoint.as_str()).await?;
        let mut browser = Browser {
            _process: process,
            _profile: profile,
            socket,
            session: String::new(),
            next_id: 1,
        };
        let target = browser
            .call("Target.createTarget", json!({"url": "about:blank"}))
            .await?;
        let attached = browser
            .call(
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
            )
            .await?;
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session")
            .to_owned();
        browser.call("Page.enable", json!({})).await?;
        Ok(browser)
    }

    /// Sends one command (to the page once attached) and waits for its
    /// answer, skipping events.
    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        self.socket.send(Message::text(message.to_string())).await?;
        let answer = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(frame) = self.socket.next().await {
                let Message::Text(text) = frame? else {
                    continue;
                };
                let answer: Value = serde_json::from_str(&text)?;
                if answer["id"] == id {
                    return Ok(answer);
                }
            }
            anyhow::bail!("the DevTools socket closed")
        })
        .await??;
        if let Some(error) = answer.get("error") {
            anyhow::bail!("{method}: {error}");
        }
        Ok(answer["result"].clone())
    }

    async fn open(&mut self, url: &str) -> anyhow::Result<()> {
        self.call("Page.navigate", json!({"url": url})).await?;
        Ok(())
    }

    /// The value of a JavaScript expression in the page.
    async fn eval(&mut self, expression: &str) -> anyhow::Result<Value> {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(exception) = result.get("exceptionDetails") {
            anyhow::bail!("{expression}: {exception}");
        }
        Ok(result["result"]["value"].clone())
    }

    /// Waits until `expression` is true in the page.
    async fn wait_for(&mut self, what: &str, expression: &str) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            if self.eval(expression).await.ok() == Some(Value::Bool(true)) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let body = self
                    .eval("document.body.innerText")
                    .await
                    .unwrap_or_default();
                anyhow::bail!("the console never showed {what}; it shows:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `expression` is true in the page, drawing the view
    /// again between tries: for what the page has no event for (a Nacos
    /// client's background subscription).
    async fn wait_rendered(&mut self, what: &str, expression: &str) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while self.eval(expression).await? != Value::Bool(true) {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the console never showed {what}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            self.eval("render()").await?;
        }
        Ok(())
    }

    async fn screenshot(&mut self, name: &str) -> anyhow::Result<PathBuf> {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("base64 data"))?;
        anyhow::ensure!(png.starts_with(b"\x89PNG"), "not a PNG");
        let path = screenshots().join(format!("{name}.png"));
        std::fs::write(&path, png)?;
        Ok(path)
    }
}

async fn register(http: &reqwest::Client, server: &Server, form: &[(&str, &str)]) {
    let reply = http
        .post(server.url("/nacos/v1/ns/instance"))
        .form(form)
        .send()
        .await
        .expect("the server answers");
    assert_eq!(reply.text().await.unwrap(), "ok", "{form:?}");
}

/// What the registry holds for `orders`, as `ip:port healthy zone`, sorted.
async fn orders_in_registry(http: &reqwest::Client, server: &Server) -> Vec<String> {
    let info: Value = http
        .get(server.url("/nacos/v1/ns/instance/list?serviceName=orders"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut rows: Vec<String> = info["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            format!(
                "{}:{} {} {}",
                h["ip"].as_str().unwrap(),
                h["port"],
                h["healthy"],
                h["metadata"]["zone"].as_str().unwrap_or("DEFAULT")
            )
        })
        .collect();
    rows.sort();
    rows
}

/// The same, as the console's instance table shows it.
const ORDERS_ON_PAGE: &str = r#"JSON.stringify([...document.querySelectorAll("[data-zone]")].flatMap(h => {
    const zone = h.dataset.zone;
    return [...h.nextElementSibling.querySelectorAll("tr[data-instance]")]
        .map(r => r.dataset.instance + " " + r.dataset.healthy + " " + zone);
}).sort())"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium (installed by .ci/run, or set UNDERSTUDY_CHROMIUM)"]
async fn the_console_shows_the_registry_cluster_and_chaos_and_follows_changes() -> anyhow::Result<()>
{
    let binary = chromium().context(NO_CHROMIUM)?;
    let server = Server::start(Settings::default()).await?;
    let http = reqwest::Client::new();
    for (ip, zone, version) in [
        ("10.0.0.1", "hz", "1.4"),
        ("10.0.0.2", "hz", "1.4"),
        ("10.0.1.1", "sh", "1.5"),
    ] {
        let metadata = json!({"zone": zone, "version": version}).to_string();
        register(
            &http,
            &server,
            &[
                ("serviceName", "orders"),
                ("ip", ip),
                ("port", "8080"),
                ("ephemeral", "false"),
                ("weight", "2"),
                ("metadata", &metadata),
            ],
        )
        .await;
    }
    register(
        &http,
        &server,
        &[
            ("serviceName", "billing"),
            ("groupName", "PAY"),
            ("ip", "10.0.2.1"),
            ("port", "9090"),
            ("ephemeral", "false"),
        ],
    )
    .await;
    // One unhealthy instance, so the page has both states to show.
    let reply = http
        .put(server.url(
            "/nacos/v1/ns/health/instance?serviceName=orders&ip=10.0.0.2&port=8080&healthy=false",
        ))
        .send()
        .await?;
    assert_eq!(reply.status(), 200);

    let mut browser = Browser::start(&binary).await?;
    let base = format!("http://{}", server.http);

    // The registry: groups and services, the chosen service by zone.
    browser
        .open(&format!(
            "{base}/#/registry?ns=&group=DEFAULT_GROUP&service=orders"
        ))
        .await?;
    browser
        .wait_for(
            "the orders instances",
            "document.querySelectorAll('tr[data-instance]').length === 3",
        )
        .await?;
    let services = browser
        .eval("[...document.querySelectorAll('[data-service]')].map(a => a.dataset.service + ' ' + a.querySelector('.count').textContent)")
        .await?;
    assert_eq!(
        services,
        json!(["DEFAULT_GROUP@@orders 2/3", "PAY@@billing 1/1"])
    );
    let shown: Vec<String> =
        serde_json::from_str(browser.eval(ORDERS_ON_PAGE).await?.as_str().unwrap())?;
    assert_eq!(shown, orders_in_registry(&http, &server).await);
    let row = browser
        .eval("document.querySelector('tr[data-instance=\"10.0.1.1:8080\"]').innerText")
        .await?;
    let row = row.as_str().unwrap();
    assert!(
        row.contains("healthy")
            && row.contains("2")
            && row.contains("version=1.5")
            && row.contains("persistent"),
        "{row}"
    );
    browser
        .wait_for(
            "the live badge",
            "document.getElementById('live').textContent.startsWith('live')",
        )
        .await?;
    browser.screenshot("registry").await?;

    // A registration appears without a reload.
    let rendered = browser
        .eval("document.getElementById('main').dataset.rendered")
        .await?;
    register(
        &http,
        &server,
        &[
            ("serviceName", "orders"),
            ("ip", "10.0.1.2"),
            ("port", "8080"),
            ("ephemeral", "false"),
            ("metadata", r#"{"zone":"sh"}"#),
        ],
    )
    .await;
    browser
        .wait_for(
            "the new instance",
            "document.querySelectorAll('tr[data-instance]').length === 4",
        )
        .await?;
    assert_eq!(
        browser.eval("location.hash").await?,
        json!("#/registry?ns=&group=DEFAULT_GROUP&service=orders")
    );
    assert_ne!(
        browser
            .eval("document.getElementById('main').dataset.rendered")
            .await?,
        rendered
    );
    let shown: Vec<String> =
        serde_json::from_str(browser.eval(ORDERS_ON_PAGE).await?.as_str().unwrap())?;
    assert_eq!(shown, orders_in_registry(&http, &server).await);

    // The cluster: this node, its DC and role, its view lag.
    browser.open(&format!("{base}/#/cluster")).await?;
    browser
        .wait_for(
            "the node table",
            "document.querySelectorAll('tr[data-node]').length === 1",
        )
        .await?;
    let node = browser
        .eval("document.querySelector('tr[data-node=\"1\"]').innerText")
        .await?;
    let node = node.as_str().unwrap();
    assert!(node.contains("dc1") && node.contains("leader"), "{node}");
    browser.screenshot("cluster").await?;

    // Chaos: set a link through the form; the server holds it.
    browser.open(&format!("{base}/#/chaos")).await?;
    browser
        .wait_for("the chaos page", "!!document.getElementById('set-link')")
        .await?;
    browser
        .eval("(() => { const f = document.getElementById('set-link'); f.spec.value = 'hz-sh=40ms~10ms,loss=1%'; f.requestSubmit(); return true; })()")
        .await?;
    browser
        .wait_for(
            "the new link",
            "!!document.querySelector('tr[data-link=\"hz->sh\"]')",
        )
        .await?;
    let link = browser
        .eval("document.querySelector('tr[data-link=\"hz->sh\"]').innerText")
        .await?;
    assert!(link.as_str().unwrap().contains("40 ms"), "{link}");
    let faults: Value = http
        .get(server.url("/understudy/v1/chaos"))
        .send()
        .await?
        .json()
        .await?;
    let links = faults["faults"]["links"].as_array().unwrap();
    assert!(
        links
            .iter()
            .any(|l| l["from"] == "hz" && l["to"] == "sh" && l["latencyMs"] == 40),
        "{faults}"
    );
    browser.screenshot("chaos").await?;
    drop(browser);
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium (installed by .ci/run, or set UNDERSTUDY_CHROMIUM)"]
async fn with_auth_on_the_console_asks_for_a_login() -> anyhow::Result<()> {
    let binary = chromium().context(NO_CHROMIUM)?;
    let server = Server::start(Settings {
        auth_enabled: Some(true),
        auth_token_secret: Some("a token secret of at least 32 bytes".to_owned()),
        users: Some(vec![UserSetting {
            name: "ops".to_owned(),
            password_hash: hash_password("pw", 4)?,
            admin: true,
        }]),
        ..Settings::default()
    })
    .await?;
    let mut browser = Browser::start(&binary).await?;
    browser.open(&format!("http://{}/", server.http)).await?;
    browser
        .wait_for("the login form", "!document.getElementById('login').hidden")
        .await?;
    browser.screenshot("login").await?;
    let submit = |password: &str| {
        format!(
            "(() => {{ document.getElementById('login-user').value = 'ops'; \
             document.getElementById('login-password').value = '{password}'; \
             document.getElementById('login').requestSubmit(); return true; }})()"
        )
    };
    browser.eval(&submit("wrong")).await?;
    browser
        .wait_for(
            "the refusal",
            "document.getElementById('login-error').textContent.includes('unknown user')",
        )
        .await?;
    browser.eval(&submit("pw")).await?;
    browser
        .wait_for(
            "the registry after the login",
            "document.getElementById('login').hidden && !!document.getElementById('services')",
        )
        .await?;
    assert_eq!(
        browser
            .eval("document.getElementById('who').textContent")
            .await?,
        json!("ops")
    );
    drop(browser);
    server.stop().await?;
    Ok(())
}

/// A nacos-sdk listener that wants nothing: the tests look at who listens.
struct Ignore;

impl nacos_sdk::api::naming::NamingEventListener for Ignore {
    fn event(&self, _: std::sync::Arc<nacos_sdk::api::naming::NamingChangeEvent>) {}
}

impl nacos_sdk::api::config::ConfigChangeListener for Ignore {
    fn notify(&self, _: nacos_sdk::api::config::ConfigResponse) {}
}

/// Sets `field` of the form `form` to `value` (a JavaScript string).
fn fill(form: &str, field: &str, value: &str) -> String {
    format!(
        "(() => {{ document.getElementById('{form}').elements['{field}'].value = {}; return true; }})()",
        serde_json::to_string(value).expect("a string")
    )
}

/// Clicks the element with id `id`.
fn click(id: &str) -> String {
    format!("(() => {{ document.getElementById('{id}').click(); return true; }})()")
}

/// Whether the config page shows the md5 of `content` (it has read the
/// config again since it was published).
fn shows_md5(content: &str) -> String {
    format!(
        "(document.getElementById('config-md5') || {{}}).textContent === '{}'",
        understudy_core::content_md5(content)
    )
}

/// The content of `app.yaml` as the server holds it, if it exists.
async fn app_yaml(http: &reqwest::Client, server: &Server) -> Option<String> {
    let reply = http
        .get(
            server.url(
                "/nacos/v3/admin/cs/config?dataId=app.yaml&groupName=DEFAULT_GROUP&namespaceId=",
            ),
        )
        .send()
        .await
        .ok()?;
    if !reply.status().is_success() {
        return None;
    }
    let answer: Value = reply.json().await.ok()?;
    answer["data"]["content"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium (installed by .ci/run, or set UNDERSTUDY_CHROMIUM)"]
async fn the_console_edits_configs_with_a_diff_rolls_back_and_lists_real_sdk_clients(
) -> anyhow::Result<()> {
    use nacos_sdk::api::config::ConfigServiceBuilder;
    use nacos_sdk::api::naming::NamingServiceBuilder;
    use nacos_sdk::api::props::ClientProps;

    let binary = chromium().context(NO_CHROMIUM)?;
    // The Nacos port pair (P, P + 1000), for the real SDK below.
    let server = Server::start_nacos(Settings::default()).await?;
    let http = reqwest::Client::new();
    let mut browser = Browser::start(&binary).await?;
    let base = format!("http://{}", server.http);

    // Create: the form, a review showing the whole text as added, publish.
    browser.open(&format!("{base}/#/config?ns=&new=1")).await?;
    browser
        .wait_for(
            "the new config form",
            "!!document.getElementById('config-edit')",
        )
        .await?;
    browser
        .eval(&fill("config-edit", "dataId", "app.yaml"))
        .await?;
    browser.eval(&fill("config-edit", "type", "yaml")).await?;
    browser
        .eval(&fill("config-edit", "content", "a: 1\nb: 2"))
        .await?;
    browser.eval(&click("review")).await?;
    browser
        .wait_for("the review", "!!document.getElementById('diff')")
        .await?;
    browser.eval(&click("publish")).await?;
    browser
        .wait_for("the published config", &shows_md5("a: 1\nb: 2"))
        .await?;
    assert_eq!(
        app_yaml(&http, &server).await.as_deref(),
        Some("a: 1\nb: 2")
    );

    // Edit: the review shows the changed lines side by side.
    browser
        .eval(&fill("config-edit", "content", "a: 1\nb: 3\nc: 4"))
        .await?;
    browser.eval(&click("review")).await?;
    browser
        .wait_for("the diff", "!!document.getElementById('diff')")
        .await?;
    let diff = browser
        .eval("JSON.stringify([...document.querySelectorAll('#diff tbody tr')].map(r => r.className + ' ' + [...r.cells].map(c => c.textContent).join('|')))")
        .await?;
    let diff: Vec<String> = serde_json::from_str(diff.as_str().unwrap())?;
    assert_eq!(
        diff,
        [
            "diff-same a: 1|a: 1",
            "diff-change b: 2|b: 3",
            "diff-add |c: 4"
        ],
        "{diff:?}"
    );
    browser.screenshot("config-diff").await?;
    browser.eval(&click("publish")).await?;
    browser
        .wait_for("the edit published", &shows_md5("a: 1\nb: 3\nc: 4"))
        .await?;
    assert_eq!(
        app_yaml(&http, &server).await.as_deref(),
        Some("a: 1\nb: 3\nc: 4")
    );

    // Compare-and-set: a change made elsewhere since the page read the
    // config is not overwritten.
    let reply = http
        .post(server.url("/nacos/v1/cs/configs"))
        .form(&[
            ("dataId", "app.yaml"),
            ("group", "DEFAULT_GROUP"),
            ("content", "x: 9"),
        ])
        .send()
        .await?;
    assert_eq!(reply.text().await?, "true");
    browser
        .eval(&fill("config-edit", "content", "a: 1\nb: 4"))
        .await?;
    browser.eval(&click("review")).await?;
    browser
        .wait_for("the review", "!!document.getElementById('publish')")
        .await?;
    browser.eval(&click("publish")).await?;
    browser
        .wait_for(
            "the refusal",
            "(document.getElementById('publish-error') || {}).textContent?.includes('changed since you opened it')",
        )
        .await?;
    assert_eq!(app_yaml(&http, &server).await.as_deref(), Some("x: 9"));

    // History: the first version, compared with what is published, and
    // rolled back to.
    let history: Value = http
        .get(server.url("/nacos/v3/admin/cs/history/list?dataId=app.yaml&groupName=DEFAULT_GROUP&namespaceId=&pageNo=1&pageSize=50"))
        .send()
        .await?
        .json()
        .await?;
    let mut first = None;
    for item in history["data"]["pageItems"].as_array().unwrap() {
        let nid = item["id"].as_str().unwrap();
        let entry: Value = http
            .get(server.url(&format!("/nacos/v3/admin/cs/history?dataId=app.yaml&groupName=DEFAULT_GROUP&namespaceId=&nid={nid}")))
            .send()
            .await?
            .json()
            .await?;
        if entry["data"]["content"] == "a: 1\nb: 2" {
            first = Some(nid.to_owned());
        }
    }
    let first = first.context("the first version is in the history")?;
    browser
        .open(&format!(
            "{base}/#/history?ns=&group=DEFAULT_GROUP&dataId=app.yaml&nid={first}"
        ))
        .await?;
    browser
        .wait_for(
            "the history entry",
            "!!document.getElementById('history-entry')",
        )
        .await?;
    let rows = browser
        .eval("document.querySelectorAll('#history tbody tr[data-nid]').length")
        .await?;
    assert!(rows.as_u64() >= Some(3), "{rows}");
    let compared = browser
        .eval("[...document.querySelectorAll('#history-entry #diff tbody tr')].map(r => r.className).join(' ')")
        .await?;
    assert!(
        compared.as_str().unwrap().contains("diff-change"),
        "{compared}"
    );
    browser.screenshot("config-history").await?;
    browser.eval(&click("rollback")).await?;
    browser
        .wait_for(
            "the rollback",
            "(document.getElementById('config-message') || {}).textContent?.startsWith('rolled back')",
        )
        .await?;
    assert_eq!(
        app_yaml(&http, &server).await.as_deref(),
        Some("a: 1\nb: 2")
    );

    // Listeners and subscribers: real nacos-sdk clients.
    let props = || {
        ClientProps::new()
            .server_addr(server.http.to_string())
            .app_name("console-test")
            .naming_load_cache_at_start(false)
            .env_first(false)
    };
    let config = ConfigServiceBuilder::new(props()).build().await?;
    config
        .add_listener(
            "app.yaml".into(),
            "DEFAULT_GROUP".into(),
            std::sync::Arc::new(Ignore),
        )
        .await?;
    let naming = NamingServiceBuilder::new(props()).build().await?;
    naming
        .subscribe("orders".into(), None, vec![], std::sync::Arc::new(Ignore))
        .await?;
    browser
        .open(&format!(
            "{base}/#/config?ns=&group=DEFAULT_GROUP&dataId=app.yaml"
        ))
        .await?;
    // The SDK listens in the background.
    browser
        .wait_rendered(
            "the SDK's listener",
            "document.querySelectorAll('#listeners tr[data-client]').length === 1",
        )
        .await?;
    let listener = browser
        .eval("document.querySelector('#listeners tr[data-client]').innerText")
        .await?;
    let listener = listener.as_str().unwrap();
    assert!(
        listener.contains("Nacos-Rust-Client") && listener.contains("node 1"),
        "{listener}"
    );
    browser
        .open(&format!(
            "{base}/#/registry?ns=&group=DEFAULT_GROUP&service=orders"
        ))
        .await?;
    browser
        .wait_for(
            "the SDK's subscription",
            "document.querySelectorAll('#subscribers tr[data-client]').length === 1",
        )
        .await?;
    let subscriber = browser
        .eval("document.querySelector('#subscribers tr[data-client]').innerText")
        .await?;
    let subscriber = subscriber.as_str().unwrap();
    assert!(
        subscriber.contains("Nacos-Rust-Client") && subscriber.contains("console-test"),
        "{subscriber}"
    );
    browser.screenshot("subscribers").await?;

    // Delete, after a confirmation.
    browser
        .open(&format!(
            "{base}/#/config?ns=&group=DEFAULT_GROUP&dataId=app.yaml"
        ))
        .await?;
    browser
        .wait_for("the config", "!!document.getElementById('delete')")
        .await?;
    browser.eval(&click("delete")).await?;
    browser
        .wait_for(
            "the confirmation",
            "!document.getElementById('confirm-delete').hidden",
        )
        .await?;
    assert!(
        app_yaml(&http, &server).await.is_some(),
        "deleted before the confirmation"
    );
    browser.eval(&click("delete-yes")).await?;
    browser
        .wait_for(
            "the config list",
            "(document.getElementById('config-message') || {}).textContent?.startsWith('deleted')",
        )
        .await?;
    assert_eq!(app_yaml(&http, &server).await, None);
    drop((naming, config, browser));
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium (installed by .ci/run, or set UNDERSTUDY_CHROMIUM)"]
async fn the_cluster_page_charts_lag_per_dc_with_a_partition_and_its_heal_and_subscribers_are_cluster_wide(
) -> anyhow::Result<()> {
    use understudy_server::faults::LinkSpec;
    use understudy_server::sim::{heartbeat_for, raft_timings, Sim, SimSpec};

    let binary = chromium().context(NO_CHROMIUM)?;
    let links: Vec<LinkSpec> = vec!["hz-sh=20ms".parse()?];
    let spec = SimSpec {
        dcs: vec![("hz".into(), 2), ("sh".into(), 1)],
        links: links.clone(),
        apply_delays: Default::default(),
        seed: 3,
        bind: "127.0.0.1".parse()?,
        base_port: 0,
        settings: Settings {
            log: None,
            ..raft_timings(heartbeat_for(links.iter().map(|l| l.link)))
        },
    };
    let sim = Sim::start(&spec, Duration::from_secs(20)).await?;
    let http_of = |id| sim.nodes()[&id].http;
    let base = format!("http://{}", http_of(1));
    let http = reqwest::Client::new();
    let mut browser = Browser::start(&binary).await?;
    browser.open(&format!("{base}/#/cluster")).await?;
    browser
        .wait_for(
            "a series per DC",
            "document.querySelectorAll('#lag-chart g.series').length === 2",
        )
        .await?;
    let dcs = browser
        .eval("[...document.querySelectorAll('#lag-chart g.series')].map(g => g.dataset.dc).join(',')")
        .await?;
    assert_eq!(dcs, json!("hz,sh"));

    // A partition, then its heal, each marked on the time axis.
    for (action, query) in [("partition", "?a=hz&b=sh"), ("heal", "")] {
        let reply = http
            .post(format!("{base}/understudy/v1/chaos/{action}{query}"))
            .send()
            .await?;
        assert_eq!(reply.status(), 200, "{action}");
        let marker = if action == "heal" {
            "heal hz-sh"
        } else {
            "cut hz-sh"
        };
        browser
            .wait_for(
                marker,
                &format!(
                    "!!document.querySelector('#lag-chart g.marker[data-action=\"{marker}\"]')"
                ),
            )
            .await?;
        // Let the chart draw some time on either side.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let markers = browser
        .eval("[...document.querySelectorAll('#lag-chart g.marker')].map(g => g.dataset.action).join(',')")
        .await?;
    assert_eq!(markers, json!("cut hz-sh,heal hz-sh"));
    browser.screenshot("cluster-lag").await?;

    // Subscribers cluster-wide: a real nacos-sdk client connected to node 3
    // (sh) is listed on node 1's page, with the node that holds it.
    let naming = nacos_sdk::api::naming::NamingServiceBuilder::new(
        nacos_sdk::api::props::ClientProps::new()
            .server_addr(http_of(3).to_string())
            .app_name("sh-consumer")
            .naming_load_cache_at_start(false)
            .env_first(false),
    )
    .build()
    .await?;
    naming
        .subscribe("orders".into(), None, vec![], std::sync::Arc::new(Ignore))
        .await?;
    browser
        .open(&format!(
            "{base}/#/registry?ns=&group=DEFAULT_GROUP&service=orders"
        ))
        .await?;
    browser
        .wait_rendered(
            "node 3's subscriber on node 1's page",
            "document.querySelectorAll('#subscribers tr[data-client]').length === 1",
        )
        .await?;
    let subscriber = browser
        .eval("document.querySelector('#subscribers tr[data-client]').innerText")
        .await?;
    let subscriber = subscriber.as_str().unwrap();
    assert!(
        subscriber.contains("node 3 (sh)") && subscriber.contains("sh-consumer"),
        "{subscriber}"
    );
    drop(naming);
    drop(browser);
    sim.stop().await;
    Ok(())
}
