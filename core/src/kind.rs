//! Whether a service's instances are ephemeral or persistent: a leaf that
//! both instances and errors name.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Whether a service holds ephemeral or persistent instances. Fixed when the
/// service is created; the two never mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServiceKind {
    /// Instances live as long as their owner's connection or beats.
    Ephemeral,
    /// Instances live until deregistered.
    Persistent,
}

impl ServiceKind {
    /// `true` for [`ServiceKind::Ephemeral`].
    pub fn is_ephemeral(self) -> bool {
        self == ServiceKind::Ephemeral
    }
}

impl fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServiceKind::Ephemeral => "ephemeral",
            ServiceKind::Persistent => "persistent",
        })
    }
}
