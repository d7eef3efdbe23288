//! Symbolic links inside a run's root: one resolution that the policy
//! judges, and opens that reach exactly what was resolved.
//!
//! A link that stays inside the root is allowed (`notes -> secrets`), but
//! the policy must judge where it leads, not the name the agent used: the
//! gate decides the resolved path ([`resolve`]), and every open then walks
//! that path one component at a time without following any link, checking
//! that each directory or file it opened is the very entry it saw, so a
//! link swapped in between the decision and the open is refused
//! ([`WorkspaceError::Changed`]) instead of followed.

use std::io::ErrorKind;

use cap_std::fs::{Dir, File, Metadata, MetadataExt, OpenOptions};

use super::{RelPath, WorkspaceError};

/// Most links one resolution follows (the kernel's own limit).
pub const MAX_LINK_HOPS: usize = 40;

/// The path `rel` names once every symbolic link in it is followed beneath
/// `root`: a relative path with no link in it (`""` for the root). A link
/// with an absolute target, one that climbs above the root, or a loop is an
/// escape. Components that do not exist (yet) are kept as written.
pub(crate) fn resolve(root: &Dir, rel: &RelPath) -> Result<RelPath, WorkspaceError> {
    let mut done: Vec<String> = Vec::new();
    let mut todo: Vec<String> = rel.components().rev().map(str::to_owned).collect();
    let mut hops = 0;
    let mut missing = false;
    while let Some(name) = todo.pop() {
        match name.as_str() {
            "" | "." => continue,
            ".." => {
                done.pop().ok_or(WorkspaceError::Escape)?;
                continue;
            }
            _ => {}
        }
        done.push(name);
        if missing {
            continue;
        }
        let here = done.join("/");
        match root.symlink_metadata(&here) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(WorkspaceError::Escape);
                }
                let target = root
                    .read_link_contents(&here)
                    .map_err(WorkspaceError::from_io)?;
                if target.is_absolute() {
                    return Err(WorkspaceError::Escape);
                }
                let target = target
                    .to_str()
                    .ok_or(WorkspaceError::InvalidPath("link target is not UTF-8"))?;
                done.pop();
                todo.extend(target.split('/').rev().map(str::to_owned));
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => missing = true,
            Err(e) => return Err(WorkspaceError::from_io(e)),
        }
    }
    Ok(RelPath(done.join("/")))
}

/// Fails unless `opened` is the entry `seen` was (same device and inode).
fn same_entry(seen: &Metadata, opened: &Metadata) -> Result<(), WorkspaceError> {
    if seen.dev() == opened.dev() && seen.ino() == opened.ino() {
        Ok(())
    } else {
        Err(WorkspaceError::Changed)
    }
}

/// Opens the directory `name` of `parent`, refusing a link there; with
/// `create`, makes it first when it is missing.
fn child_dir(parent: &Dir, name: &str, create: bool) -> Result<Dir, WorkspaceError> {
    let seen = match parent.symlink_metadata(name) {
        Err(e) if create && e.kind() == ErrorKind::NotFound => {
            match parent.create_dir(name) {
                Err(e) if e.kind() != ErrorKind::AlreadyExists => {
                    return Err(WorkspaceError::from_io(e));
                }
                _ => {}
            }
            parent
                .symlink_metadata(name)
                .map_err(WorkspaceError::from_io)?
        }
        other => other.map_err(WorkspaceError::from_io)?,
    };
    if seen.file_type().is_symlink() {
        return Err(WorkspaceError::Changed);
    }
    if !seen.is_dir() {
        return Err(WorkspaceError::WrongKind(
            "a path component is not a directory",
        ));
    }
    let dir = parent.open_dir(name).map_err(WorkspaceError::from_io)?;
    same_entry(&seen, &dir.dir_metadata().map_err(WorkspaceError::from_io)?)?;
    Ok(dir)
}

/// The directory `resolved` (a path [`resolve`] returned), opened without
/// following any link.
pub(crate) fn open_dir(root: &Dir, resolved: &RelPath) -> Result<Dir, WorkspaceError> {
    let mut dir = root.try_clone().map_err(WorkspaceError::from_io)?;
    for name in resolved.components() {
        dir = child_dir(&dir, name, false)?;
    }
    Ok(dir)
}

