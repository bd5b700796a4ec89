//! The durable raft log as append-only segment files under `DATA_DIR/log/`,
//! each named by the index of its first entry (`00000000000000000001.log`).
//! A group of appends is one `write` and one `fdatasync`; a purge deletes
//! whole segments; a truncation cuts the segment holding its index and
//! deletes the ones after it. The commit point is a record of its own in
//! the same files, written with the next group of entries.
//!
//! A record is `len: u32 | crc32: u32 | kind: u8 | index: u64 | payload`
//! (little-endian; the checksum covers kind, index and payload). A crash
//! can leave the last segment's tail half written: that tail was never
//! synced, so never acknowledged, and opening cuts it off. A bad record
//! anywhere else is corruption, and the files are refused as they are.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The log's directory under the data dir.
pub const DIR_NAME: &str = "log";

/// A segment is closed, and the next one started, once it grows past this.
const SEGMENT_BYTES: u64 = 4 << 20;

/// `len`, `crc32`, `kind`, `index`.
const HEADER: usize = 4 + 4 + 1 + 8;

/// The largest record accepted when reading back (a length beyond it is a
/// torn or corrupt header, not a record).
const MAX_RECORD: u32 = 1 << 30;

const ENTRY: u8 = 1;
const COMMITTED: u8 = 2;

