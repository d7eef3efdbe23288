//! Per-run workspace roots that tools can only reach by relative path.
//!
//! Every run gets `<base>/<tenant>/<run_id>`. Paths are checked as text
//! (absolute, `..`, empty components, NUL), then resolved beneath the root
//! through a capability directory (`cap-std`): a symlink that points
//! outside is an escape, and one that stays inside leads to the path the
//! policy judges (the `walk` module), which is then opened without following any
//! link, so a link swapped in after the decision is refused rather than
//! followed.
//!
//! Provenance is conservative: a file is `INTERNAL_TOOL` only while it still
//! looks exactly as this process wrote it; anything else found on disk,
//! including after a restart, is `EXTERNAL_UNTRUSTED`.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::Mutex;

use std::io::{Read, Write};

mod results;
mod walk;
pub use results::{Entry, EntryKind, FileRead, FileWritten, Listing, Stat};
pub use walk::MAX_LINK_HOPS;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, Metadata, MetadataExt, OpenOptions, OpenOptionsExt};
use sha2::{Digest, Sha256};
use toolgate_policy::RunId;

/// Largest file the workspace API reads or writes, in bytes.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Longest path component, in bytes (the kernel's NAME_MAX).
pub const MAX_NAME_BYTES: usize = 255;
/// Longest relative path, in bytes (the kernel's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;
/// Most entries one listing returns.
pub const MAX_LIST_ENTRIES: usize = 10_000;

/// Where a file's content came from (one definition, in the policy crate,
/// since flow rules select reads by it).
pub use toolgate_policy::Provenance;

/// Why a workspace operation was refused. Messages never contain host paths.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The path text itself is not acceptable.
    #[error("invalid path: {0}")]
    InvalidPath(&'static str),
    /// The run or tenant id cannot name a directory.
    #[error("invalid {0}: use 1-128 characters from [A-Za-z0-9._-], not `.` or `..`")]
    InvalidId(&'static str),
    /// Resolution left the workspace root (e.g. through a symlink).
    #[error("path escapes the workspace")]
    Escape,
    /// A link appeared, or an entry was replaced, on the resolved path
    /// between the decision and the open.
    #[error("the path changed while it was being opened")]
    Changed,
    /// Nothing at that path.
    #[error("no such file or directory")]
    NotFound,
    /// The file is not UTF-8 text.
    #[error("file is not UTF-8 text")]
    NotText,
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("file is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge,
    /// A FIFO, socket or device: reading one could block forever or never
    /// end, so only regular files are served.
    #[error("not a regular file")]
    NotRegularFile,
    /// The file has more than one hard link, so it may also live outside
    /// the workspace (or in another run's).
    #[error("file has more than one hard link")]
    HardLink,
    /// A directory was expected and a file found, or the reverse.
    #[error("{0}")]
    WrongKind(&'static str),
    /// Any other I/O failure (the OS error kind only, never the path).
    #[error("workspace I/O error: {0}")]
    Io(ErrorKind),
    /// The tenant's directory under the base could not be created at
    /// start-up (an operator's fault, so the path is named).
    #[error("cannot create {path}: {error}")]
    BaseUnusable {
        /// The directory that could not be created.
        path: String,
        /// The operating system's reason.
        error: String,
    },
}

impl WorkspaceError {
    /// Stable error code for API responses.
    pub fn code(&self) -> &'static str {
        use toolgate_contract::errors as codes;
        match self {
            Self::InvalidPath(_) => codes::WORKSPACE_INVALID_PATH,
            Self::InvalidId(_) => codes::WORKSPACE_INVALID_ID,
            Self::Escape => codes::WORKSPACE_ESCAPE,
            Self::Changed => codes::WORKSPACE_CHANGED,
            Self::NotFound => codes::WORKSPACE_NOT_FOUND,
            Self::NotText => codes::WORKSPACE_NOT_TEXT,
            Self::TooLarge => codes::WORKSPACE_TOO_LARGE,
            Self::WrongKind(_) => codes::WORKSPACE_WRONG_KIND,
            Self::NotRegularFile => codes::WORKSPACE_NOT_REGULAR_FILE,
            Self::HardLink => codes::WORKSPACE_HARDLINK,
            Self::Io(_) => codes::WORKSPACE_IO,
            Self::BaseUnusable { .. } => codes::WORKSPACE_UNUSABLE,
        }
    }

    fn from_io(e: std::io::Error) -> Self {
        // cap-std reports an escape as PermissionDenied with its own message;
        // symlink loops surface as FilesystemLoop on recent kernels.
        match e.kind() {
            ErrorKind::NotFound => Self::NotFound,
            ErrorKind::PermissionDenied => Self::Escape,
            ErrorKind::NotADirectory => Self::WrongKind("a path component is not a directory"),
            ErrorKind::IsADirectory => Self::WrongKind("path is a directory"),
            ErrorKind::InvalidData => Self::NotText,
            kind => {
                // EXDEV from openat2(RESOLVE_BENEATH) means the path crossed
                // out of the root; ELOOP, a symlink loop or a refused link.
                if matches!(e.raw_os_error(), Some(18) | Some(40)) {
                    Self::Escape
                } else if e.raw_os_error() == Some(36) {
                    // ENAMETOOLONG
                    Self::InvalidPath("name too long")
                } else if e.raw_os_error() == Some(6) {
                    // ENXIO: a FIFO opened for writing with no reader.
                    Self::NotRegularFile
                } else {
                    Self::Io(kind)
                }
            }
        }
    }
}

/// A relative path that passed the text checks. `""` is the root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelPath(String);

impl RelPath {
    /// Checks `text` as a workspace-relative path. `allow_root` admits `""`.
    pub fn parse(text: &str, allow_root: bool) -> Result<Self, WorkspaceError> {
        if text.is_empty() {
            return if allow_root {
                Ok(Self(String::new()))
            } else {
                Err(WorkspaceError::InvalidPath("empty path"))
            };
        }
        if text.contains('\0') {
            return Err(WorkspaceError::InvalidPath("NUL in path"));
        }
        if text.len() > MAX_PATH_BYTES {
            return Err(WorkspaceError::InvalidPath("path longer than 4096 bytes"));
        }
        if text.starts_with('/') || text.starts_with('\\') {
            return Err(WorkspaceError::InvalidPath(
                "absolute paths are not allowed",
            ));
        }
        if text.contains('\\') {
            return Err(WorkspaceError::InvalidPath("backslashes are not allowed"));
        }
        for component in text.split('/') {
            match component {
                "" => return Err(WorkspaceError::InvalidPath("empty path component")),
                "." | ".." => {
                    return Err(WorkspaceError::InvalidPath("`.` and `..` are not allowed"));
                }
                c if c.len() > MAX_NAME_BYTES => {
                    return Err(WorkspaceError::InvalidPath(
                        "path component longer than 255 bytes",
                    ));
                }
                _ => {}
            }
        }
        Ok(Self(text.to_owned()))
    }

    /// The path as the tool gave it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its components (none for the root).
    fn components(&self) -> impl DoubleEndedIterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }
}

pub(crate) fn check_id(kind: &'static str, id: &str) -> Result<(), WorkspaceError> {
    let ok = (1..=128).contains(&id.len())
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(WorkspaceError::InvalidId(kind))
    }
}

