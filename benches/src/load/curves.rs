//! Cost curves: how understudy's (and r-nacos', when its binary is found)
//! memory, query latency, push latency and register throughput grow with
//! the registry, the subscribers and the connections, each point on a
//! freshly started server, drawn as one SVG of four panels; and a 3-node
//! cluster's register throughput, through its leader and its followers.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::compare::{self, Spawned};

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The `understudy` binary.
    pub understudy: PathBuf,
    /// The `rnacos` binary, if there is one.
    pub rnacos: Option<PathBuf>,
    /// Registry sizes, in instances (10 per service).
    pub instances: Vec<usize>,
    /// Subscriber counts of the push curve.
    pub subscribers: Vec<usize>,
    /// Connection counts of the register curve.
    pub connections: Vec<usize>,
    /// Seconds per throughput or latency run.
    pub seconds: f64,
}

/// A curve: what is on its axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Curve {
    /// RSS in MB by instances.
    Rss,
    /// Query p99 in ms by instances.
    QueryP99,
    /// Push p99 in ms by subscribers.
    PushP99,
    /// Register ops/s by connections.
    Register,
}

impl Curve {
    const ALL: [Curve; 4] = [Curve::Rss, Curve::QueryP99, Curve::PushP99, Curve::Register];

    fn title(self) -> &'static str {
        match self {
            Curve::Rss => "RSS after registering (MB) by instances",
            Curve::QueryP99 => "gRPC query p99 (ms) by instances in the registry",
            Curve::PushP99 => "push p99, ack → last delivery (ms) by subscribers",
            Curve::Register => "gRPC register (ops/s) by connections",
        }
    }
}

/// One measured point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// The server.
    pub server: String,
    /// The curve.
    pub curve: Curve,
    /// Instances, subscribers or connections.
    pub x: f64,
    /// MB, ms or ops/s.
    pub y: f64,
}

async fn start(plan: &Plan, server: &str) -> anyhow::Result<Spawned> {
    match server {
        "r-nacos" => {
            let path = plan.rnacos.as_ref().expect("r-nacos runs only when found");
            compare::start_rnacos(path).await
        }
        // 1M instances at 10 a service is 100k services, above the
        // default cap of 50k services a namespace; 5,000 subscribers from
        // one address are above the default cap of connections per ip.
        _ => {
            let room = [
                "--max-services-per-namespace=10000000".to_owned(),
                "--max-connections-per-ip=100000".to_owned(),
                "--max-connections=100000".to_owned(),
            ];
            compare::start_understudy(&plan.understudy, 1, false, &room).await
        }
    }
}

/// Measures every point, printing each run as it ends.
pub async fn run(plan: &Plan) -> anyhow::Result<Vec<Point>> {
    let mut servers = vec!["understudy"];
    if plan.rnacos.is_some() {
        servers.push("r-nacos");
    } else {
        println!(
            "\n!!! r-nacos NOT FOUND: the curves show understudy alone. Install it with \
             `cargo install rnacos --locked` to draw both. !!!\n"
        );
    }
    let seconds = Duration::from_secs_f64(plan.seconds);
    let mut points = Vec::new();
    let mut add = |server: &str, curve, x: usize, y: Option<f64>| {
        if let Some(y) = y {
            points.push(Point {
                server: server.to_owned(),
                curve,
                x: x as f64,
                y,
            });
        }
    };
    for server in servers {
        for &n in &plan.instances {
            let spawned = start(plan, server).await?;
            let t = spawned.target();
            let (memory, owners) = super::memory_kept(t, (n / 10).max(1), 10).await?;
            println!("{memory}  (registered in {:.1} s)", memory.seconds);
            add(
                server,
                Curve::Rss,
                n,
                memory.rss_bytes.map(|b| b as f64 / 1e6),
            );
            let query = super::query(t, 32, seconds).await?;
            println!("{query}  (with {n} instances registered)");
            add(server, Curve::QueryP99, n, query.p99_ms);
            drop(owners);
        }
        for &subscribers in &plan.subscribers {
            let spawned = start(plan, server).await?;
            let push = super::push(spawned.target(), subscribers, 20).await?;
            println!("{push}");
            add(server, Curve::PushP99, subscribers, push.p99_ms);
        }
        for &connections in &plan.connections {
            let spawned = start(plan, server).await?;
            let register = super::register(spawned.target(), connections, 64, seconds).await?;
            println!("{register}");
            add(
                server,
                Curve::Register,
                connections,
                Some(register.ops_per_sec),
            );
        }
    }
    // A 3-node cluster's register throughput, through its leader alone
    // and through its followers alone (each forwards to the leader).
    for &connections in &plan.connections {
        let cluster = compare::start_understudy(&plan.understudy, 3, false, &[]).await?;
        for (via, t) in compare::leader_and_followers(cluster.target()).await? {
            let register = super::register(&t, connections, 64, seconds).await?;
            println!("{register}");
            add(
                &format!("understudy×3 via {via}"),
                Curve::Register,
                connections,
                Some(register.ops_per_sec),
            );
        }
    }
    Ok(points)
}

