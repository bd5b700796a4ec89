//! The cluster secret: the value every raft call carries as metadata,
//! checked in constant time, never shown by `Debug`.

use std::fmt;

use thiserror::Error;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};

use super::SECRET_METADATA;

/// The shared secret every raft call carries; its `Debug` never shows it.
#[derive(Clone)]
pub struct ClusterSecret(pub(super) AsciiMetadataValue);

/// A secret that cannot travel as gRPC metadata.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the cluster secret must be non-empty visible ASCII (it travels as gRPC metadata)")]
pub struct InvalidSecret;

impl ClusterSecret {
    /// Checks that `secret` can travel as metadata.
    pub fn new(secret: &str) -> Result<Self, InvalidSecret> {
        if secret.is_empty() || !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(InvalidSecret);
        }
        AsciiMetadataValue::try_from(secret)
            .map(Self)
            .map_err(|_| InvalidSecret)
    }

    /// Whether `metadata` carries this secret. Compares in time independent
    /// of where the bytes differ (`subtle`), so a peer cannot guess it
    /// byte by byte.
    pub(super) fn is_in(&self, metadata: &MetadataMap) -> bool {
        metadata
            .get(SECRET_METADATA)
            .is_some_and(|given| secret_matches(self.0.as_bytes(), given.as_bytes()))
    }
}

/// Whether `given` is the secret `want`, compared in constant time.
pub(crate) fn secret_matches(want: &[u8], given: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    want.ct_eq(given).into()
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}