/// What this process last wrote to a path: the content's SHA-256. Length
/// and mtime are not enough, since a same-length rewrite plus `touch -d`
/// restores both.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    len: u64,
    sha256: [u8; 32],
}

impl Written {
    fn of(bytes: &[u8]) -> Self {
        Self {
            len: bytes.len() as u64,
            sha256: Sha256::digest(bytes).into(),
        }
    }
}

/// Opens the resolved path for reading without blocking (a FIFO would
/// otherwise hang the open itself) and without following a link, and checks
/// the *open handle*: a regular file with one link, within the size limit.
fn open_regular(root: &Dir, resolved: &RelPath) -> Result<(File, Metadata), WorkspaceError> {
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(libc::O_NONBLOCK);
    let (dir, name) = walk::open_parent(root, resolved, false)?;
    let file = walk::open_file(&dir, name, &options, false)?;
    let meta = file.metadata().map_err(WorkspaceError::from_io)?;
    check_regular(&meta)?;
    Ok((file, meta))
}

fn check_regular(meta: &Metadata) -> Result<(), WorkspaceError> {
    if meta.is_dir() {
        return Err(WorkspaceError::WrongKind("path is a directory"));
    }
    if !meta.is_file() {
        return Err(WorkspaceError::NotRegularFile);
    }
    if meta.nlink() > 1 {
        return Err(WorkspaceError::HardLink);
    }
    Ok(())
}

/// Reads at most [`MAX_FILE_BYTES`] from an open regular file; one byte
/// more means the file is too large (it may have grown since `fstat`).
fn read_bounded(file: File) -> Result<Vec<u8>, WorkspaceError> {
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(WorkspaceError::from_io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(WorkspaceError::TooLarge);
    }
    Ok(bytes)
}

/// All workspaces of one sidecar, rooted at one host directory.
#[derive(Debug)]
pub struct Workspaces {
    base: PathBuf,
    tenant: String,
    written: Mutex<HashMap<(String, String), Written>>,
}