fn label(v: f64) -> String {
    let short = |v: f64, unit: &str| {
        let text = format!("{v:.1}");
        format!("{}{unit}", text.strip_suffix(".0").unwrap_or(&text))
    };
    match v {
        v if v >= 1e6 => short(v / 1e6, "M"),
        v if v >= 1e3 => short(v / 1e3, "k"),
        v if v >= 100.0 => format!("{v:.0}"),
        v => short(v, ""),
    }
}

const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"];
const PANEL_W: f64 = 440.0;
const PANEL_H: f64 = 300.0;
const MARGIN: f64 = 56.0;

/// The four curves as one SVG: a panel each, x on a log scale, a line per
/// server, every point labelled with its value.
pub fn svg(points: &[Point]) -> String {
    // Each server once, in the order its first point was measured.
    let mut servers: Vec<&str> = Vec::new();
    for point in points {
        if !servers.contains(&point.server.as_str()) {
            servers.push(&point.server);
        }
    }
    let width = 2.0 * PANEL_W;
    let height = 2.0 * PANEL_H + 30.0;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    out.push_str(r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (s, server) in servers.iter().enumerate() {
        let colour = COLOURS[s % COLOURS.len()];
        let x = 20.0 + 200.0 * s as f64;
        let _ = write!(
            out,
            r#"<rect x="{x}" y="8" width="12" height="12" fill="{colour}"/><text x="{}" y="18">{server}</text>"#,
            x + 16.0
        );
    }
    for (i, curve) in Curve::ALL.into_iter().enumerate() {
        let ox = (i % 2) as f64 * PANEL_W;
        let oy = 30.0 + (i / 2) as f64 * PANEL_H;
        panel(&mut out, points, &servers, curve, ox, oy);
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, points: &[Point], servers: &[&str], curve: Curve, ox: f64, oy: f64) {
    let mine: Vec<&Point> = points.iter().filter(|p| p.curve == curve).collect();
    let mut xs: Vec<f64> = mine.iter().map(|p| p.x).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let top = mine.iter().map(|p| p.y).fold(0.0, f64::max).max(1e-9) * 1.15;
    let (left, right) = (ox + MARGIN, ox + PANEL_W - 48.0);
    let (upper, lower) = (oy + 24.0, oy + PANEL_H - 36.0);
    let (lo, hi) = match (xs.first(), xs.last()) {
        (Some(lo), Some(hi)) if hi > lo => (lo.log10(), hi.log10()),
        (Some(lo), _) => (lo.log10() - 0.5, lo.log10() + 0.5),
        _ => (0.0, 1.0),
    };
    let px = |x: f64| left + (x.log10() - lo) / (hi - lo) * (right - left);
    let py = |y: f64| lower - y / top * (lower - upper);
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" font-weight="bold">{}</text>"#,
        ox + 12.0,
        oy + 14.0,
        curve.title()
    );
    let _ = write!(
        out,
        r##"<line x1="{left}" y1="{lower}" x2="{right}" y2="{lower}" stroke="#333"/><line x1="{left}" y1="{upper}" x2="{left}" y2="{lower}" stroke="#333"/>"##
    );
    for x in &xs {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px(*x),
            lower + 16.0,
            label(*x)
        );
    }
    for k in 0..=4 {
        let y = top / 4.0 * f64::from(k);
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" text-anchor="end">{}</text><line x1="{left}" y1="{py}" x2="{right}" y2="{py}" stroke="#eee"/>"##,
            left - 6.0,
            py(y) + 4.0,
            label(y),
            py = py(y)
        );
    }
    for (s, server) in servers.iter().enumerate() {
        let colour = COLOURS[s % COLOURS.len()];
        let mut line: Vec<&&Point> = mine.iter().filter(|p| p.server == *server).collect();
        line.sort_by(|a, b| a.x.total_cmp(&b.x));
        let path: Vec<String> = line
            .iter()
            .map(|p| format!("{:.1},{:.1}", px(p.x), py(p.y)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for p in line {
            let _ = write!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/><text x="{:.1}" y="{:.1}" fill="{colour}">{}</text>"#,
                px(p.x),
                py(p.y),
                px(p.x) + 5.0,
                py(p.y) - 5.0,
                label(p.y)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_is_in_the_legend_once_however_its_points_interleave() {
        let point = |server: &str, x: f64| Point {
            server: server.to_owned(),
            curve: Curve::Register,
            x,
            y: 1000.0,
        };
        // As the cluster's runs come: leader, followers, leader, followers.
        let points = [
            point("via leader", 1.0),
            point("via followers", 1.0),
            point("via leader", 8.0),
            point("via followers", 8.0),
        ];
        let drawn = svg(&points);
        for server in ["via leader", "via followers"] {
            assert_eq!(drawn.matches(&format!(">{server}</text>")).count(), 1);
        }
        // A line per server in each of the four panels.
        assert_eq!(drawn.matches("<polyline").count(), 8);
    }
}
