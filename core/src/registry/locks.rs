//! The locks aggregate: Nacos 3's distributed locks. A lock is a name (its
//! type and key) held until it is released or its expiry passes; the
//! expiry is an instant on the leader's clock (the command's timestamp
//! plus the time asked for), so every replica decides alike. A lock has no
//! owner, as in Nacos: whoever releases a held lock releases it, and a
//! client's connection closing leaves its locks to expire.

use crate::{Error, Millis};

use super::{Registry, Tx};

/// A lock's name: its type (`NACOS_LOCK`) and key.
pub type LockName = (String, String);

impl Registry {
    /// Takes the lock unless it is held and not yet expired.
    pub(super) fn acquire_lock(
        &mut self,
        tx: &Tx,
        name: &LockName,
        expires_at: Millis,
    ) -> Result<(), Error> {
        match self.locks.get(name) {
            Some(&held) if held > tx.at => Err(Error::LockHeld {
                key: name.1.clone(),
                until: held,
            }),
            _ => {
                self.locks.insert(name.clone(), expires_at);
                Ok(())
            }
        }
    }

    /// Releases the lock; refused when it is not held (an expired lock
    /// nobody took again still counts as held, as in Nacos).
    pub(super) fn release_lock(&mut self, name: &LockName) -> Result<(), Error> {
        match self.locks.remove(name) {
            Some(_) => Ok(()),
            None => Err(Error::LockNotHeld {
                key: name.1.clone(),
            }),
        }
    }

    /// Forgets locks whose expiry passed before `now`.
    pub(super) fn drop_expired_locks(&mut self, now: Millis) {
        self.locks.retain(|_, expires_at| *expires_at > now);
    }

    /// Whether `name` is held at `now`, and until when.
    pub fn lock_held(&self, name: &LockName, now: Millis) -> Option<Millis> {
        self.locks.get(name).copied().filter(|until| *until > now)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Command, Error, Op, Registry, RegistryOptions};

    fn acquire(registry: &mut Registry, at: u64, until: u64) -> Result<(), Error> {
        let op = Op::AcquireLock {
            kind: "NACOS_LOCK".into(),
            key: "job".into(),
            ttl: until - at,
        };
        registry.apply(&Command::new(at, op)).map(drop)
    }

    fn release(registry: &mut Registry, at: u64) -> Result<(), Error> {
        let op = Op::ReleaseLock {
            kind: "NACOS_LOCK".into(),
            key: "job".into(),
        };
        registry.apply(&Command::new(at, op)).map(drop)
    }

    #[test]
    fn a_lock_is_held_until_released_or_expired() {
        let mut registry = Registry::new(RegistryOptions::default());
        acquire(&mut registry, 1_000, 2_000).unwrap();
        assert!(matches!(
            acquire(&mut registry, 1_500, 9_000),
            Err(Error::LockHeld { until: 2_000, .. })
        ));
        release(&mut registry, 1_600).unwrap();
        assert!(matches!(
            release(&mut registry, 1_700),
            Err(Error::LockNotHeld { .. })
        ));
        acquire(&mut registry, 1_800, 3_000).unwrap();
        // Expired at 3 000: the next acquire takes it.
        acquire(&mut registry, 3_000, 4_000).unwrap();
        let name = ("NACOS_LOCK".to_owned(), "job".to_owned());
        assert_eq!(registry.lock_held(&name, 3_500), Some(4_000));
        assert_eq!(registry.lock_held(&name, 4_000), None);
    }

    #[test]
    fn locks_survive_a_snapshot() {
        let mut registry = Registry::new(RegistryOptions::default());
        acquire(&mut registry, 1_000, 5_000).unwrap();
        let restored = Registry::restore(registry.snapshot(), RegistryOptions::default());
        let name = ("NACOS_LOCK".to_owned(), "job".to_owned());
        assert_eq!(restored.lock_held(&name, 2_000), Some(5_000));
    }
}
