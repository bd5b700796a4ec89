//! The bytes of raft: every entry, RPC and snapshot is postcard behind one
//! format version byte, so a node refuses data from a newer format by name
//! instead of misreading it, and reads the older formats it knows.

use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

/// The format this build writes.
pub const FORMAT: u8 = 8;

/// Older formats this build reads as [`FORMAT`]: formats 4, 5 and 6 each
/// added commands at the end of `Op` (4 and 5 fields to the snapshot
/// too), so every format-3, 4 and 5 entry and message means the same in
/// format 6; the format-3 and 4 snapshot bodies are read by `snapshot.rs`.
/// Format 7 added the joined parts at the end of a batch, which a batch
/// of an older format reads as none ([`reading_before`]). Format 8
/// writes an instance id that is the generated one as empty (it is derived
/// when rendered); the full ids older formats wrote are recognised as
/// generated when a snapshot is restored, so both read the same.
const READS: &[u8] = &[3, 4, 5, 6, 7];

std::thread_local! {
    /// The format of the payload being decoded on this thread.
    static READING: std::cell::Cell<u8> = const { std::cell::Cell::new(FORMAT) };
}

/// Whether the payload being decoded was written before `format`: how a
/// type whose fields grew reads its older form (postcard data does not
/// say which fields it holds).
pub(crate) fn reading_before(format: u8) -> bool {
    READING.with(|r| r.get() < format)
}

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
            let before = READING.with(|r| r.replace(found));
            let decoded = postcard::from_bytes(body);
            READING.with(|r| r.set(before));
            Ok(decoded?)
        }
        Some((&found, _)) => Err(CodecError::Version { found }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_written_before_format_7_reads_with_no_joined_parts() {
        use super::super::{Batch, Joined};
        // Format 6 wrote (origin, seq, commands, stamp_ms): two in a row,
        // as in an append, so a misread would take the next one's bytes.
        let old = vec![
            (2u64, 5u64, Vec::<understudy_core::Command>::new(), 9u64),
            (3, 6, Vec::new(), 10),
        ];
        let mut bytes = vec![6];
        postcard::to_io(&old, &mut bytes).unwrap();
        let read: Vec<Batch> = decode(&bytes).unwrap();
        let seen: Vec<_> = read
            .iter()
            .map(|b| (b.origin, b.seq, b.stamp_ms, b.joined.len()))
            .collect();
        assert_eq!(seen, vec![(2, 5, 9, 0), (3, 6, 10, 0)]);
        // Format 7 keeps them.
        let mut joined = read[0].clone();
        joined.joined.push(Joined {
            origin: 3,
            seq: 1,
            count: 0,
        });
        assert_eq!(decode::<Batch>(&encode(&joined).unwrap()).unwrap(), joined);
    }

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
