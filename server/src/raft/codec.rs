//! The bytes of raft: every entry, RPC and snapshot is postcard behind one
//! format version byte, so a node refuses data from a newer format by name
//! instead of misreading it, and reads the older formats it knows.

use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

/// The format this build writes.
pub const FORMAT: u8 = 6;

/// Older formats this build reads as [`FORMAT`]: formats 4, 5 and 6 each
/// added commands at the end of `Op` (4 and 5 fields to the snapshot
/// too), so every format-3, 4 and 5 entry and message means the same in
/// format 6; the format-3 and 4 snapshot bodies are read by `snapshot.rs`.
const READS: &[u8] = &[3, 4, 5];

/// Why bytes could not be decoded.
#[derive(Debug, Error)]
pub enum CodecError {
    /// Nothing to decode.
    #[error("empty raft payload")]
    Empty,
    /// Written by another format version.
    #[error("raft payload format {found} is not this build's format {FORMAT}")]
    Version {
        /// The version byte found.
        found: u8,
    },
    /// Not valid postcard for the expected type.
    #[error("corrupt raft payload: {0}")]
    Corrupt(#[from] postcard::Error),
}

/// Encodes a value behind the version byte.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut bytes = vec![FORMAT];
    postcard::to_io(value, &mut bytes).map_err(CodecError::Corrupt)?;
    Ok(bytes)
}

/// Decodes a value written by [`encode`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    match bytes.split_first() {
        None => Err(CodecError::Empty),
        Some((&found, body)) if found == FORMAT || READS.contains(&found) => {
            Ok(postcard::from_bytes(body)?)
        }
        Some((&found, _)) => Err(CodecError::Version { found }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_round_trips_and_another_format_is_refused_by_number() {
        let bytes = encode(&(7u64, "x".to_owned())).unwrap();
        assert_eq!(bytes[0], FORMAT);
        assert_eq!(decode::<(u64, String)>(&bytes).unwrap(), (7, "x".into()));
        let mut newer = bytes.clone();
        newer[0] = FORMAT + 1;
        assert!(matches!(
            decode::<(u64, String)>(&newer),
            Err(CodecError::Version { found }) if found == FORMAT + 1
        ));
        assert!(matches!(decode::<u64>(&[]), Err(CodecError::Empty)));
        let mut older = bytes.clone();
        older[0] = 3;
        assert_eq!(decode::<(u64, String)>(&older).unwrap(), (7, "x".into()));
        assert!(matches!(
            decode::<(u64, String)>(&[FORMAT, 0xff]),
            Err(CodecError::Corrupt(_))
        ));
    }
}
