//! What the workspace operations answer.

use serde::Serialize;

use super::Provenance;

/// Kind of a directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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

/// Result of reading a file.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FileRead {
    /// The relative path.
    pub path: String,
    /// Where the content came from.
    pub provenance: Provenance,
    /// UTF-8 content.
    pub content: String,
}

/// Result of writing a file.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FileWritten {
    /// The relative path.
    pub path: String,
    /// Always `INTERNAL_TOOL`.
    pub provenance: Provenance,
    /// Bytes written.
    pub bytes: u64,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
// The schema says no other member is ever written (serde writes exactly these).
#[schemars(deny_unknown_fields)]
pub struct Entry {
    /// Name within the directory.
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
    /// Provenance of files; directories and links are `EXTERNAL_UNTRUSTED`
    /// unless this process wrote them.
    pub provenance: Provenance,
}

/// Result of listing a directory.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Listing {
    /// The relative path (`""` for the root).
    pub path: String,
    /// Always `EXTERNAL_UNTRUSTED`: a directory's set of names is not ours.
    pub provenance: Provenance,
    /// Entries sorted by name.
    pub entries: Vec<Entry>,
    /// Entries left out because their names are not UTF-8.
    pub skipped_non_utf8: usize,
    /// True when the directory has more than [`MAX_LIST_ENTRIES`](super::MAX_LIST_ENTRIES) entries
    /// and only the first ones read are listed.
    pub truncated: bool,
}

/// Result of `stat`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Stat {
    /// The relative path.
    pub path: String,
    /// What it is (symlinks inside the root are followed).
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Provenance of the content.
    pub provenance: Provenance,
}
