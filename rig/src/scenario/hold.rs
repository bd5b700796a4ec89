//! The `hold` action: a client-race hold (docs/chaos.md, "Reproducing
//! client races") set on every running node through the chaos admin API,
//! so whichever node a Nacos client subscribes on holds its next request.
//!
//! ```text
//! at 10s hold providers:com.example.Greeter:: enable=10.0.0.7:20880 timeout=5s
//! at 10s hold orders group=shop namespace=dev
//! ```
//!
//! `enable=IP:PORT` or `disable=IP:PORT` is the instance update applied
//! while the request is held; without one the request waits for the
//! service's next change by anyone.

use std::fmt;
use std::time::Duration;

use understudy_server::faults::parse_duration;

/// A hold as the scenario sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The service whose subscription arms it.
    pub service: String,
    /// Its group, when not the default.
    pub group: Option<String>,
    /// Its namespace, when not the default.
    pub namespace: Option<String>,
    /// The instance update applied while holding: enabled or disabled,
    /// and the instance's address.
    pub set_enabled: Option<(bool, String, u16)>,
    /// How long a request is held at most (the node's default otherwise).
    pub timeout: Option<Duration>,
}

impl Hold {
    /// Reads `SERVICE [group=G] [namespace=N] [enable=IP:PORT|disable=IP:PORT] [timeout=D]`.
    pub(crate) fn parse(words: &[&str]) -> Result<Self, String> {
        const USAGE: &str =
            "expected: hold SERVICE [group=G] [namespace=N] [enable=IP:PORT|disable=IP:PORT] [timeout=D]";
        let Some((service, settings)) = words.split_first() else {
            return Err(USAGE.into());
        };
        let mut hold = Hold {
            service: (*service).to_owned(),
            group: None,
            namespace: None,
            set_enabled: None,
            timeout: None,
        };
        for setting in settings {
            match setting.split_once('=') {
                Some(("group", g)) if !g.is_empty() => hold.group = Some(g.to_owned()),
                Some(("namespace", n)) if !n.is_empty() => hold.namespace = Some(n.to_owned()),
                Some((verb @ ("enable" | "disable"), address)) if hold.set_enabled.is_none() => {
                    let (ip, port) = address
                        .rsplit_once(':')
                        .and_then(|(ip, port)| Some((ip, port.parse::<u16>().ok()?)))
                        .filter(|(ip, _)| !ip.is_empty())
                        .ok_or_else(|| format!("hold: '{address}' is not IP:PORT"))?;
                    hold.set_enabled = Some((verb == "enable", ip.to_owned(), port));
                }
                Some(("timeout", d)) => {
                    hold.timeout =
                        Some(parse_duration(d).map_err(|e| format!("hold: timeout {e}"))?);
                }
                _ => {
                    return Err(format!(
                        "hold: '{setting}' is not one of the settings; {USAGE}"
                    ))
                }
            }
        }
        Ok(hold)
    }

    /// The chaos API's parameters for it (`POST /understudy/v1/chaos/hold`).
    pub fn form(&self) -> Vec<(&'static str, String)> {
        let mut form = vec![("serviceName", self.service.clone())];
        if let Some(group) = &self.group {
            form.push(("groupName", group.clone()));
        }
        if let Some(namespace) = &self.namespace {
            form.push(("namespaceId", namespace.clone()));
        }
        if let Some((enabled, ip, port)) = &self.set_enabled {
            form.push(("ip", ip.clone()));
            form.push(("port", port.to_string()));
            form.push(("enabled", enabled.to_string()));
        }
        if let Some(timeout) = self.timeout {
            form.push(("timeout", format!("{}ms", timeout.as_millis())));
        }
        form
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hold {}", self.service)?;
        if let Some(group) = &self.group {
            write!(f, " group={group}")?;
        }
        if let Some(namespace) = &self.namespace {
            write!(f, " namespace={namespace}")?;
        }
        if let Some((enabled, ip, port)) = &self.set_enabled {
            let verb = if *enabled { "enable" } else { "disable" };
            write!(f, " {verb}={ip}:{port}")?;
        }
        if let Some(timeout) = self.timeout {
            write!(f, " timeout={}ms", timeout.as_millis())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_reads_back_as_written_and_becomes_the_apis_parameters() {
        let line = "providers:com.example.Greeter:: group=shop enable=10.0.0.7:20880 timeout=5s";
        let words: Vec<&str> = line.split_whitespace().collect();
        let hold = Hold::parse(&words).unwrap();
        assert_eq!(
            hold.to_string(),
            "hold providers:com.example.Greeter:: group=shop enable=10.0.0.7:20880 timeout=5000ms"
        );
        assert_eq!(
            hold.form(),
            [
                ("serviceName", "providers:com.example.Greeter::".to_owned()),
                ("groupName", "shop".to_owned()),
                ("ip", "10.0.0.7".to_owned()),
                ("port", "20880".to_owned()),
                ("enabled", "true".to_owned()),
                ("timeout", "5000ms".to_owned()),
            ]
        );
        assert_eq!(
            Hold::parse(&["orders"]).unwrap().form(),
            [("serviceName", "orders".to_owned())]
        );
    }

    #[test]
    fn a_wrong_hold_names_what_is_wrong() {
        for (words, wanted) in [
            (&[][..], "expected: hold SERVICE"),
            (&["s", "enable=10.0.0.7"][..], "'10.0.0.7' is not IP:PORT"),
            (&["s", "enable=:80"][..], "':80' is not IP:PORT"),
            (
                &["s", "enable=a:1", "disable=b:2"][..],
                "'disable=b:2' is not one of",
            ),
            (&["s", "timeout=soon"][..], "hold: timeout"),
            (&["s", "colour=red"][..], "'colour=red' is not one of"),
        ] {
            let error = Hold::parse(words).unwrap_err();
            assert!(error.contains(wanted), "{words:?}: {error}");
        }
    }
}
