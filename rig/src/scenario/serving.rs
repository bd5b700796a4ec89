//! The serving half of a scenario: `providers ZONE N key=value…` and
//! `consumers ZONE N key=value…` lines, parsed into declarations the rig
//! builds real providers and consumers from. Every key is checked: a
//! missing required key, an unknown or repeated one, or a value that does
//! not parse is refused with what was expected.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use understudy_client::cluster::Strategy;
use understudy_server::faults::parse_duration;

/// A log-normal service time: `median × e^(σ·N(0,1))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceTime {
    /// The median.
    pub median: Duration,
    /// The spread of the logarithm.
    pub sigma: f64,
}

/// How a provider registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// The bundled client's native session (`Client::register`).
    Native,
    /// The Nacos 2.x gRPC API, as the Java client registers.
    Nacos,
}

/// `providers ZONE N …`: N serving providers in ZONE.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderGroup {
    /// Their zone (a DC).
    pub zone: String,
    /// How many.
    pub count: u32,
    /// Time to serve one call.
    pub service: ServiceTime,
    /// Worker threads; a call that finds none free is refused at once
    /// (Dubbo's fixed pool, no queue).
    pub threads: u32,
    /// The provider gives up on a call after this long.
    pub timeout: Duration,
    /// How they register.
    pub api: Api,
    /// Delayed registration: serving starts at once, registration this
    /// much later (Dubbo's `delay`).
    pub delay: Duration,
    /// Most calls executing at once before refusing (Dubbo's `executes`);
    /// 0: no limit.
    pub executes: u32,
    /// The registration's keepalive period (native sessions) or the
    /// connection's health check period (Nacos API).
    pub keepalive: Duration,
}

/// The zone router of a consumer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RouterSpec {
    /// No zone routing (Dubbo's default).
    None,
    /// The local zone while it has instances, else all zones.
    PreferLocal,
    /// The local zone only.
    Strict,
    /// The local zone until it falls below a count or share, back once it
    /// reaches both recovery levels.
    Threshold {
        /// Fall back below this many local instances…
        fall_count: usize,
        /// …or this share of all.
        fall_share: f64,
        /// Come back at this many…
        recover_count: usize,
        /// …and this share.
        recover_share: f64,
    },
}

/// The load balancer of a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BalancerSpec {
    /// Weighted random (Dubbo's default).
    Random,
    /// Smooth weighted round robin.
    RoundRobin,
    /// Least active calls.
    LeastActive,
    /// Shortest expected response.
    ShortestResponse,
    /// Consistent hash of the first argument.
    ConsistentHash,
    /// Power of two choices over peak-EWMA latency.
    P2c,
    /// The caller's zone first, then least active.
    ZoneFirst,
}

/// `consumers ZONE N …`: N consumer tasks in ZONE, each a client, a
/// directory and a cluster calling the providers.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerGroup {
    /// Their zone (a DC).
    pub zone: String,
    /// How many.
    pub count: u32,
    /// Calls per second of each consumer (Poisson arrivals).
    pub rate: f64,
    /// Share of calls that are not idempotent, 0..=1.
    pub non_idempotent: f64,
    /// Zone routing.
    pub router: RouterSpec,
    /// Load balancing.
    pub balancer: BalancerSpec,
    /// What to do when an attempt fails.
    pub strategy: Strategy,
    /// Each attempt's timeout.
    pub timeout: Duration,
    /// The whole call's deadline across attempts.
    pub deadline: Option<Duration>,
    /// Circuit breakers on.
    pub breaker: bool,
    /// The retry budget on.
    pub budget: bool,
}

/// The keys of a `providers ZONE N` line, with whether each is required.
const PROVIDER_KEYS: &[(&str, bool)] = &[
    ("service", true),
    ("threads", false),
    ("timeout", false),
    ("api", false),
    ("delay", false),
    ("executes", false),
    ("keepalive", false),
];

/// The keys of a `consumers ZONE N` line.
const CONSUMER_KEYS: &[(&str, bool)] = &[
    ("rate", true),
    ("non-idempotent", false),
    ("router", false),
    ("balancer", false),
    ("strategy", false),
    ("timeout", false),
    ("deadline", false),
    ("breaker", false),
    ("budget", false),
];

/// `key=value` words into a map, refusing unknown, repeated and missing
/// keys.
fn keys<'a>(
    words: &[&'a str],
    known: &[(&str, bool)],
    line: &str,
) -> Result<BTreeMap<&'a str, &'a str>, String> {
    let names = || known.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ");
    let mut found = BTreeMap::new();
    for word in words {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| format!("{line}: '{word}' is not key=value (keys: {})", names()))?;
        if !known.iter().any(|(k, _)| *k == key) {
            return Err(format!("{line}: unknown key '{key}' (keys: {})", names()));
        }
        if found.insert(key, value).is_some() {
            return Err(format!("{line}: key '{key}' given twice"));
        }
    }
    if let Some((missing, _)) = known
        .iter()
        .find(|(k, required)| *required && !found.contains_key(k))
    {
        return Err(format!("{line}: missing required key {missing}=…"));
    }
    Ok(found)
}

