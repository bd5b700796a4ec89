//! Routers: each narrows the list of instances a call may go to, in the
//! order they were configured, and says why. A router that leaves nothing
//! fails the call with its reason instead of handing an empty list on,
//! so "no provider" always names the step that caused it. Routers see
//! only healthy, enabled instances; they never pick one (that is the
//! balancer's job) and never call anything.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::time::Instant;

use super::{Invocation, Target, GROUP, TAG, VERSION};
use crate::ClientError;

/// What a router may use besides the targets and the invocation.
#[derive(Debug)]
pub struct RouteContext<'a> {
    /// The time of the call.
    pub now: Instant,
    /// The caller's zone: the invocation's `zone` attachment, else the
    /// cluster's configured zone.
    pub local_zone: Option<&'a str>,
    /// Each router's decision, in order, for the call's span and metrics.
    pub decisions: Vec<Decision>,
}

/// One router's explained decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The router.
    pub router: &'static str,
    /// The zone the call is sent to, when a zone router decided one
    /// (`*` for all zones).
    pub zone: Option<String>,
    /// Why, in a word or two (a metrics label).
    pub reason: &'static str,
}

/// Why a router leaves a call no target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Strict zone mode, and the caller's zone has no available instance.
    #[error("strict mode and zone {zone} has no available instance ({listed} listed there, {elsewhere} available in other zones)")]
    ZoneUnavailable {
        /// The caller's zone.
        zone: String,
        /// Instances listed there.
        listed: usize,
        /// Instances available in the other zones.
        elsewhere: usize,
    },
    /// No instance carries the call's tag, and the tag is forced.
    #[error("no instance is tagged {tag:?} (force)")]
    TagForced {
        /// The call's tag.
        tag: String,
    },
    /// No instance carries the call's tag, and none is untagged either.
    #[error("no instance is tagged {tag:?} and none is untagged")]
    TagMissing {
        /// The call's tag.
        tag: String,
    },
    /// The call has no tag, and every instance has one.
    #[error("the call has no tag and every instance is tagged")]
    AllTagged,
    /// A condition rule without a `then` side matches the call.
    #[error("rule {rule:?} bans every instance for this call")]
    Banned {
        /// The rule.
        rule: String,
    },
    /// A forced condition rule matches the call and no instance.
    #[error("rule {rule:?} leaves no instance (force)")]
    RuleLeavesNone {
        /// The rule.
        rule: String,
    },
    /// No instance has the version and group the consumer asks for.
    #[error(
        "no instance of version {version:?} and group {group:?} (version/group listed: {listed})"
    )]
    VersionMissing {
        /// The version asked for.
        version: String,
        /// The group asked for.
        group: String,
        /// The version/group pairs listed, comma-separated.
        listed: String,
    },
}

/// Narrows a list of targets.
pub trait Router: Send + Sync + std::fmt::Debug {
    /// The router's name, for errors, spans and metrics.
    fn name(&self) -> &'static str;

    /// Whether the zone-aware strategy skips this router for its one
    /// cross-zone attempt (a zone router that may fall back anyway).
    fn bypassed_across(&self) -> bool {
        false
    }

    /// The targets the call may go to, or why there are none.
    fn route(
        &self,
        targets: Vec<Target>,
        invocation: &Invocation,
        cx: &mut RouteContext<'_>,
    ) -> Result<Vec<Target>, RouteError>;
}

/// A level of local availability: a count and a share of all available
/// instances.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Level {
    /// Available instances in the local zone.
    pub count: usize,
    /// Local available instances over all available ones, 0..=1.
    pub share: f64,
}

/// How the zone router treats the caller's zone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ZoneMode {
    /// Local zone only, all zones when it has no available instance.
    PreferLocal,
    /// Local zone only; no provider when it has none.
    Strict,
    /// Local zone only while it has enough: all zones once local
    /// availability drops below `fall_below` (either count or share), and
    /// back to local only once it reaches `recover_at` (both), so a zone
    /// hovering at the edge does not flap.
    Threshold {
        /// Below this, fall back to all zones.
        fall_below: Level,
        /// At or above this, go back to the local zone.
        recover_at: Level,
    },
}

/// Keeps calls in the caller's zone (seed 000's zone-aware router).
/// Availability counts instances whose circuit breaker lets calls through.
#[derive(Debug)]
pub struct ZoneRouter {
    mode: ZoneMode,
    /// Per zone: whether the threshold mode has fallen back to all zones.
    fallen_back: Mutex<HashMap<String, bool>>,
}

