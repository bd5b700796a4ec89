//! The memory behind the config read lag, a fault that gives a node Nacos'
//! read-after-write behaviour: Nacos serves config reads from a cache it
//! dumps asynchronously after each write, so a read made just after a
//! publish answers the previous state (not found for a new config, the
//! old content for an update, the removed content after a delete). With
//! a lag L set for its DC, a node remembers, for each config a batch
//! writes, what a formal read answered before the write and when the
//! write was applied; for L after it, formal reads answer that. This
//! module only keeps and consults that memory: the view hands it the
//! lag and the time, and nothing here reads a clock or the fault model.
//! Gray releases, listeners, long polling and pushes never come here.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use understudy_core::{Command, ConfigItem, ConfigKey, Millis, Op};

/// What formal reads of recently written configs answered before each
/// write, kept while some read must still answer it.
#[derive(Debug, Default)]
pub(crate) struct ReadLag {
    /// Per config, its writes not yet seen by reads, oldest first.
    writes: HashMap<ConfigKey, VecDeque<Write>>,
}

#[derive(Debug)]
struct Write {
    /// When it was applied on this node, epoch ms on the node's clock.
    at: Millis,
    /// What a formal read answered just before it.
    before: Option<Arc<ConfigItem>>,
}

/// The configs whose formal content `commands` publish or remove, each
/// once (gray releases are not formal content and are not lagged).
pub(crate) fn formal_writes(commands: &[Command]) -> BTreeSet<&ConfigKey> {
    let mut keys = BTreeSet::new();
    for command in commands {
        match &command.op {
            Op::PublishConfig { key, .. }
            | Op::RemoveConfig { key }
            | Op::PublishConfigFrom { key, .. }
            | Op::RemoveConfigFrom { key, .. } => {
                keys.insert(key);
            }
            Op::WriteConfigs {
                publish, remove, ..
            } => {
                keys.extend(publish.iter().map(|(key, _)| key));
                keys.extend(remove);
            }
            _ => {}
        }
    }
    keys
}

impl ReadLag {
    /// Whether nothing is remembered, so every read answers what is
    /// applied.
    pub(crate) fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Remembers writes applied at `at`, each with what a formal read
    /// answered before it, and forgets what a lag of `lag` ms no longer
    /// hides. Without a lag nothing is kept.
    pub(crate) fn remember(
        &mut self,
        before: impl IntoIterator<Item = (ConfigKey, Option<Arc<ConfigItem>>)>,
        at: Millis,
        lag: Millis,
    ) {
        self.forget(at, lag);
        if lag == 0 {
            return;
        }
        for (key, before) in before {
            self.writes
                .entry(key)
                .or_default()
                .push_back(Write { at, before });
        }
    }

    /// What a formal read of `key` answers at `now` under a lag of `lag`
    /// ms, `current` being the content applied: what it answered before
    /// the oldest write not yet `lag` old, else `current`. So with several
    /// writes inside the lag, a read answers the content after the newest
    /// write it may see.
    pub(crate) fn read(
        &mut self,
        key: &ConfigKey,
        current: Option<Arc<ConfigItem>>,
        now: Millis,
        lag: Millis,
    ) -> Option<Arc<ConfigItem>> {
        self.forget(now, lag);
        match self.writes.get(key).and_then(VecDeque::front) {
            Some(hidden) => hidden.before.clone(),
            None => current,
        }
    }