/// `ZONE N` at the start of a serving line.
fn zone_and_count<'a>(rest: &[&'a str], what: &str) -> Result<(&'a str, u32), String> {
    match rest {
        [zone, count, ..] => {
            let count = count.parse().ok().filter(|c| *c >= 1).ok_or_else(|| {
                format!("{what} {zone}: count '{count}' is not a whole number ≥ 1")
            })?;
            Ok((zone, count))
        }
        _ => Err(format!("expected: {what} ZONE COUNT key=value…")),
    }
}

fn value_error(key: &str, value: &str, expected: &str) -> String {
    format!("{key}={value}: expected {expected}")
}

fn duration(key: &str, value: &str) -> Result<Duration, String> {
    parse_duration(value).map_err(|_| value_error(key, value, "a duration such as 250ms or 2s"))
}

fn whole<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| value_error(key, value, "a whole number"))
}

fn switch(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(value_error(key, value, "on or off")),
    }
}

/// `P%` as a share in 0..=1.
fn percent(key: &str, value: &str) -> Result<f64, String> {
    value
        .strip_suffix('%')
        .and_then(|p| p.parse::<f64>().ok())
        .filter(|p| (0.0..=100.0).contains(p))
        .map(|p| p / 100.0)
        .ok_or_else(|| value_error(key, value, "a percentage from 0% to 100%"))
}

/// `name(a,b,…)` into the name and its arguments; a bare name has none.
fn call(value: &str) -> Option<(&str, Vec<&str>)> {
    match value.split_once('(') {
        None => Some((value, Vec::new())),
        Some((name, rest)) => {
            let inside = rest.strip_suffix(')')?;
            Some((name, inside.split(',').map(str::trim).collect()))
        }
    }
}

fn service_time(value: &str) -> Result<ServiceTime, String> {
    let expected = "lognormal(MEDIAN,SIGMA), e.g. lognormal(8ms,0.5)";
    match call(value) {
        Some(("lognormal", args)) if args.len() == 2 => {
            let median =
                parse_duration(args[0]).map_err(|_| value_error("service", value, expected))?;
            let sigma = args[1]
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| value_error("service", value, expected))?;
            Ok(ServiceTime { median, sigma })
        }
        _ => Err(value_error("service", value, expected)),
    }
}

fn router(value: &str) -> Result<RouterSpec, String> {
    let expected = "none, prefer-local, strict or threshold(FALL_COUNT,FALL_SHARE,RECOVER_COUNT,RECOVER_SHARE)";
    let bad = || value_error("router", value, expected);
    Ok(match call(value).ok_or_else(bad)? {
        ("none", a) if a.is_empty() => RouterSpec::None,
        ("prefer-local", a) if a.is_empty() => RouterSpec::PreferLocal,
        ("strict", a) if a.is_empty() => RouterSpec::Strict,
        ("threshold", a) if a.len() == 4 => {
            let count = |s: &str| s.parse::<usize>().map_err(|_| bad());
            let share = |s: &str| {
                s.parse::<f64>()
                    .ok()
                    .filter(|v| (0.0..=1.0).contains(v))
                    .ok_or_else(bad)
            };
            RouterSpec::Threshold {
                fall_count: count(a[0])?,
                fall_share: share(a[1])?,
                recover_count: count(a[2])?,
                recover_share: share(a[3])?,
            }
        }
        _ => return Err(bad()),
    })
}

fn balancer(value: &str) -> Result<BalancerSpec, String> {
    Ok(match value {
        "random" => BalancerSpec::Random,
        "round-robin" => BalancerSpec::RoundRobin,
        "least-active" => BalancerSpec::LeastActive,
        "shortest-response" => BalancerSpec::ShortestResponse,
        "consistent-hash" => BalancerSpec::ConsistentHash,
        "p2c" => BalancerSpec::P2c,
        "zone-first" => BalancerSpec::ZoneFirst,
        _ => return Err(value_error(
            "balancer",
            value,
            "random, round-robin, least-active, shortest-response, consistent-hash, p2c or zone-first",
        )),
    })
}

