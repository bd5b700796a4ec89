//! One native watch followed across reconnects, for a [`Directory`] (one
//! service) or a [`View`] (a namespace or group). The loop owns the
//! connection, the resume token and the endpoint choice; the follower owns
//! the state and what it publishes.
//!
//! - A new stream resumes from the last token of a complete event, so a
//!   reconnect, even to another node, has no gap (the server sends the
//!   changes missed, or a snapshot when it cannot).
//! - A token is taken only once a snapshot sent in several messages is
//!   complete: resuming from a half-received snapshot would skip it.
//! - The watch asks for progress events, which say which node serves it
//!   and how far that node lags ([`ServedBy`]).
//! - Following another DC's node while the client has a home (its local
//!   DC), the loop probes home and moves back, with its token, as soon as
//!   home answers.
//!
//! [`Directory`]: crate::Directory
//! [`View`]: crate::View

use std::future::Future;
use std::pin::Pin;
use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{watch_event, ResumeToken, WatchEvent, WatchRequest};

use crate::connection::{connect, Endpoint, Inner, Reconnect};

/// How often a watch asks the server for progress events.
const PROGRESS: Duration = Duration::from_secs(1);

/// Which node a watch follows now, and how current that node is.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedBy {
    /// The endpoint followed, as given to the builder.
    pub endpoint: String,
    /// The DC label given with that endpoint.
    pub endpoint_dc: Option<String>,
    /// Whether that endpoint is in the client's own DC (always true for a
    /// client with no local DC).
    pub home: bool,
    /// The serving node's id.
    pub node_id: u64,
    /// The serving node's own DC label.
    pub dc: String,
    /// How far the node's view lags behind the leader's, as it last said.
    pub view_lag: Option<Duration>,
}

/// Work a follower wants done after an event (writing a cache file).
pub(crate) type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The state side of a watch.
pub(crate) trait Follow: Send + 'static {
    /// What to watch (the loop adds the resume token and progress).
    fn request(&self) -> WatchRequest;
    /// A new stream is starting: forget a snapshot left half-received.
    fn restart(&mut self);
    /// Applies a snapshot part or a change; may hand back a job to await.
    fn apply(&mut self, event: watch_event::Event) -> Option<Job>;
    /// Whether no snapshot is half-received.
    fn complete(&self) -> bool;
    /// The revision reached, after each complete event.
    fn reached(&mut self, revision: u64);
    /// Where the serving node is published.
    fn served(&self) -> &watch::Sender<Option<ServedBy>>;
}

/// Why a stream ended.
enum Ended {
    /// It failed or the server ended it.
    Failed(String),
    /// Home answers again: move there.
    Home(usize),
}

async fn watch_once<F: Follow>(
    weak: &Weak<Inner>,
    inner: &Inner,
    endpoint: &Endpoint,
    follower: &mut F,
    token: &mut Option<ResumeToken>,
    reconnect: &mut Reconnect,
) -> Ended {
    let channel = match connect(endpoint, inner.connect_timeout).await {
        Ok(channel) => channel,
        Err(e) => return Ended::Failed(e),
    };
    let request = WatchRequest {
        resume: token.clone(),
        progress_ms: PROGRESS.as_millis() as u32,
        ..follower.request()
    };
    let request = match inner.request(&channel, request).await {
        Ok(request) => request,
        Err(e) => return Ended::Failed(e),
    };
    let mut stream = match RegistryClient::new(channel).watch(request).await {
        Ok(stream) => stream.into_inner(),
        Err(status) => return Ended::Failed(inner.refused(status).await),
    };
    follower.restart();
    let away = reconnect.away(inner);
    let home = async {
        if away {
            crate::connection::home_answers(weak).await
        } else {
            std::future::pending().await
        }
    };
    tokio::pin!(home);
    loop {
        let message = tokio::select! {
            message = stream.message() => message,
            index = &mut home => return Ended::Home(index),
        };
        let event: WatchEvent = match message {
            Ok(Some(event)) => event,
            Ok(None) => return Ended::Failed("the watch ended".into()),
            Err(status) => return Ended::Failed(status.message().to_owned()),
        };
        reconnect.succeeded();
        match event.event {
            Some(watch_event::Event::Progress(p)) => {
                follower.served().send_replace(Some(ServedBy {
                    endpoint: endpoint.uri.clone(),
                    endpoint_dc: endpoint.dc.clone(),
                    home: !away,
                    node_id: p.node_id,
                    dc: p.dc,
                    view_lag: p.view_lag_ms.map(Duration::from_millis),
                }));
            }
            Some(other) => {
                if let Some(job) = follower.apply(other) {
                    job.await;
                }
            }
            None => {}
        }
        if let Some(t) = event.token {
            if follower.complete() {
                follower.reached(t.revision);
                *token = Some(t);
            }
        }
    }
}

/// Follows the watch until the client goes away.
pub(crate) async fn run<F: Follow>(inner: Weak<Inner>, cancel: CancellationToken, mut follower: F) {
    let mut token: Option<ResumeToken> = None;
    let mut reconnect = Reconnect::default();
    loop {
        let Some(client) = inner.upgrade() else {
            return;
        };
        let endpoint = reconnect.endpoint(&client);
        let ended = tokio::select! {
            () = cancel.cancelled() => return,
            ended = watch_once(&inner, &client, &endpoint, &mut follower, &mut token, &mut reconnect) => ended,
        };
        let delay = match ended {
            Ended::Home(index) => {
                tracing::info!(from = %endpoint.uri, to = %client.endpoints[index].uri,
                    "the local DC answers again; the watch moves back");
                reconnect.go_home(index);
                Duration::ZERO
            }
            Ended::Failed(reason) => {
                tracing::debug!(endpoint = %endpoint.uri, %reason, "watch interrupted; reconnecting");
                follower.served().send_replace(None);
                reconnect.failed(&client)
            }
        };
        drop(client);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}
