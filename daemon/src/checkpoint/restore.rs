//! Restoring a workspace to a snapshot, writing only through the workspace's
//! `cap_std` handle: every parent directory is opened component by component
//! with `O_NOFOLLOW`, so a directory the agent swapped for a symlink makes
//! that path fail (reported), never redirects a write. New content is written
//! to a temp file in the final directory and renamed over the target
//! (`renameat(2)` replaces a symlink, never follows it).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsMaybeDirExt};
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use super::blobs::BlobStore;
use super::snapshot::{Entry, EntryKind, Snapshot};

/// Opens the parent directory of `path` (relative, `/`-separated) without
/// following any symlink; returns it and the final name.
pub(crate) fn open_parent<'p>(root: &Dir, path: &'p str) -> std::io::Result<(Dir, &'p str)> {
    let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
    let mut d = root.try_clone()?;
    for comp in parent.split('/').filter(|c| !c.is_empty()) {
        if comp == "." || comp == ".." {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        d = d.open_dir_nofollow(comp)?;
    }
    Ok((d, name))
}

/// Reads a regular file of the workspace (no symlink followed anywhere),
/// at most `max` bytes; `None` when it is not a regular file or too large.
pub(crate) fn read_file(root: &Dir, path: &str, max: usize) -> Option<Vec<u8>> {
    let (dir, name) = open_parent(root, path).ok()?;
    let mut opts = OpenOptions::new();
    opts.read(true)
        .follow(FollowSymlinks::No)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let f = dir.open_with(name, &opts).ok()?;
    let md = f.metadata().ok()?;
    if !md.is_file() || md.len() as usize > max {
        return None;
    }
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(&f, max as u64), &mut buf).ok()?;
    Some(buf)
}

/// Owner for files the daemon creates when it runs as root: the workspace
/// root's owner (so restored files do not become root's).
pub(crate) fn owner_of(root: &Dir) -> Option<(u32, u32)> {
    use cap_std::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    root.dir_metadata().ok().map(|m| (m.uid(), m.gid()))
}

fn chown_fd(fd: impl std::os::fd::AsFd, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    if let Some((u, g)) = owner {
        nix::unistd::fchown(
            fd,
            Some(nix::unistd::Uid::from_raw(u)),
            Some(nix::unistd::Gid::from_raw(g)),
        )
        .map_err(std::io::Error::from)?;
    }
    Ok(())
}

fn chmod_fd(fd: impl std::os::fd::AsFd, mode: u32) -> std::io::Result<()> {
    nix::sys::stat::fchmod(fd, nix::sys::stat::Mode::from_bits_truncate(mode))
        .map_err(std::io::Error::from)
}

/// Opens directory `name` of `parent` as a readable fd (cap-std's `Dir`
/// handles are `O_PATH`, which `fchmod`/`fchown`/`syncfs` refuse), without
/// following a symlink.
fn dir_fd(parent: &Dir, name: &str) -> std::io::Result<cap_std::fs::File> {
    let mut opts = OpenOptions::new();
    opts.read(true)
        .follow(FollowSymlinks::No)
        .maybe_dir(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOCTTY);
    parent.open_with(name, &opts)
}

fn temp_name() -> String {
    format!(".warden-restore-{}", crate::new_id())
}

/// Permission bits a restore may set: setuid/setgid are never recreated
/// (the daemon may be root and the content is agent-controlled).
const MODE_MASK: u32 = 0o1777;