    /// Drops the writes that reads at `now` see (all of them without a
    /// lag).
    fn forget(&mut self, now: Millis, lag: Millis) {
        if lag == 0 {
            self.writes.clear();
            return;
        }
        self.writes.retain(|_, writes| {
            // Applied in order on one clock, so the seen ones lead.
            while writes
                .front()
                .is_some_and(|w| w.at.saturating_add(lag) <= now)
            {
                writes.pop_front();
            }
            !writes.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use understudy_core::{ConfigSource, ConfigSpec, Registry, RegistryOptions};

    use super::*;

    const LAG: Millis = 500;

    fn key(data_id: &str) -> ConfigKey {
        ConfigKey::parse("", "g", data_id).unwrap()
    }

    fn publish(data_id: &str, content: &str) -> Op {
        Op::PublishConfig {
            key: key(data_id),
            spec: ConfigSpec {
                content: content.to_owned(),
                kind: "text".to_owned(),
                ..ConfigSpec::default()
            },
            cas_md5: None,
        }
    }

    /// A registry and the read lag's memory, fed as the state machine
    /// feeds them: what reads answer is remembered, then the batch is
    /// applied.
    struct Node {
        registry: Registry,
        lag: ReadLag,
    }

    impl Node {
        fn new() -> Self {
            Self {
                registry: Registry::new(RegistryOptions::default()),
                lag: ReadLag::default(),
            }
        }

        fn apply(&mut self, at: Millis, lag: Millis, ops: Vec<Op>) {
            let commands: Vec<Command> = ops.into_iter().map(|op| Command::new(at, op)).collect();
            let before: Vec<_> = formal_writes(&commands)
                .into_iter()
                .map(|k| (k.clone(), self.registry.config(k)))
                .collect();
            self.lag.remember(before, at, lag);
            for command in &commands {
                // A refused command is a write that changed nothing.
                let _ = self.registry.apply(command);
            }
        }

        fn read(&mut self, data_id: &str, now: Millis, lag: Millis) -> Option<String> {
            let key = key(data_id);
            let current = self.registry.config(&key);
            self.lag
                .read(&key, current, now, lag)
                .map(|item| item.content.clone())
        }
    }

    #[test]
    fn a_new_config_is_not_found_until_the_lag_has_passed() {
        let mut node = Node::new();
        node.apply(1_000, LAG, vec![publish("a", "v1")]);
        assert_eq!(node.read("a", 1_000, LAG), None, "at once");
        assert_eq!(node.read("a", 1_499, LAG), None, "just inside the lag");
        assert_eq!(node.read("a", 1_500, LAG).as_deref(), Some("v1"));
        assert!(node.lag.is_empty(), "a seen write is forgotten");
        assert_eq!(
            node.read("b", 1_000, LAG),
            None,
            "an unwritten config is just absent"
        );
    }

    #[test]
    fn an_update_answers_the_old_item_whole_and_a_delete_the_removed_one() {
        let mut node = Node::new();
        node.apply(1_000, LAG, vec![publish("a", "v1")]);
        let old = node.registry.config(&key("a")).unwrap();
        node.apply(2_000, LAG, vec![publish("a", "v2")]);
        let seen = node
            .lag
            .read(&key("a"), node.registry.config(&key("a")), 2_100, LAG)
            .unwrap();
        assert!(
            Arc::ptr_eq(&seen, &old),
            "the old item: content, md5, type and lastModified"
        );
        assert_eq!(node.read("a", 2_500, LAG).as_deref(), Some("v2"));

        node.apply(
            3_000,
            LAG,
            vec![Op::RemoveConfigFrom {
                key: key("a"),
                source: ConfigSource::default(),
            }],
        );
        assert_eq!(node.read("a", 3_200, LAG).as_deref(), Some("v2"));
        assert_eq!(node.read("a", 3_500, LAG), None);
    }

    #[test]
    fn with_several_writes_inside_the_lag_a_read_answers_the_newest_it_may_see() {
        let mut node = Node::new();
        node.apply(1_000, LAG, vec![publish("a", "v1")]);
        node.apply(1_200, LAG, vec![publish("a", "v2")]);
        node.apply(1_400, LAG, vec![publish("a", "v3")]);
        assert_eq!(node.read("a", 1_400, LAG), None, "before the first");
        assert_eq!(node.read("a", 1_500, LAG).as_deref(), Some("v1"));
        assert_eq!(node.read("a", 1_700, LAG).as_deref(), Some("v2"));
        assert_eq!(node.read("a", 1_900, LAG).as_deref(), Some("v3"));
    }

    #[test]
    fn a_batch_is_one_write_and_gray_releases_are_not_lagged() {
        let mut node = Node::new();
        node.apply(1_000, LAG, vec![publish("a", "v1")]);
        node.apply(2_000, LAG, vec![publish("a", "v2"), publish("a", "v3")]);
        assert_eq!(node.read("a", 2_000, LAG).as_deref(), Some("v1"));
        assert_eq!(node.read("a", 2_500, LAG).as_deref(), Some("v3"));

        let gray = Op::PublishConfigGray {
            key: key("a"),
            rule: understudy_core::GrayRule::Tag { tag: "t".into() },
            spec: ConfigSpec {
                content: "gray".into(),
                ..ConfigSpec::default()
            },
            source: ConfigSource::default(),
        };
        let commands = [Command::new(3_000, gray)];
        assert!(formal_writes(&commands).is_empty());
        let write = Command::new(
            3_000,
            Op::WriteConfigs {
                expect: Vec::new(),
                publish: vec![(key("x"), ConfigSpec::default())],
                remove: vec![key("y"), key("x")],
            },
        );
        let written: Vec<_> = formal_writes(std::slice::from_ref(&write))
            .into_iter()
            .cloned()
            .collect();
        assert_eq!(written, [key("x"), key("y")], "an AI release's items");
    }

    #[test]
    fn without_a_lag_nothing_is_remembered_and_removing_it_forgets() {
        let mut node = Node::new();
        node.apply(1_000, 0, vec![publish("a", "v1")]);
        assert!(node.lag.is_empty());
        assert_eq!(node.read("a", 1_000, 0).as_deref(), Some("v1"));

        node.apply(2_000, LAG, vec![publish("a", "v2")]);
        assert_eq!(node.read("a", 2_000, LAG).as_deref(), Some("v1"));
        assert_eq!(
            node.read("a", 2_000, 0).as_deref(),
            Some("v2"),
            "a lag removed shows what is applied at once"
        );
        assert!(node.lag.is_empty());
    }
}
