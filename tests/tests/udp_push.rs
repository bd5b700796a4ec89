//! Legacy UDP pushes to v1 HTTP clients: list with `udpPort`, receive
//! `dom` datagrams on change, acknowledge with `push-ack`; unacknowledged
//! pushes are sent again.

use std::io::Read;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::UdpSocket;
use understudy_server::config::Settings;
use understudy_tests::Server;

/// Receives one datagram (gunzipping if needed) within `within`.
async fn receive(socket: &UdpSocket, within: Duration) -> Option<(Value, std::net::SocketAddr)> {
    let mut buf = vec![0u8; 65_536];
    let (len, from) = tokio::time::timeout(within, socket.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    let bytes = &buf[..len];
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = String::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_string(&mut out)
            .ok()?;
        out
    } else {
        String::from_utf8(bytes.to_vec()).ok()?
    };
    Some((serde_json::from_str(&text).ok()?, from))
}

fn hosts(datagram: &Value) -> Vec<String> {
    let info: Value =
        serde_json::from_str(datagram["data"].as_str().unwrap_or("{}")).unwrap_or_default();
    info["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| format!("{}:{}", h["ip"].as_str().unwrap_or_default(), h["port"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_listeners_get_acknowledged_udp_pushes_and_unacknowledged_ones_again(
) -> anyhow::Result<()> {
    let server = Server::start(Settings {
        push_timeout_ms: Some(300),
        push_retry_ms: Some(50),
        ..Settings::default()
    })
    .await?;
    let socket = UdpSocket::bind("127.0.0.1:0").await?;
    let udp_port = socket.local_addr()?.port();
    let http = reqwest::Client::new();
    let list = server.url(&format!(
        "/nacos/v1/ns/instance/list?serviceName=legacy&udpPort={udp_port}&clientIP=203.0.113.9"
    ));
    let answer: Value = http.get(&list).send().await?.json().await?;
    assert_eq!(answer["hosts"], json!([]));

    http.post(server.url("/nacos/v1/ns/instance?serviceName=legacy&ip=10.0.0.1&port=80"))
        .send()
        .await?
        .error_for_status()?;
    let (push, from) = receive(&socket, Duration::from_secs(3))
        .await
        .expect("a push for the registration");
    assert_eq!(push["type"], "dom");
    assert_eq!(hosts(&push), vec!["10.0.0.1:80"]);
    let info: Value = serde_json::from_str(push["data"].as_str().unwrap())?;
    assert_eq!(
        info["name"], "DEFAULT_GROUP@@legacy",
        "UDP pushes carry the grouped name"
    );
    assert!(info["lastRefTime"].as_u64() > answer["lastRefTime"].as_u64());

    // Not acknowledged: the same change comes again.
    let (again, _) = receive(&socket, Duration::from_secs(3))
        .await
        .expect("a retry");
    assert_eq!(hosts(&again), vec!["10.0.0.1:80"]);
    let ack = json!({"type":"push-ack","lastRefTime":again["lastRefTime"],"data":""});
    socket.send_to(ack.to_string().as_bytes(), from).await?;
    // Acknowledged: nothing more until the next change.
    assert!(
        receive(&socket, Duration::from_millis(800)).await.is_none(),
        "pushed again after the ack"
    );

    http.delete(server.url("/nacos/v1/ns/instance?serviceName=legacy&ip=10.0.0.1&port=80"))
        .send()
        .await?
        .error_for_status()?;
    let (removal, from) = receive(&socket, Duration::from_secs(3))
        .await
        .expect("a push for the removal");
    assert!(hosts(&removal).is_empty());
    let ack = json!({"type":"push-ack","lastRefTime":removal["lastRefTime"],"data":""});
    socket.send_to(ack.to_string().as_bytes(), from).await?;
    server.stop().await?;
    Ok(())
}