/// What opening the log found wrong.
#[derive(Debug, Error)]
pub enum SegmentError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A record before the last segment's tail does not check out.
    #[error("{path} is corrupt at byte {offset}: {what}")]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong with it.
        what: &'static str,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> SegmentError + '_ {
    move |source| SegmentError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What the files hold, in the order written.
#[derive(Debug, Default)]
pub struct Contents {
    /// Entries as (index, encoded entry), oldest first; a later record for
    /// an index replaces nothing here (truncation removed the earlier one
    /// from the file before it was written again).
    pub entries: Vec<(u64, Vec<u8>)>,
    /// The payload of the last commit-point record, if any.
    pub committed: Option<Vec<u8>>,
}

#[derive(Debug)]
struct Segment {
    /// Index of its first entry.
    first: u64,
    path: PathBuf,
}

/// The open log: its segments, the last one open for appending.
#[derive(Debug)]
pub struct Segments {
    dir: PathBuf,
    segments: Vec<Segment>,
    /// The last segment, open for appending, and its length.
    current: Option<(File, u64)>,
    /// Index of the last entry written, if any.
    last: Option<u64>,
    /// Records of one append, encoded before their single write.
    buffer: Vec<u8>,
}

impl Segments {
    /// Opens (or creates) the log under `data_dir` and reads it whole,
    /// cutting a torn tail off the last segment.
    pub fn open(data_dir: &Path) -> Result<(Segments, Contents), SegmentError> {
        let dir = data_dir.join(DIR_NAME);
        std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let mut segments = Vec::new();
        for item in std::fs::read_dir(&dir).map_err(io_at(&dir))? {
            let item = item.map_err(io_at(&dir))?;
            let name = item.file_name();
            let Some(first) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            segments.push(Segment {
                first,
                path: item.path(),
            });
        }
        segments.sort_by_key(|s| s.first);
        let mut read = Contents::default();
        let count = segments.len();
        let mut current = None;
        for (n, segment) in segments.iter().enumerate() {
            let is_last = n + 1 == count;
            let good = read_segment(&segment.path, is_last, &mut read)?;
            if is_last {
                let file = OpenOptions::new()
                    .read(true)
                    .append(true)
                    .open(&segment.path)
                    .map_err(io_at(&segment.path))?;
                let len = file.metadata().map_err(io_at(&segment.path))?.len();
                if len != good {
                    // The unsynced tail of the write a crash interrupted.
                    tracing::warn!(
                        segment = %segment.path.display(),
                        kept = good,
                        cut = len - good,
                        "cutting the raft log's torn tail"
                    );
                    file.set_len(good).map_err(io_at(&segment.path))?;
                    file.sync_all().map_err(io_at(&segment.path))?;
                }
                current = Some((file, good));
            }
        }
        let last = read.entries.last().map(|(index, _)| *index);
        Ok((
            Segments {
                dir,
                segments,
                current,
                last,
                buffer: Vec::new(),
            },
            read,
        ))
    }

    /// Appends `entries` (index, encoded entry; consecutive) and, if
    /// given, a commit-point record, with one write and one `fdatasync`.
    pub fn append(
        &mut self,
        entries: &[(u64, Vec<u8>)],
        committed: Option<&[u8]>,
    ) -> io::Result<()> {
        let Some((first, _)) = entries.first() else {
            return Ok(());
        };
        // A gap (everything before it purged, as after a snapshot is
        // installed) starts a segment of its own, so each segment's
        // entries run on from its name.
        let follows = self.last.is_some_and(|last| last + 1 == *first);
        let full = self
            .current
            .as_ref()
            .is_none_or(|(_, len)| *len >= SEGMENT_BYTES);
        if !follows || full {
            self.start_segment(*first)?;
        }
        self.buffer.clear();
        for (index, bytes) in entries {
            record(&mut self.buffer, ENTRY, *index, bytes);
        }
        if let Some(bytes) = committed {
            record(&mut self.buffer, COMMITTED, 0, bytes);
        }
        let (file, len) = self.current.as_mut().expect("a segment is open");
        file.write_all(&self.buffer)?;
        file.sync_data()?;
        *len += self.buffer.len() as u64;
        self.last = entries.last().map(|(index, _)| *index);
        Ok(())
    }

    /// Removes every entry from `index` on (durably).
    pub fn truncate(&mut self, index: u64) -> io::Result<()> {
        if self.last.is_none_or(|last| last < index) {
            return Ok(());
        }
        self.current = None;
        while self.segments.last().is_some_and(|s| s.first >= index) {
            let segment = self.segments.pop().expect("checked");
            std::fs::remove_file(&segment.path)?;
        }
        if let Some(segment) = self.segments.last() {
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .open(&segment.path)?;
            let cut = offset_of(&segment.path, index)?;
            file.set_len(cut)?;
            file.sync_all()?;
            self.current = Some((file, cut));
        }
        sync_dir(&self.dir)?;
        self.last = index.checked_sub(1).filter(|_| !self.segments.is_empty());
        Ok(())
    }

    /// Deletes the segments whose entries are all at or below `index`
    /// (the last segment stays, unless everything in it is purged too).
    pub fn purge(&mut self, index: u64) -> io::Result<()> {
        let mut removed = 0;
        while self.segments.len() > removed {
            let next_first = self.segments.get(removed + 1).map(|s| s.first);
            let all_purged = match next_first {
                Some(next) => next <= index + 1,
                None => self.last.is_some_and(|last| last <= index),
            };
            if !all_purged {
                break;
            }
            removed += 1;
        }
        if removed == 0 {
            return Ok(());
        }
        if removed == self.segments.len() {
            self.current = None;
            self.last = None;
        }
        for segment in self.segments.drain(..removed) {
            std::fs::remove_file(&segment.path)?;
        }
        sync_dir(&self.dir)
    }

    /// Syncs the current segment and opens a new one starting at `first`.
    fn start_segment(&mut self, first: u64) -> io::Result<()> {
        if let Some((file, _)) = self.current.take() {
            file.sync_data()?;
        }
        let path = self.dir.join(format!("{first:020}.log"));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        sync_dir(&self.dir)?;
        self.segments.push(Segment { first, path });
        self.current = Some((file, 0));
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The record's checksum: over its kind, index and payload.
fn checksum(kind: u8, index: u64, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[kind]);
    crc.update(&index.to_le_bytes());
    crc.update(payload);
    crc.finalize()
}

fn record(buffer: &mut Vec<u8>, kind: u8, index: u64, payload: &[u8]) {
    buffer.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buffer.extend_from_slice(&checksum(kind, index, payload).to_le_bytes());
    buffer.push(kind);
    buffer.extend_from_slice(&index.to_le_bytes());
    buffer.extend_from_slice(payload);
}

/// One record read back, or why the bytes at an offset are not one.
enum Next {
    Record {
        kind: u8,
        index: u64,
        payload: Vec<u8>,
        size: u64,
    },
    End,
    Bad(&'static str),
}

fn next(bytes: &[u8]) -> Next {
    if bytes.is_empty() {
        return Next::End;
    }
    if bytes.len() < HEADER {
        return Next::Bad("a record header is cut short");
    }
    let len = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    let kind = bytes[8];
    let index = u64::from_le_bytes(bytes[9..17].try_into().expect("8 bytes"));
    if len > MAX_RECORD || bytes.len() - HEADER < len as usize {
        return Next::Bad("a record is cut short");
    }
    let payload = &bytes[HEADER..HEADER + len as usize];
    if checksum(kind, index, payload) != crc {
        return Next::Bad("a record's checksum does not match");
    }
    if kind != ENTRY && kind != COMMITTED {
        return Next::Bad("a record of an unknown kind");
    }
    Next::Record {
        kind,
        index,
        payload: payload.to_vec(),
        size: (HEADER + len as usize) as u64,
    }
}

/// Reads a segment's records into `read`; returns the length of its good
/// prefix. A bad record ends a last segment (its torn tail) and refuses
/// any other.
fn read_segment(path: &Path, is_last: bool, read: &mut Contents) -> Result<u64, SegmentError> {
    let bytes = std::fs::read(path).map_err(io_at(path))?;
    let mut offset = 0usize;
    loop {
        match next(&bytes[offset..]) {
            Next::End => return Ok(offset as u64),
            Next::Bad(_) if is_last => return Ok(offset as u64),
            Next::Bad(what) => {
                return Err(SegmentError::Corrupt {
                    path: path.to_owned(),
                    offset: offset as u64,
                    what,
                })
            }
            Next::Record {
                kind,
                index,
                payload,
                size,
            } => {
                match kind {
                    ENTRY => read.entries.push((index, payload)),
                    _ => read.committed = Some(payload),
                }
                offset += size as usize;
            }
        }
    }
}

/// Where the record of entry `index` starts in the segment at `path` (its
/// length if the segment ends before it).
fn offset_of(path: &Path, index: u64) -> io::Result<u64> {
    let bytes = std::fs::read(path)?;
    let mut offset = 0usize;
    while let Next::Record {
        kind,
        index: at,
        size,
        ..
    } = next(&bytes[offset..])
    {
        if kind == ENTRY && at >= index {
            break;
        }
        offset += size as usize;
    }
    Ok(offset as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(range: std::ops::RangeInclusive<u64>) -> Vec<(u64, Vec<u8>)> {
        range.map(|i| (i, vec![i as u8; 100])).collect()
    }

    fn indexes(read: &Contents) -> Vec<u64> {
        read.entries.iter().map(|(i, _)| *i).collect()
    }

    #[test]
    fn appends_truncation_and_purge_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, read) = Segments::open(dir.path()).unwrap();
            assert!(read.entries.is_empty() && read.committed.is_none());
            log.append(&entries(1..=10), None).unwrap();
            log.append(&entries(11..=12), Some(b"c12")).unwrap();
            log.truncate(8).unwrap();
            log.append(&entries(8..=9), None).unwrap();
        }
        let (_, read) = Segments::open(dir.path()).unwrap();
        assert_eq!(indexes(&read), (1..=9).collect::<Vec<_>>());
        assert_eq!(read.entries[7].1, vec![8u8; 100]);
        // The commit record after entry 12 went with the truncation.
        assert_eq!(read.committed, None);
    }

    #[test]
    fn segments_roll_over_and_purge_deletes_whole_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = Segments::open(dir.path()).unwrap();
        // Big entries: a segment holds four of them.
        let big = |i: u64| (i, vec![0u8; (SEGMENT_BYTES / 4) as usize + 1]);
        for i in 1..=10 {
            log.append(&[big(i)], Some(format!("c{i}").as_bytes()))
                .unwrap();
        }
        let files = || {
            std::fs::read_dir(dir.path().join(DIR_NAME))
                .unwrap()
                .count()
        };
        assert_eq!(files(), 3, "{:?}", log.segments);
        log.purge(3).unwrap();
        assert_eq!(files(), 3, "the first segment still holds entry 4");
        log.purge(4).unwrap();
        assert_eq!(files(), 2);
        drop(log);
        let (mut log, read) = Segments::open(dir.path()).unwrap();
        assert_eq!(indexes(&read), (5..=10).collect::<Vec<_>>());
        assert_eq!(read.committed.as_deref(), Some(&b"c10"[..]));
        // Purging everything, then appending after a gap (a snapshot
        // installed), starts again cleanly.
        log.purge(20).unwrap();
        assert_eq!(files(), 0);
        log.append(&entries(21..=22), None).unwrap();
        drop(log);
        let (_, read) = Segments::open(dir.path()).unwrap();
        assert_eq!(indexes(&read), vec![21, 22]);
    }

    #[test]
    fn a_torn_tail_is_cut_and_corruption_before_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = Segments::open(dir.path()).unwrap();
        log.append(&entries(1..=3), None).unwrap();
        drop(log);
        let path = dir.path().join(DIR_NAME).join(format!("{:020}.log", 1));
        let whole = std::fs::read(&path).unwrap();
        // Half of a fourth record: a write the crash interrupted.
        let mut torn = whole.clone();
        let mut fourth = Vec::new();
        record(&mut fourth, ENTRY, 4, &[4; 100]);
        torn.extend_from_slice(&fourth[..fourth.len() / 2]);
        std::fs::write(&path, &torn).unwrap();
        let (mut log, read) = Segments::open(dir.path()).unwrap();
        assert_eq!(indexes(&read), vec![1, 2, 3]);
        assert_eq!(std::fs::read(&path).unwrap(), whole, "the tail is cut");
        log.append(&entries(4..=4), None).unwrap();
        drop(log);

        // A flipped byte in a segment that is not the last is refused.
        let (mut log, _) = Segments::open(dir.path()).unwrap();
        log.append(&entries(10..=10), None).unwrap(); // a gap: a new segment
        drop(log);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER + 5] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let err = Segments::open(dir.path()).unwrap_err();
        assert!(
            matches!(err, SegmentError::Corrupt { offset: 0, .. }),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "left as it is");
    }
}