fn strategy(value: &str) -> Result<Strategy, String> {
    let expected = "failover(RETRIES), failfast, failsafe, forking(N) or zone-aware(LOCAL_TIMEOUT,CROSS_TIMEOUT,LOCAL_RETRIES)";
    let bad = || value_error("strategy", value, expected);
    Ok(match call(value).ok_or_else(bad)? {
        ("failover", a) if a.len() == 1 => Strategy::Failover {
            retries: a[0].parse().map_err(|_| bad())?,
        },
        ("failfast", a) if a.is_empty() => Strategy::Failfast,
        ("failsafe", a) if a.is_empty() => Strategy::Failsafe,
        ("forking", a) if a.len() == 1 => Strategy::Forking {
            parallel: a[0].parse().ok().filter(|n| *n >= 1).ok_or_else(bad)?,
        },
        ("zone-aware", a) if a.len() == 3 => Strategy::ZoneAware {
            local_timeout: parse_duration(a[0]).map_err(|_| bad())?,
            cross_timeout: parse_duration(a[1]).map_err(|_| bad())?,
            local_retries: a[2].parse().map_err(|_| bad())?,
        },
        _ => return Err(bad()),
    })
}

/// Parses the words after `providers` when they start with a zone.
pub(crate) fn provider_group(rest: &[&str]) -> Result<ProviderGroup, String> {
    let (zone, count) = zone_and_count(rest, "providers")?;
    let line = format!("providers {zone}");
    let k = keys(&rest[2..], PROVIDER_KEYS, &line)?;
    let get = |key: &str| k.get(key).copied();
    Ok(ProviderGroup {
        zone: zone.to_owned(),
        count,
        service: service_time(get("service").unwrap_or_default())?,
        threads: match get("threads") {
            Some(v) => Some(whole::<u32>("threads", v)?)
                .filter(|t| *t >= 1)
                .ok_or_else(|| value_error("threads", v, "at least 1"))?,
            None => 200,
        },
        timeout: get("timeout")
            .map_or(Ok(Duration::from_millis(2500)), |v| duration("timeout", v))?,
        api: match get("api") {
            None | Some("native") => Api::Native,
            Some("nacos") => Api::Nacos,
            Some(v) => return Err(value_error("api", v, "native or nacos")),
        },
        delay: get("delay").map_or(Ok(Duration::ZERO), |v| duration("delay", v))?,
        executes: get("executes").map_or(Ok(0), |v| whole("executes", v))?,
        keepalive: match get("keepalive") {
            Some(v) => Some(duration("keepalive", v)?)
                .filter(|d| *d >= Duration::from_millis(50))
                .ok_or_else(|| value_error("keepalive", v, "at least 50ms"))?,
            None => Duration::from_secs(2),
        },
    })
}

/// Parses the words after `consumers`.
pub(crate) fn consumer_group(rest: &[&str]) -> Result<ConsumerGroup, String> {
    let (zone, count) = zone_and_count(rest, "consumers")?;
    let line = format!("consumers {zone}");
    let k = keys(&rest[2..], CONSUMER_KEYS, &line)?;
    let get = |key: &str| k.get(key).copied();
    let rate_text = get("rate").unwrap_or_default();
    let rate = rate_text
        .strip_suffix("/s")
        .and_then(|r| r.parse::<f64>().ok())
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or_else(|| value_error("rate", rate_text, "calls per second such as 100/s"))?;
    let timeout =
        get("timeout").map_or(Ok(Duration::from_millis(1000)), |v| duration("timeout", v))?;
    if timeout.is_zero() {
        return Err(value_error(
            "timeout",
            get("timeout").unwrap_or_default(),
            "a positive duration",
        ));
    }
    Ok(ConsumerGroup {
        zone: zone.to_owned(),
        count,
        rate,
        non_idempotent: get("non-idempotent").map_or(Ok(0.0), |v| percent("non-idempotent", v))?,
        router: get("router").map_or(Ok(RouterSpec::None), router)?,
        balancer: get("balancer").map_or(Ok(BalancerSpec::Random), balancer)?,
        strategy: get("strategy").map_or(Ok(Strategy::failover()), strategy)?,
        timeout,
        deadline: match get("deadline") {
            None | Some("none") => None,
            Some(v) => Some(duration("deadline", v)?),
        },
        breaker: get("breaker").map_or(Ok(false), |v| switch("breaker", v))?,
        budget: get("budget").map_or(Ok(true), |v| switch("budget", v))?,
    })
}

impl fmt::Display for RouterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouterSpec::None => f.write_str("none"),
            RouterSpec::PreferLocal => f.write_str("prefer-local"),
            RouterSpec::Strict => f.write_str("strict"),
            RouterSpec::Threshold {
                fall_count,
                fall_share,
                recover_count,
                recover_share,
            } => write!(
                f,
                "threshold({fall_count},{fall_share},{recover_count},{recover_share})"
            ),
        }
    }
}

impl fmt::Display for BalancerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BalancerSpec::Random => "random",
            BalancerSpec::RoundRobin => "round-robin",
            BalancerSpec::LeastActive => "least-active",
            BalancerSpec::ShortestResponse => "shortest-response",
            BalancerSpec::ConsistentHash => "consistent-hash",
            BalancerSpec::P2c => "p2c",
            BalancerSpec::ZoneFirst => "zone-first",
        })
    }
}