/// The parent directory of `resolved` and its last component, opened
/// without following any link; `create` makes missing directories.
pub(crate) fn open_parent<'p>(
    root: &Dir,
    resolved: &'p RelPath,
    create: bool,
) -> Result<(Dir, &'p str), WorkspaceError> {
    let mut names: Vec<&str> = resolved.components().collect();
    let last = names
        .pop()
        .ok_or(WorkspaceError::WrongKind("path is a directory"))?;
    let mut dir = root.try_clone().map_err(WorkspaceError::from_io)?;
    for name in names {
        dir = child_dir(&dir, name, create)?;
    }
    Ok((dir, last))
}

/// Opens the file `name` of `dir` with `options`, never through a link:
/// an existing entry must not be a link and must be what was opened; a new
/// one is created exclusively (`O_EXCL` does not follow links).
pub(crate) fn open_file(
    dir: &Dir,
    name: &str,
    options: &OpenOptions,
    create: bool,
) -> Result<File, WorkspaceError> {
    let seen = match dir.symlink_metadata(name) {
        Err(e) if create && e.kind() == ErrorKind::NotFound => {
            let mut exclusive = options.clone();
            exclusive.create_new(true);
            return dir
                .open_with(name, &exclusive)
                .map_err(WorkspaceError::from_io);
        }
        other => other.map_err(WorkspaceError::from_io)?,
    };
    if seen.file_type().is_symlink() {
        return Err(WorkspaceError::Changed);
    }
    let file = dir
        .open_with(name, options)
        .map_err(WorkspaceError::from_io)?;
    same_entry(&seen, &file.metadata().map_err(WorkspaceError::from_io)?)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;
    use std::os::unix::fs::symlink;

    fn rel(s: &str) -> RelPath {
        RelPath::parse(s, true).unwrap()
    }

    #[test]
    fn links_resolve_beneath_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path();
        std::fs::create_dir_all(p.join("a/b")).unwrap();
        symlink("a/b", p.join("ab")).unwrap();
        symlink("../ab", p.join("a/up")).unwrap();
        symlink("/etc", p.join("abs")).unwrap();
        symlink("../../x", p.join("a/out")).unwrap();
        let root = Dir::open_ambient_dir(p, ambient_authority()).unwrap();
        for (path, resolved) in [
            ("ab/f", "a/b/f"),
            ("a/up/f", "a/b/f"),
            ("a/up", "a/b"),
            ("new/dir/f", "new/dir/f"),
            ("", ""),
        ] {
            assert_eq!(
                resolve(&root, &rel(path)).unwrap().as_str(),
                resolved,
                "{path}"
            );
        }
        for path in ["abs", "abs/passwd", "a/out"] {
            assert!(
                matches!(resolve(&root, &rel(path)), Err(WorkspaceError::Escape)),
                "{path}"
            );
        }
    }

    #[test]
    fn a_link_swapped_in_after_resolution_is_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path();
        std::fs::create_dir_all(p.join("notes")).unwrap();
        std::fs::create_dir_all(p.join("secrets")).unwrap();
        std::fs::write(p.join("notes/key"), "harmless").unwrap();
        std::fs::write(p.join("secrets/key"), "secret").unwrap();
        let root = Dir::open_ambient_dir(p, ambient_authority()).unwrap();
        let judged = resolve(&root, &rel("notes/key")).unwrap();
        assert_eq!(judged.as_str(), "notes/key");
        // The agent swaps the directory for a link once the path is judged.
        std::fs::rename(p.join("notes"), p.join("old")).unwrap();
        symlink("secrets", p.join("notes")).unwrap();
        let mut read = OpenOptions::new();
        read.read(true);
        assert!(matches!(
            open_parent(&root, &judged, false),
            Err(WorkspaceError::Changed)
        ));
        // And a file swapped for a link.
        std::fs::remove_file(p.join("notes")).unwrap();
        std::fs::rename(p.join("old"), p.join("notes")).unwrap();
        std::fs::remove_file(p.join("notes/key")).unwrap();
        symlink("../secrets/key", p.join("notes/key")).unwrap();
        let (dir, name) = open_parent(&root, &judged, false).unwrap();
        assert!(matches!(
            open_file(&dir, name, &read, false),
            Err(WorkspaceError::Changed)
        ));
        // A new file is created exclusively: a link planted first is refused.
        let mut write = OpenOptions::new();
        write.write(true).create(true);
        assert!(open_file(&dir, "fresh", &write, true).is_ok());
    }
}
