//! Nacos 3's config export (`GET /v3/admin/cs/config/export`) and import:
//! a ZIP with one entry per config, named `<group>/<dataId>` and holding
//! its content, and a `.metadata.yml` listing each config's `dataId`,
//! `group`, `type`, `appName` and `desc`, keys in alphabetical order and
//! absent ones left out, as Nacos writes it:
//!
//! ```yaml
//! metadata:
//! - dataId: app.yaml
//!   group: shop
//!   type: yaml
//! ```
//!
//! Reading is bounded: every entry is read up to a size limit, so a small
//! archive cannot expand into a large allocation.

use std::io::{Cursor, Read, Write};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use zip::write::SimpleFileOptions;

/// The metadata entry's name (`.meta.yml` is read too).
pub const METADATA: &str = ".metadata.yml";

/// One config in an archive.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ArchivedConfig {
    /// Its group.
    pub group: String,
    /// Its data id.
    pub data_id: String,
    /// Its content.
    pub content: String,
    /// Its type (`yaml`, `text`, …).
    pub kind: String,
    /// Its application, `""` for none.
    pub app_name: String,
    /// Its description, `""` for none.
    pub desc: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Metadata {
    #[serde(default)]
    metadata: Option<Vec<MetadataItem>>,
}

/// One config's metadata; the fields in alphabetical order, as SnakeYAML
/// writes Nacos' bean.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataItem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    app_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    config_tags: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    desc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
}

fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

/// Writes `configs` as an archive.
pub fn write(configs: &[ArchivedConfig]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default();
    let write_all = |zip: &mut zip::ZipWriter<Cursor<Vec<u8>>>, name: &str, bytes: &[u8]| {
        zip.start_file(name, options)
            .and_then(|()| zip.write_all(bytes).map_err(zip::result::ZipError::from))
            .expect("writing to memory does not fail");
    };
    for config in configs {
        let name = format!("{}/{}", config.group, config.data_id);
        write_all(&mut zip, &name, config.content.as_bytes());
    }
    let metadata = Metadata {
        metadata: Some(
            configs
                .iter()
                .map(|c| MetadataItem {
                    app_name: non_empty(&c.app_name),
                    config_tags: None,
                    data_id: Some(c.data_id.clone()),
                    desc: non_empty(&c.desc),
                    group: Some(c.group.clone()),
                    kind: Some(c.kind.clone()),
                })
                .collect(),
        ),
    };
    let yaml = serde_norway::to_string(&metadata).expect("metadata serializes");
    write_all(&mut zip, METADATA, yaml.as_bytes());
    zip.finish()
        .expect("writing to memory does not fail")
        .into_inner()
}

/// What an archive holds: its configs, in the metadata's order, and the
/// names of what could not be matched (an entry without metadata, or
/// metadata without an entry), in Nacos' words.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Archive {
    /// The configs.
    pub configs: Vec<ArchivedConfig>,
    /// What was not recognized.
    pub unrecognized: Vec<String>,
}

/// Why an archive cannot be read; each maps to Nacos' import error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ArchiveError {
    /// Not a ZIP, or a broken one (Nacos: 100004).
    #[error("the file is not a readable ZIP: {0}")]
    Unreadable(String),
    /// No `.metadata.yml`, or one that does not describe every item
    /// (Nacos: 100002).
    #[error("imported metadata is invalid: {0}")]
    Metadata(String),
    /// An entry larger than the limit.
    #[error("entry {name} is larger than {limit} bytes")]
    TooLarge {
        /// The entry.
        name: String,
        /// The limit.
        limit: usize,
    },
    /// Entries larger, together, than the limit: a small upload that
    /// unpacks to far more than it weighs.
    #[error("the archive unpacks to more than {limit} bytes")]
    TooLargeInAll {
        /// The limit.
        limit: usize,
    },
}

