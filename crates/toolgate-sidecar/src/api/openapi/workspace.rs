//! Schemas of the workspace endpoints' answers: `toolgate-gate`'s
//! `Governed<T>` (the allowing decision's id, and `T`'s members beside it)
//! for each result, mirrored here with the decision id spelled out. The
//! tests write the gate's own values and hold each mirror to them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_policy::Provenance;

/// Kind of a directory entry.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed when listing).
    Symlink,
    /// Sockets, devices and the like.
    Other,
}

/// Answer of `POST /v1/workspace/read`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileRead {
    /// The allowing decision.
    pub decision_id: String,
    /// The relative path.
    pub path: String,
    /// Where the content came from.
    pub provenance: Provenance,
    /// UTF-8 content.
    pub content: String,
}

/// Answer of `POST /v1/workspace/write`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileWritten {
    /// The allowing decision.
    pub decision_id: String,
    /// The relative path.
    pub path: String,
    /// Always `INTERNAL_TOOL`.
    pub provenance: Provenance,
    /// Bytes written.
    pub bytes: u64,
}

/// One entry of a directory listing.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Name within the directory.
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
    /// Provenance of files; directories and links are `EXTERNAL_UNTRUSTED`
    /// unless this process wrote them.
    pub provenance: Provenance,
}

/// Answer of `POST /v1/workspace/list`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Listing {
    /// The allowing decision.
    pub decision_id: String,
    /// The relative path (`""` for the root).
    pub path: String,
    /// Always `EXTERNAL_UNTRUSTED`: a directory's set of names is not ours.
    pub provenance: Provenance,
    /// Entries sorted by name.
    pub entries: Vec<Entry>,
    /// Entries left out because their names are not UTF-8.
    pub skipped_non_utf8: usize,
    /// True when only the first entries read are listed.
    pub truncated: bool,
}

/// Answer of `POST /v1/workspace/stat`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stat {
    /// The allowing decision.
    pub decision_id: String,
    /// The relative path.
    pub path: String,
    /// What it is (symlinks inside the root are followed).
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Provenance of the content.
    pub provenance: Provenance,
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use toolgate_gate::Governed;
    use toolgate_gate::workspace as gate;
    use toolgate_policy::Provenance;

    /// The gate's answer reads as the mirror `M` and `M` writes it back
    /// unchanged: no member on one side only.
    fn same<T: Serialize, M: DeserializeOwned + Serialize>(result: T) {
        let answer = Governed {
            decision_id: "d1".to_owned(),
            result,
        };
        let written = serde_json::to_value(&answer).unwrap();
        let mirror: M = serde_json::from_value(written.clone()).expect("the mirror reads it");
        assert_eq!(serde_json::to_value(&mirror).unwrap(), written);
    }

    /// A kind the gate adds stops this compiling until it is mirrored.
    fn mirrored(kind: gate::EntryKind) -> super::EntryKind {
        match kind {
            gate::EntryKind::File => super::EntryKind::File,
            gate::EntryKind::Dir => super::EntryKind::Dir,
            gate::EntryKind::Symlink => super::EntryKind::Symlink,
            gate::EntryKind::Other => super::EntryKind::Other,
        }
    }

    #[test]
    fn workspace_answers_are_the_gate_s() {
        let provenance = Provenance::InternalTool;
        let path = || "a/b".to_owned();
        same::<_, super::FileRead>(gate::FileRead {
            path: path(),
            provenance,
            content: "x".into(),
        });
        same::<_, super::FileWritten>(gate::FileWritten {
            path: path(),
            provenance,
            bytes: 1,
        });
        let kinds = [
            gate::EntryKind::File,
            gate::EntryKind::Dir,
            gate::EntryKind::Symlink,
            gate::EntryKind::Other,
        ];
        for kind in kinds {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::to_value(mirrored(kind)).unwrap()
            );
            same::<_, super::Stat>(gate::Stat {
                path: path(),
                kind,
                size: 3,
                provenance,
            });
        }
        let entries = kinds.map(|kind| gate::Entry {
            name: "n".into(),
            kind,
            provenance: Provenance::ExternalUntrusted,
        });
        same::<_, super::Listing>(gate::Listing {
            path: path(),
            provenance: Provenance::ExternalUntrusted,
            entries: entries.to_vec(),
            skipped_non_utf8: 0,
            truncated: false,
        });
    }
}