/// A strategy in the scenario's syntax.
pub fn strategy_text(strategy: &Strategy) -> String {
    let ms = |d: &Duration| format!("{}ms", d.as_millis());
    match strategy {
        Strategy::Failover { retries } => format!("failover({retries})"),
        Strategy::Forking { parallel } => format!("forking({parallel})"),
        Strategy::ZoneAware {
            local_timeout,
            cross_timeout,
            local_retries,
        } => format!(
            "zone-aware({},{},{local_retries})",
            ms(local_timeout),
            ms(cross_timeout)
        ),
        other => other.name().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_line_takes_its_keys_and_defaults_the_rest() {
        let p = provider_group(&[
            "hz",
            "4",
            "service=lognormal(8ms,0.5)",
            "api=nacos",
            "executes=50",
        ])
        .unwrap();
        assert_eq!(p.zone, "hz");
        assert_eq!(p.count, 4);
        assert_eq!(
            p.service,
            ServiceTime {
                median: Duration::from_millis(8),
                sigma: 0.5
            }
        );
        assert_eq!((p.threads, p.executes), (200, 50));
        assert_eq!(p.timeout, Duration::from_millis(2500));
        assert_eq!(p.api, Api::Nacos);
        assert_eq!(p.delay, Duration::ZERO);
    }

    #[test]
    fn a_consumer_line_defaults_to_dubbos_choices() {
        let c = consumer_group(&["sh", "2", "rate=300/s"]).unwrap();
        assert_eq!(c.router, RouterSpec::None);
        assert_eq!(c.balancer, BalancerSpec::Random);
        assert_eq!(c.strategy, Strategy::Failover { retries: 2 });
        assert_eq!(c.timeout, Duration::from_millis(1000));
        assert_eq!((c.deadline, c.breaker, c.budget), (None, false, true));
        let c = consumer_group(&[
            "sh",
            "1",
            "rate=50.5/s",
            "non-idempotent=20%",
            "router=threshold(2,0.25,3,0.35)",
            "balancer=zone-first",
            "strategy=zone-aware(800ms,1500ms,1)",
            "deadline=3s",
            "breaker=on",
            "budget=off",
        ])
        .unwrap();
        assert_eq!(c.rate, 50.5);
        assert_eq!(c.non_idempotent, 0.2);
        assert_eq!(c.router.to_string(), "threshold(2,0.25,3,0.35)");
        assert_eq!(strategy_text(&c.strategy), "zone-aware(800ms,1500ms,1)");
        assert_eq!(c.deadline, Some(Duration::from_secs(3)));
        assert!(c.breaker && !c.budget);
    }

    #[test]
    fn bad_keys_and_values_are_refused_naming_what_was_expected() {
        for (words, says) in [
            (vec!["hz", "2"], "missing required key service"),
            (
                vec!["hz", "2", "service=lognormal(8ms,0.5)", "colour=red"],
                "unknown key 'colour'",
            ),
            (
                vec![
                    "hz",
                    "2",
                    "service=lognormal(8ms,0.5)",
                    "threads=2",
                    "threads=3",
                ],
                "given twice",
            ),
            (vec!["hz", "2", "service=normal(8ms)"], "expected lognormal"),
            (
                vec!["hz", "2", "service=lognormal(8ms,0.5)", "timeout=soon"],
                "timeout=soon",
            ),
            (
                vec!["hz", "2", "service=lognormal(8ms,0.5)", "api=http"],
                "native or nacos",
            ),
            (
                vec!["hz", "zero", "service=lognormal(8ms,0.5)"],
                "count 'zero'",
            ),
        ] {
            let e = provider_group(&words).unwrap_err();
            assert!(e.contains(says), "{words:?}: {e}");
        }
        for (words, says) in [
            (vec!["hz", "2"], "missing required key rate"),
            (vec!["hz", "2", "rate=fast"], "calls per second"),
            (
                vec!["hz", "2", "rate=5/s", "strategy=failover"],
                "failover(RETRIES)",
            ),
            (
                vec!["hz", "2", "rate=5/s", "router=threshold(1,2)"],
                "threshold(FALL_COUNT",
            ),
            (vec!["hz", "2", "rate=5/s", "balancer=best"], "zone-first"),
            (
                vec!["hz", "2", "rate=5/s", "non-idempotent=120%"],
                "0% to 100%",
            ),
            (vec!["hz", "2", "rate=5/s", "breaker=yes"], "on or off"),
            (vec!["hz", "2", "rate=5/s", "nonsense"], "not key=value"),
        ] {
            let e = consumer_group(&words).unwrap_err();
            assert!(e.contains(says), "{words:?}: {e}");
        }
    }
}