impl ZoneRouter {
    /// A zone router; a threshold whose recovery level is below its fall
    /// level is refused.
    pub fn new(mode: ZoneMode) -> Result<Self, ClientError> {
        if let ZoneMode::Threshold {
            fall_below,
            recover_at,
        } = mode
        {
            let valid_share = |s: f64| (0.0..=1.0).contains(&s);
            if !valid_share(fall_below.share) || !valid_share(recover_at.share) {
                return Err(ClientError::Config {
                    message: "zone threshold shares must lie in 0..=1".into(),
                });
            }
            if recover_at.count < fall_below.count || recover_at.share < fall_below.share {
                return Err(ClientError::Config {
                    message: "zone threshold recover_at must be at least fall_below (hysteresis)"
                        .into(),
                });
            }
        }
        Ok(Self {
            mode,
            fallen_back: Mutex::new(HashMap::new()),
        })
    }

    /// Prefer the local zone, fall back to all zones when it is empty.
    pub fn prefer_local() -> Self {
        Self {
            mode: ZoneMode::PreferLocal,
            fallen_back: Mutex::new(HashMap::new()),
        }
    }

    fn decide(&self, cx: &mut RouteContext<'_>, zone: &str, reason: &'static str) {
        cx.decisions.push(Decision {
            router: self.name(),
            zone: Some(zone.to_owned()),
            reason,
        });
    }
}

impl Router for ZoneRouter {
    fn name(&self) -> &'static str {
        "zone"
    }

    fn bypassed_across(&self) -> bool {
        // Strict means never across, whatever the strategy.
        self.mode != ZoneMode::Strict
    }

    fn route(
        &self,
        targets: Vec<Target>,
        _invocation: &Invocation,
        cx: &mut RouteContext<'_>,
    ) -> Result<Vec<Target>, RouteError> {
        let Some(zone) = cx.local_zone.map(str::to_owned) else {
            self.decide(cx, "*", "caller-zone-unknown");
            return Ok(targets);
        };
        let now = cx.now;
        let available = |t: &Target| !t.stats.breaker().is_ejected(now);
        let total = targets.iter().filter(|t| available(t)).count();
        let (local, other): (Vec<Target>, Vec<Target>) =
            targets.into_iter().partition(|t| t.zone() == zone);
        let local_available = local.iter().filter(|t| available(t)).count();
        let all = || {
            local
                .iter()
                .chain(other.iter())
                .cloned()
                .collect::<Vec<_>>()
        };
        match self.mode {
            ZoneMode::PreferLocal => {
                if local_available > 0 {
                    self.decide(cx, &zone, "local");
                    Ok(local)
                } else {
                    self.decide(cx, "*", "local-zone-empty");
                    Ok(all())
                }
            }
            ZoneMode::Strict => {
                if local_available > 0 {
                    self.decide(cx, &zone, "local");
                    Ok(local)
                } else {
                    Err(RouteError::ZoneUnavailable {
                        listed: local.len(),
                        elsewhere: total - local_available,
                        zone,
                    })
                }
            }
            ZoneMode::Threshold {
                fall_below,
                recover_at,
            } => {
                let share = if total == 0 {
                    0.0
                } else {
                    local_available as f64 / total as f64
                };
                let mut fallen = self.fallen_back.lock().unwrap_or_else(|p| p.into_inner());
                let was_fallen = fallen.get(&zone).copied().unwrap_or(false);
                let below = local_available < fall_below.count || share < fall_below.share;
                let recovered = local_available >= recover_at.count && share >= recover_at.share;
                let now_fallen = if was_fallen { !recovered } else { below };
                fallen.insert(zone.clone(), now_fallen);
                drop(fallen);
                if now_fallen || local_available == 0 {
                    let reason = if was_fallen && now_fallen && !below {
                        "recovering"
                    } else {
                        "below-threshold"
                    };
                    self.decide(cx, "*", reason);
                    Ok(all())
                } else {
                    self.decide(cx, &zone, "local");
                    Ok(local)
                }
            }
        }
    }
}

/// Dubbo's tag routing: a call carrying a tag goes to instances with that
/// tag (or, unless forced, to untagged ones when none has it); a call
/// without a tag goes to untagged instances only.
#[derive(Debug, Clone)]
pub struct TagRouter {
    force: bool,
}

impl TagRouter {
    /// Falls back to untagged instances when none has the call's tag.
    pub fn new() -> Self {
        Self { force: false }
    }

    /// Fails the call when no instance has its tag.
    pub fn forced() -> Self {
        Self { force: true }
    }
}

impl Default for TagRouter {
    fn default() -> Self {
        Self::new()
    }
}