/// Reads an archive; each entry may hold at most `max_entry` bytes, and
/// all of them together at most `max_total`.
pub fn read(bytes: &[u8], max_entry: usize, max_total: usize) -> Result<Archive, ArchiveError> {
    let unreadable = |e: zip::result::ZipError| ArchiveError::Unreadable(e.to_string());
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(unreadable)?;
    let mut metadata = None;
    let mut entries = Vec::new();
    let mut unrecognized = Vec::new();
    let mut total = 0_usize;
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(unreadable)?;
        if entry.is_dir() {
            continue;
        }
        let name = entry.name().to_owned();
        let room = max_entry.min(max_total - total);
        let mut content = Vec::new();
        entry
            .take(room as u64 + 1)
            .read_to_end(&mut content)
            .map_err(|e| ArchiveError::Unreadable(e.to_string()))?;
        if content.len() > max_entry {
            return Err(ArchiveError::TooLarge {
                name,
                limit: max_entry,
            });
        }
        if content.len() > room {
            return Err(ArchiveError::TooLargeInAll { limit: max_total });
        }
        total += content.len();
        let text = String::from_utf8(content)
            .map_err(|_| ArchiveError::Unreadable(format!("entry {name} is not UTF-8")))?;
        if name == METADATA || name == ".meta.yml" {
            if metadata.is_none() {
                metadata = Some(text);
            }
            continue;
        }
        match name.split('/').collect::<Vec<_>>().as_slice() {
            [group, data_id] if !group.is_empty() && !data_id.is_empty() => {
                entries.push(((*group).to_owned(), (*data_id).to_owned(), text));
            }
            _ => unrecognized.push(name),
        }
    }
    let metadata = metadata.ok_or_else(|| ArchiveError::Metadata(format!("no {METADATA}")))?;
    let items = serde_norway::from_str::<Metadata>(&metadata)
        .map_err(|e| ArchiveError::Metadata(e.to_string()))?
        .metadata
        .unwrap_or_default();
    if items.is_empty() {
        return Err(ArchiveError::Metadata(format!(
            "{METADATA} lists no config"
        )));
    }
    let mut configs = Vec::new();
    for item in items {
        let (Some(data_id), Some(group), Some(kind)) = (item.data_id, item.group, item.kind) else {
            return Err(ArchiveError::Metadata(
                "every item needs dataId, group and type".to_owned(),
            ));
        };
        match entries
            .iter()
            .position(|(g, d, _)| *g == group && *d == data_id)
        {
            Some(at) => {
                let (group, data_id, content) = entries.remove(at);
                configs.push(ArchivedConfig {
                    group,
                    data_id,
                    content,
                    kind,
                    app_name: item.app_name.unwrap_or_default(),
                    desc: item.desc.unwrap_or_default(),
                });
            }
            None => unrecognized.push(format!("Item not found in file: {group}/{data_id}")),
        }
    }
    unrecognized.extend(
        entries
            .into_iter()
            .map(|(g, d, _)| format!("Item not found in metadata: {g}/{d}")),
    );
    Ok(Archive {
        configs,
        unrecognized,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(group: &str, data_id: &str, content: &str) -> ArchivedConfig {
        ArchivedConfig {
            group: group.to_owned(),
            data_id: data_id.to_owned(),
            content: content.to_owned(),
            kind: "text".to_owned(),
            ..ArchivedConfig::default()
        }
    }

    #[test]
    fn an_archive_reads_back_and_its_metadata_is_written_as_nacos_writes_it() {
        let mut two = config("testGroup2", "testData2", "b: 2");
        two.kind = "yaml".to_owned();
        two.app_name = "testAppName".to_owned();
        two.desc = "test desc".to_owned();
        let configs = vec![config("testGroup1", "testData1", "a=1"), two];
        let bytes = write(&configs);
        let archive = read(&bytes, 1024, 1 << 20).unwrap();
        assert_eq!(archive.configs, configs);
        assert!(archive.unrecognized.is_empty());
        let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
        let mut yaml = String::new();
        zip.by_name(METADATA)
            .unwrap()
            .read_to_string(&mut yaml)
            .unwrap();
        assert_eq!(
            yaml,
            "metadata:\n- dataId: testData1\n  group: testGroup1\n  type: text\n- appName: testAppName\n  dataId: testData2\n  desc: test desc\n  group: testGroup2\n  type: yaml\n"
        );
    }

    #[test]
    fn unmatched_entries_and_bad_archives_are_named() {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = SimpleFileOptions::default();
        for (name, body) in [
            ("g/a", "1"),
            ("g/stray", "2"),
            ("deep/er/path", "3"),
            (METADATA, "metadata:\n- dataId: a\n  group: g\n  type: text\n- dataId: gone\n  group: g\n  type: text\n"),
        ] {
            zip.start_file(name, options).unwrap();
            zip.write_all(body.as_bytes()).unwrap();
        }
        let bytes = zip.finish().unwrap().into_inner();
        let archive = read(&bytes, 1024, 1 << 20).unwrap();
        assert_eq!(archive.configs.len(), 1);
        assert_eq!(
            archive.unrecognized,
            vec![
                "deep/er/path".to_owned(),
                "Item not found in file: g/gone".to_owned(),
                "Item not found in metadata: g/stray".to_owned(),
            ]
        );
        assert!(matches!(
            read(b"not a zip", 1024, 1 << 20),
            Err(ArchiveError::Unreadable(_))
        ));
        assert!(matches!(
            read(&bytes, 1, 1 << 20),
            Err(ArchiveError::TooLarge { .. })
        ));
        // Each entry within its limit, all of them together not.
        assert_eq!(
            read(&bytes, 1024, 4),
            Err(ArchiveError::TooLargeInAll { limit: 4 })
        );
        let no_metadata = write(&[]);
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        zip.start_file("g/a", options).unwrap();
        let bare = zip.finish().unwrap().into_inner();
        assert!(matches!(
            read(&bare, 1024, 1 << 20),
            Err(ArchiveError::Metadata(_))
        ));
        assert!(matches!(
            read(&no_metadata, 1024, 1 << 20),
            Err(ArchiveError::Metadata(_))
        ));
    }
}
