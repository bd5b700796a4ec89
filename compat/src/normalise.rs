//! The one place where answers are normalised before they are compared.
//! Each rule names the exact field paths it touches and why; nothing else
//! is changed. A path is the answer's JSON (`status`, `contentType`,
//! `kind`, `body`) walked by key, `*` standing for any one key or array
//! index and `**` for any number of them.

use serde_json::Value;

/// What a rule does to the values its path matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Replace the value by this marker (a missing field stays missing).
    Replace(&'static str),
    /// Sort the array: the server keeps these items in a hash map, so
    /// their order says nothing.
    Sort,
    /// In an object, one field under two spellings (`.0` as Nacos 2
    /// spells it, `.1` as Nacos 3 does) is kept once, under `.0`, when
    /// both carry the same value; different values stay apart.
    Spellings(&'static str, &'static str),
}

/// One normalisation.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Where it applies.
    pub path: &'static str,
    /// What it does.
    pub action: Action,
    /// Why the value differs by nature between servers and runs.
    pub reason: &'static str,
}

/// Every rule, applied to the recorded and the replayed answer alike.
pub const RULES: &[Rule] = &[
    Rule {
        path: "body.requestId",
        action: Action::Replace("<request>"),
        reason: "a push's id is the server's own counter",
    },
    Rule {
        path: "body.pageItems.*.id",
        action: Action::Replace("<id>"),
        reason: "a history entry's id is a database sequence",
    },
    Rule {
        path: "body.**.lastRefTime",
        action: Action::Replace("<time>"),
        reason: "a ServiceInfo's render time on the server's clock",
    },
    Rule {
        path: "body.**.checksum",
        action: Action::Replace("<checksum>"),
        reason: "a ServiceInfo's checksum hashes its render time too",
    },
    Rule {
        path: "body.**.lastBeat",
        action: Action::Replace("<time>"),
        reason: "an instance's last beat on the server's clock",
    },
    Rule {
        path: "body.**.lastModified",
        action: Action::Replace("<time>"),
        reason: "a config's write time",
    },
    Rule {
        path: "body.**.lastModifiedTime",
        action: Action::Replace("<time>"),
        reason: "a config's write time (v3 answers)",
    },
    Rule {
        path: "body.**.modifyTime",
        action: Action::Replace("<time>"),
        reason: "a config's write time (v2 and v3 answers)",
    },
    Rule {
        path: "body.**.createTime",
        action: Action::Replace("<time>"),
        reason: "a config's creation time",
    },
    Rule {
        path: "body.**.serverTime",
        action: Action::Replace("<time>"),
        reason: "the server's clock",
    },
    Rule {
        path: "body.**.connectionId",
        action: Action::Replace("<connection>"),
        reason: "a connection's id is made of the time and the client's port",
    },
    Rule {
        path: "body.**.accessToken",
        action: Action::Replace("<token>"),
        reason: "a signed token carries its issue time",
    },
    Rule {
        path: "body.**.hosts",
        action: Action::Sort,
        reason: "Nacos lists a service's instances in its hash map's order",
    },
    Rule {
        path: "body.doms",
        action: Action::Sort,
        reason: "Nacos lists a group's services (v1) in its hash set's order",
    },
    Rule {
        path: "body.serviceNames",
        action: Action::Sort,
        reason: "Nacos lists a group's services (gRPC) in its hash set's order",
    },
    Rule {
        path: "body.**",
        action: Action::Spellings("allIPs", "allIps"),
        reason: "a ServiceInfo's flag is `allIPs` in Nacos 2 and `allIps` in Nacos 3; \
                 understudy sends both so that clients of either read it",
    },
    Rule {
        path: "body.id",
        action: Action::Replace("<id>"),
        reason: "a config's database id (v1 `show=all`)",
    },
    Rule {
        path: "body.data.id",
        action: Action::Replace("<id>"),
        reason: "a config's database id (v3 admin)",
    },
    Rule {
        path: "body.data.pageItems.*.id",
        action: Action::Replace("<id>"),
        reason: "a config's database id (v3 admin lists)",
    },
    Rule {
        path: "body.pageItems.*.createdTime",
        action: Action::Replace("<time>"),
        reason: "a history entry's creation time",
    },
    Rule {
        path: "body.timestamp",
        action: Action::Replace("<time>"),
        reason: "the time in a Spring error body",
    },
];

/// The answer with every rule applied.
pub fn normalise(mut answer: Value) -> Value {
    for rule in RULES {
        let pattern: Vec<&str> = rule.path.split('.').collect();
        apply(&mut answer, &pattern, rule.action);
    }
    answer
}

fn apply(value: &mut Value, pattern: &[&str], action: Action) {
    let Some((first, rest)) = pattern.split_first() else {
        match action {
            Action::Replace(marker) => *value = Value::String(marker.to_owned()),
            Action::Sort => {
                if let Value::Array(items) = value {
                    items.sort_by_key(|v| v.to_string());
                }
            }
            Action::Spellings(kept, other) => {
                if let Value::Object(map) = value {
                    match (map.get(kept), map.get(other)) {
                        (Some(a), Some(b)) if a == b => {
                            map.remove(other);
                        }
                        (None, Some(_)) => {
                            let moved = map.remove(other).unwrap_or_default();
                            map.insert(kept.to_owned(), moved);
                        }
                        _ => {}
                    }
                }
            }
        }
        return;
    };
    if *first == "**" {
        // Zero segments here, or one more and still `**`.
        apply(value, rest, action);
        for child in children(value) {
            apply(child, pattern, action);
        }
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if *first == "*" || first == key {
                    apply(child, rest, action);
                }
            }
        }
        Value::Array(items) if *first == "*" => {
            for child in items {
                apply(child, rest, action);
            }
        }
        _ => {}
    }
}

fn children(value: &mut Value) -> Vec<&mut Value> {
    match value {
        Value::Object(map) => map.values_mut().collect(),
        Value::Array(items) => items.iter_mut().collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_named_paths_change() {
        let answer = json!({"status": 200, "body": {"lastRefTime": 5, "name": "a",
            "data": {"hosts": [{"ip": "b", "lastBeat": 1}, {"ip": "a"}], "lastRefTime": 7}}});
        assert_eq!(
            normalise(answer),
            json!({"status": 200, "body": {"lastRefTime": "<time>", "name": "a",
                "data": {"hosts": [{"ip": "a"}, {"ip": "b", "lastBeat": "<time>"}], "lastRefTime": "<time>"}}})
        );
    }

    #[test]
    fn one_field_under_two_spellings_is_compared_once() {
        let both = json!({"body": {"serviceInfo": {"allIPs": false, "allIps": false}}});
        let nacos3 = json!({"body": {"serviceInfo": {"allIps": false}}});
        assert_eq!(normalise(both), normalise(nacos3.clone()));
        let apart = json!({"body": {"allIPs": true, "allIps": false}});
        assert_eq!(normalise(apart.clone()), apart);
        assert_eq!(
            normalise(nacos3),
            json!({"body": {"serviceInfo": {"allIPs": false}}})
        );
    }
}