impl Router for TagRouter {
    fn name(&self) -> &'static str {
        "tag"
    }

    fn route(
        &self,
        targets: Vec<Target>,
        invocation: &Invocation,
        cx: &mut RouteContext<'_>,
    ) -> Result<Vec<Target>, RouteError> {
        let tag_of = |t: &Target| {
            t.instance
                .metadata
                .get(TAG)
                .filter(|v| !v.is_empty())
                .cloned()
        };
        let untagged = |targets: Vec<Target>| -> Vec<Target> {
            targets
                .into_iter()
                .filter(|t| tag_of(t).is_none())
                .collect()
        };
        let (kept, reason) = match invocation.attachment(TAG) {
            Some(tag) => {
                let tagged: Vec<Target> = targets
                    .iter()
                    .filter(|t| tag_of(t).as_deref() == Some(tag))
                    .cloned()
                    .collect();
                if !tagged.is_empty() {
                    (tagged, "tagged")
                } else if self.force {
                    return Err(RouteError::TagForced {
                        tag: tag.to_owned(),
                    });
                } else {
                    let rest = untagged(targets);
                    if rest.is_empty() {
                        return Err(RouteError::TagMissing {
                            tag: tag.to_owned(),
                        });
                    }
                    (rest, "tag-missing-untagged")
                }
            }
            None => {
                let rest = untagged(targets);
                if rest.is_empty() {
                    return Err(RouteError::AllTagged);
                }
                (rest, "untagged")
            }
        };
        cx.decisions.push(Decision {
            router: self.name(),
            zone: None,
            reason,
        });
        Ok(kept)
    }
}

/// A `*` glob: `*` matches any run of characters.
fn glob(pattern: &str, value: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == value;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !value.starts_with(first) || !value.ends_with(last) || value.len() < first.len() + last.len()
    {
        return false;
    }
    // Both ends matched whole, so these indexes fall on char boundaries.
    let mut rest = &value[first.len()..value.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `value` matches a comma-separated list of globs.
fn matches_any(patterns: &str, value: &str) -> bool {
    patterns.split(',').map(str::trim).any(|p| glob(p, value))
}

/// One `key = a,b*` or `key != a` test.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Condition {
    key: String,
    negated: bool,
    patterns: String,
}

impl Condition {
    fn holds(&self, value: Option<&str>) -> bool {
        let hit = value.is_some_and(|v| matches_any(&self.patterns, v));
        hit != self.negated
    }
}

fn parse_conditions(side: &str, rule: &str) -> Result<Vec<Condition>, ClientError> {
    let invalid = |why: String| ClientError::Config {
        message: format!("condition rule {rule:?}: {why}"),
    };
    side.split('&')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| {
            let (key, negated, patterns) = if let Some((k, v)) = c.split_once("!=") {
                (k, true, v)
            } else if let Some((k, v)) = c.split_once('=') {
                (k, false, v)
            } else {
                return Err(invalid(format!("{c:?} has no = or !=")));
            };
            let (key, patterns) = (key.trim(), patterns.trim());
            if key.is_empty() || patterns.is_empty() {
                return Err(invalid(format!("{c:?} needs a key and a value")));
            }
            Ok(Condition {
                key: key.to_owned(),
                negated,
                patterns: patterns.to_owned(),
            })
        })
        .collect()
}

/// Dubbo's condition routing: `when => then`. When every `when` test
/// holds for the call (`method`, `zone` or any attachment), only
/// instances passing every `then` test (`host`, `port`, `zone`, `cluster`
/// or any metadata key) are kept. An empty `when` matches every call; an
/// empty `then` bans every instance. If the filter leaves nothing the
/// list is kept as it was, unless the rule is forced.
#[derive(Debug, Clone)]
pub struct ConditionRouter {
    rule: String,
    when: Vec<Condition>,
    then: Option<Vec<Condition>>,
    force: bool,
}

impl ConditionRouter {
    /// Parses a rule such as `method = get* & zone = hz => zone = hz`.
    pub fn parse(rule: &str) -> Result<Self, ClientError> {
        let Some((when, then)) = rule.split_once("=>") else {
            return Err(ClientError::Config {
                message: format!("condition rule {rule:?} has no =>"),
            });
        };
        let then = then.trim();
        Ok(Self {
            rule: rule.trim().to_owned(),
            when: parse_conditions(when, rule)?,
            then: if then.is_empty() {
                None
            } else {
                Some(parse_conditions(then, rule)?)
            },
            force: false,
        })
    }

    /// Fails the call when the rule leaves no instance instead of
    /// ignoring the rule.
    pub fn forced(mut self) -> Self {
        self.force = true;
        self
    }
}