impl Workspaces {
    /// Workspaces under `base/<tenant>/`. The base is created if missing.
    pub fn new(base: impl Into<PathBuf>, tenant: &str) -> Result<Self, WorkspaceError> {
        check_id("tenant", tenant)?;
        let base = base.into();
        let dir = base.join(tenant);
        std::fs::create_dir_all(&dir).map_err(|e| WorkspaceError::BaseUnusable {
            path: dir.display().to_string(),
            error: e.to_string(),
        })?;
        Ok(Self {
            base,
            tenant: tenant.to_owned(),
            written: Mutex::new(HashMap::new()),
        })
    }

    /// The run's directory. A run id is one safe path component by its
    /// alphabet (`a-z 0-9 . _ : -`, alphanumeric at both ends: never `.`,
    /// `..` or a separator), so every run an agent can be authorized for
    /// has a workspace.
    fn root(&self, run_id: &RunId) -> Result<Dir, WorkspaceError> {
        let run_id = run_id.as_str();
        let tenant_dir = Dir::open_ambient_dir(self.base.join(&self.tenant), ambient_authority())
            .map_err(WorkspaceError::from_io)?;
        match tenant_dir.create_dir(run_id) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(WorkspaceError::from_io(e)),
        }
        tenant_dir.open_dir(run_id).map_err(WorkspaceError::from_io)
    }

    fn recorded(&self, run_id: &RunId, path: &RelPath) -> Option<Written> {
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written
            .get(&(run_id.as_str().to_owned(), path.0.clone()))
            .cloned()
    }

    /// `INTERNAL_TOOL` only when `bytes` are exactly what this process wrote.
    fn provenance(&self, run_id: &RunId, path: &RelPath, bytes: &[u8]) -> Provenance {
        match self.recorded(run_id, path) {
            Some(w) if w == Written::of(bytes) => Provenance::InternalTool,
            _ => Provenance::ExternalUntrusted,
        }
    }

    /// Provenance without the content at hand (stat, list): files this
    /// process never wrote, or whose size changed, are untrusted at once;
    /// the rest are re-read (bounded) and hashed.
    fn provenance_on_disk(&self, root: &Dir, run_id: &RunId, path: &RelPath) -> Provenance {
        let Some(w) = self.recorded(run_id, path) else {
            return Provenance::ExternalUntrusted;
        };
        let content = open_regular(root, path)
            .ok()
            .filter(|(_, meta)| meta.len() == w.len)
            .and_then(|(file, _)| read_bounded(file).ok());
        match content {
            Some(bytes) if Written::of(&bytes) == w => Provenance::InternalTool,
            _ => Provenance::ExternalUntrusted,
        }
    }

    /// Where `path` leads in the run's workspace once its links are
    /// followed: what the gate judges and every operation opens.
    /// `allow_root` admits `""` (list and stat).
    pub fn resolve(
        &self,
        run_id: &RunId,
        path: &str,
        allow_root: bool,
    ) -> Result<Resolved, WorkspaceError> {
        let requested = RelPath::parse(path, allow_root)?;
        let root = self.root(run_id)?;
        let resolved = walk::resolve(&root, &requested)?;
        if resolved.0.is_empty() && !allow_root {
            return Err(WorkspaceError::WrongKind("path is a directory"));
        }
        Ok(Resolved {
            requested,
            resolved,
        })
    }

    /// Reads a UTF-8 file at a resolved path.
    pub fn read(&self, run_id: &RunId, path: &Resolved) -> Result<FileRead, WorkspaceError> {
        let root = self.root(run_id)?;
        let (file, meta) = open_regular(&root, &path.resolved)?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(WorkspaceError::TooLarge);
        }
        let bytes = read_bounded(file)?;
        let provenance = self.provenance(run_id, &path.resolved, &bytes);
        let content = String::from_utf8(bytes).map_err(|_| WorkspaceError::NotText)?;
        Ok(FileRead {
            provenance,
            path: path.requested.0.clone(),
            content,
        })
    }

    /// Writes a UTF-8 file at a resolved path, creating parent directories
    /// inside the root.
    pub fn write(
        &self,
        run_id: &RunId,
        path: &Resolved,
        content: &str,
    ) -> Result<FileWritten, WorkspaceError> {
        if content.len() as u64 > MAX_FILE_BYTES {
            return Err(WorkspaceError::TooLarge);
        }
        let root = self.root(run_id)?;
        let (dir, name) = walk::open_parent(&root, &path.resolved, true)?;
        // Open without truncating and without blocking, check the open
        // handle, and only then replace the content: a FIFO, a device or a
        // hard link planted at the path is refused untouched.
        let mut options = OpenOptions::new();
        options
            .write(true)
            .create(true)
            .custom_flags(libc::O_NONBLOCK);
        let mut file = walk::open_file(&dir, name, &options, true)?;
        let meta = file.metadata().map_err(WorkspaceError::from_io)?;
        check_regular(&meta)?;
        file.set_len(0).map_err(WorkspaceError::from_io)?;
        file.write_all(content.as_bytes())
            .map_err(WorkspaceError::from_io)?;
        self.written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                (run_id.as_str().to_owned(), path.resolved.0.clone()),
                Written::of(content.as_bytes()),
            );
        Ok(FileWritten {
            path: path.requested.0.clone(),
            provenance: Provenance::InternalTool,
            bytes: content.len() as u64,
        })
    }

    /// Lists a directory at a resolved path (`""` is the root).
    pub fn list(&self, run_id: &RunId, path: &Resolved) -> Result<Listing, WorkspaceError> {
        let root = self.root(run_id)?;
        let dir = walk::open_dir(&root, &path.resolved)?;
        let mut entries = Vec::new();
        let mut skipped_non_utf8 = 0;
        let mut truncated = false;
        for item in dir.entries().map_err(WorkspaceError::from_io)? {
            if entries.len() >= MAX_LIST_ENTRIES {
                truncated = true;
                break;
            }
            let item = item.map_err(WorkspaceError::from_io)?;
            let Ok(name) = item.file_name().into_string() else {
                skipped_non_utf8 += 1;
                continue;
            };
            let file_type = item.file_type().map_err(WorkspaceError::from_io)?;
            let kind = if file_type.is_symlink() {
                EntryKind::Symlink
            } else if file_type.is_dir() {
                EntryKind::Dir
            } else if file_type.is_file() {
                EntryKind::File
            } else {
                EntryKind::Other
            };
            let child = if path.resolved.0.is_empty() {
                name.clone()
            } else {
                format!("{}/{name}", path.resolved.0)
            };
            let provenance = match kind {
                EntryKind::File => self.provenance_on_disk(&root, run_id, &RelPath(child)),
                _ => Provenance::ExternalUntrusted,
            };
            entries.push(Entry {
                name,
                kind,
                provenance,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Listing {
            path: path.requested.0.clone(),
            provenance: Provenance::ExternalUntrusted,
            entries,
            skipped_non_utf8,
            truncated,
        })
    }

    /// Size, kind and provenance of a resolved path.
    pub fn stat(&self, run_id: &RunId, path: &Resolved) -> Result<Stat, WorkspaceError> {
        let root = self.root(run_id)?;
        let meta = match path.resolved.0.is_empty() {
            true => root.dir_metadata(),
            false => {
                let (dir, name) = walk::open_parent(&root, &path.resolved, false)?;
                dir.symlink_metadata(name)
            }
        }
        .map_err(WorkspaceError::from_io)?;
        let kind = if meta.is_dir() {
            EntryKind::Dir
        } else if meta.is_file() {
            EntryKind::File
        } else if meta.file_type().is_symlink() {
            return Err(WorkspaceError::Changed);
        } else {
            EntryKind::Other
        };
        Ok(Stat {
            provenance: if kind == EntryKind::File {
                self.provenance_on_disk(&root, run_id, &path.resolved)
            } else {
                Provenance::ExternalUntrusted
            },
            path: path.requested.0.clone(),
            kind,
            size: meta.len(),
        })
    }
}

/// A workspace path as the agent named it and where its links lead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    requested: RelPath,
    resolved: RelPath,
}