fn write_entry(
    root: &Dir,
    blobs: &BlobStore,
    path: &str,
    e: &Entry,
    owner: Option<(u32, u32)>,
) -> Result<(), String> {
    if e.kind == EntryKind::Other {
        return Err("special file (FIFO, socket or device): not restored".into());
    }
    if !e.stored {
        return Err("content not stored (file over checkpoint.max_file_bytes)".into());
    }
    let bytes = blobs.get(&e.hash).map_err(|err| err.to_string())?;
    let (dir, name) = open_parent(root, path).map_err(|err| format!("parent directory: {err}"))?;
    let tmp = temp_name();
    let res = (|| -> std::io::Result<()> {
        match e.kind {
            EntryKind::File => {
                let mut opts = OpenOptions::new();
                opts.write(true)
                    .create_new(true)
                    .follow(FollowSymlinks::No)
                    .mode(0o600);
                let mut f = dir.open_with(&tmp, &opts)?;
                f.write_all(&bytes)?;
                chown_fd(&f, owner)?;
                chmod_fd(&f, e.mode & MODE_MASK)?;
            }
            EntryKind::Symlink => {
                dir.symlink_contents(OsStr::from_bytes(&bytes), &tmp)?;
                if let Some((u, g)) = owner {
                    nix::unistd::fchownat(
                        &dir,
                        tmp.as_str(),
                        Some(nix::unistd::Uid::from_raw(u)),
                        Some(nix::unistd::Gid::from_raw(g)),
                        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .map_err(std::io::Error::from)?;
                }
            }
            _ => unreachable!("checked above"),
        }
        dir.rename(&tmp, &dir, name)
    })();
    if let Err(err) = res {
        let _ = dir.remove_file(&tmp);
        return Err(err.to_string());
    }
    if e.mode & !MODE_MASK != 0 && e.kind == EntryKind::File {
        return Err("restored without its setuid/setgid bits".into());
    }
    Ok(())
}

fn depth(p: &str) -> usize {
    p.matches('/').count()
}

/// Turns the workspace (whose state is `current`) into `target` for the
/// paths `allowed` accepts. Returns `path: reason` for each path that could
/// not be restored. Untouched paths (not allowed, or equal) are never
/// written.
pub(crate) fn restore(
    root: &Dir,
    blobs: &BlobStore,
    current: &Snapshot,
    target: &Snapshot,
    allowed: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let owner = owner_of(root);
    let mut failed = Vec::new();
    let paths: BTreeSet<&str> = current
        .entries
        .keys()
        .chain(target.entries.keys())
        .map(String::as_str)
        .filter(
            |p| match (current.entries.get(*p), target.entries.get(*p)) {
                (Some(a), Some(b)) => !a.same(b),
                _ => true,
            },
        )
        .filter(|p| allowed(p))
        .collect();
    let cur = |p: &str| current.entries.get(p);
    let tgt = |p: &str| target.entries.get(p);
    let is_dir = |e: Option<&Entry>| e.is_some_and(|e| e.kind == EntryKind::Dir);

    // A: non-directories that must go (absent in target, or a dir there).
    for &p in &paths {
        if cur(p).is_some_and(|e| e.kind != EntryKind::Dir) && (tgt(p).is_none() || is_dir(tgt(p)))
        {
            let r = open_parent(root, p).and_then(|(d, n)| d.remove_file_or_symlink(n));
            if let Err(e) = r {
                if e.kind() != std::io::ErrorKind::NotFound {
                    failed.push(format!("{p}: cannot remove: {e}"));
                }
            }
        }
    }
    // B: directories that must go, deepest first.
    let mut rm_dirs: Vec<&str> = paths
        .iter()
        .copied()
        .filter(|p| is_dir(cur(p)) && !is_dir(tgt(p)))
        .collect();
    rm_dirs.sort_by_key(|p| std::cmp::Reverse(depth(p)));
    for p in rm_dirs {
        let r = open_parent(root, p).and_then(|(d, n)| d.remove_dir(n));
        if let Err(e) = r {
            if e.kind() != std::io::ErrorKind::NotFound {
                failed.push(format!(
                    "{p}: cannot remove directory (it holds files the rollback does not touch): {e}"
                ));
            }
        }
    }
    // C: directories to create, shallowest first.
    let mut mk_dirs: Vec<&str> = paths
        .iter()
        .copied()
        .filter(|p| is_dir(tgt(p)) && !is_dir(cur(p)))
        .collect();
    mk_dirs.sort_by_key(|p| depth(p));
    for p in mk_dirs {
        let r = open_parent(root, p).and_then(|(d, n)| {
            d.create_dir(n)?;
            chown_fd(dir_fd(&d, n)?, owner)
        });
        if let Err(e) = r {
            failed.push(format!("{p}: cannot create directory: {e}"));
        }
    }
    // D: files and symlinks to write.
    for &p in &paths {
        if let Some(e) = tgt(p).filter(|e| e.kind != EntryKind::Dir) {
            if let Err(reason) = write_entry(root, blobs, p, e, owner) {
                failed.push(format!("{p}: {reason}"));
            }
        }
    }
    // E: directory modes, deepest first (a read-only parent last).
    let mut modes: Vec<(&str, u32)> = paths
        .iter()
        .copied()
        .filter_map(|p| {
            tgt(p)
                .filter(|e| e.kind == EntryKind::Dir)
                .map(|e| (p, e.mode))
        })
        .collect();
    modes.sort_by_key(|(p, _)| std::cmp::Reverse(depth(p)));
    for (p, mode) in modes {
        let r = open_parent(root, p)
            .and_then(|(d, n)| dir_fd(&d, n))
            .and_then(|sub| chmod_fd(&sub, mode & MODE_MASK));
        if let Err(e) = r {
            failed.push(format!("{p}: cannot set directory mode: {e}"));
        }
    }
    if let Err(e) = dir_fd(root, ".").and_then(|f| nix::unistd::syncfs(&f).map_err(Into::into)) {
        failed.push(format!(".: syncfs failed: {e}"));
    }
    failed
}