impl Router for ConditionRouter {
    fn name(&self) -> &'static str {
        "condition"
    }

    fn route(
        &self,
        targets: Vec<Target>,
        invocation: &Invocation,
        cx: &mut RouteContext<'_>,
    ) -> Result<Vec<Target>, RouteError> {
        let applies = self.when.iter().all(|c| {
            let value = match c.key.as_str() {
                "method" => Some(invocation.method.as_str()),
                "zone" => cx.local_zone,
                key => invocation.attachment(key),
            };
            c.holds(value)
        });
        if !applies {
            return Ok(targets);
        }
        let Some(then) = &self.then else {
            return Err(RouteError::Banned {
                rule: self.rule.clone(),
            });
        };
        let kept: Vec<Target> = targets
            .iter()
            .filter(|t| then.iter().all(|c| c.holds(t.attribute(&c.key).as_deref())))
            .cloned()
            .collect();
        let reason = if !kept.is_empty() {
            "rule-applied"
        } else if self.force {
            return Err(RouteError::RuleLeavesNone {
                rule: self.rule.clone(),
            });
        } else {
            "rule-ignored-empty"
        };
        cx.decisions.push(Decision {
            router: self.name(),
            zone: None,
            reason,
        });
        Ok(if kept.is_empty() { targets } else { kept })
    }
}

/// Version and group matching: the call's `version` and `group`
/// attachments (else the router's defaults) against the instances'
/// metadata. A pattern is a comma-separated list of globs; `*` matches
/// anything, including no value; no pattern matches only instances without
/// a value, as Dubbo treats version and group as part of the service key.
#[derive(Debug, Clone, Default)]
pub struct VersionGroupRouter {
    version: Option<String>,
    group: Option<String>,
}

impl VersionGroupRouter {
    /// Matches the calls' attachments, with these defaults.
    pub fn new(version: Option<&str>, group: Option<&str>) -> Self {
        Self {
            version: version.map(str::to_owned),
            group: group.map(str::to_owned),
        }
    }
}

impl Router for VersionGroupRouter {
    fn name(&self) -> &'static str {
        "version-group"
    }

    fn route(
        &self,
        targets: Vec<Target>,
        invocation: &Invocation,
        _cx: &mut RouteContext<'_>,
    ) -> Result<Vec<Target>, RouteError> {
        let version = invocation.attachment(VERSION).or(self.version.as_deref());
        let group = invocation.attachment(GROUP).or(self.group.as_deref());
        let fits = |pattern: Option<&str>, value: Option<&String>| {
            let value = value.map(String::as_str).unwrap_or("");
            match pattern {
                Some(p) => matches_any(p, value),
                None => value.is_empty(),
            }
        };
        let kept: Vec<Target> = targets
            .iter()
            .filter(|t| {
                fits(version, t.instance.metadata.get(VERSION))
                    && fits(group, t.instance.metadata.get(GROUP))
            })
            .cloned()
            .collect();
        if kept.is_empty() && !targets.is_empty() {
            let mut seen: Vec<String> = targets
                .iter()
                .map(|t| {
                    let v = t.instance.metadata.get(VERSION).map_or("", String::as_str);
                    let g = t.instance.metadata.get(GROUP).map_or("", String::as_str);
                    format!("{v}/{g}")
                })
                .collect();
            seen.sort();
            seen.dedup();
            return Err(RouteError::VersionMissing {
                version: version.unwrap_or("").to_owned(),
                group: group.unwrap_or("").to_owned(),
                listed: seen.join(", "),
            });
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_prefixes_suffixes_and_middles() {
        assert!(glob("*", ""));
        assert!(glob("get*", "getUser"));
        assert!(!glob("get*", "setUser"));
        assert!(glob("*User", "getUser"));
        assert!(glob("g*U*r", "getUser"));
        assert!(!glob("g*x*r", "getUser"));
        assert!(glob("10.0.*.1", "10.0.3.1"));
        assert!(!glob("ab*ba", "aba"));
        assert!(matches_any("1.0, 2.*", "2.3"));
        assert!(!matches_any("1.0,2.*", "3.0"));
    }

    #[test]
    fn a_rule_without_an_arrow_or_with_a_bare_key_is_refused() {
        assert!(ConditionRouter::parse("method = a").is_err());
        assert!(ConditionRouter::parse("method => zone = hz").is_err());
        assert!(ConditionRouter::parse("method = => zone = hz").is_err());
        assert!(ConditionRouter::parse(" => zone != hz").is_ok());
    }
}