impl Resolved {
    /// The path as the agent named it.
    pub fn requested(&self) -> &str {
        self.requested.as_str()
    }

    /// The path with every link followed (no link in it when resolved).
    pub fn resolved(&self) -> &str {
        self.resolved.as_str()
    }

    /// True when a link made the two differ.
    pub fn through_link(&self) -> bool {
        self.requested != self.resolved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_text_checks() {
        for bad in [
            "/etc/passwd",
            "..",
            "a/../b",
            "a//b",
            "a/",
            "./a",
            "a\0b",
            "\\x",
            "a\\..\\b",
        ] {
            assert!(RelPath::parse(bad, true).is_err(), "{bad:?}");
        }
        assert!(RelPath::parse("", false).is_err());
        assert_eq!(RelPath::parse("", true).unwrap().as_str(), "");
        assert_eq!(
            RelPath::parse("src/main.rs", false).unwrap().as_str(),
            "src/main.rs"
        );
        assert_eq!(
            RelPath::parse("..hidden", false).unwrap().as_str(),
            "..hidden"
        );
    }

    #[test]
    fn ids_are_single_safe_components() {
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(129)] {
            assert!(check_id("tenant", bad).is_err(), "{bad:?}");
        }
        check_id("tenant", "team-1.a_b").unwrap();
    }
}
