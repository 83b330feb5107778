//! The command's filesystem view: a fresh tmpfs root, read-only binds of the
//! system and toolchains, private tmpfs for scratch dirs and `$HOME`, a
//! minimal `/dev`, a fresh `/proc`, the workspace, protected paths, then
//! `pivot_root` (mount(2), mount_setattr(2), pivot_root(2), open_tree(2),
//! move_mount(2)).
//!
//! Sources are opened as `O_PATH` fds by the helper *before* the clone (with
//! the helper's credentials), and bound from `/proc/self/fd/N` in the child,
//! so no host path is looked up again after the namespaces exist.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where the new root is assembled (a directory of the copied host tree,
/// covered by our tmpfs in our private mount namespace only).
const BASE: &str = "/tmp";

pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(crate) const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// `struct mount_attr` (linux/mount.h).
#[repr(C)]
pub(crate) struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

/// One step of building the view, executed in order by the child.
#[derive(Debug)]
pub(crate) enum Op {
    /// A tmpfs at `dst` with `mode` and `size` bytes.
    Tmpfs { dst: PathBuf, mode: u32, size: u64 },
    /// Bind the host object `src` (an `O_PATH` fd) at `dst`.
    Bind {
        src: PathBuf,
        dst: PathBuf,
        file: bool,
        readonly: bool,
        device: bool,
    },
    /// Attach a detached (idmapped) mount at `dst`.
    Attach { mnt: OwnedFd, dst: PathBuf },
    /// A symlink at `dst` pointing to `target`.
    Symlink { target: PathBuf, dst: PathBuf },
    /// Hide `dst` under an empty read-only file or directory.
    Mask { dst: PathBuf, file: bool },
    /// A generated read-only file (passwd, group).
    File { dst: PathBuf, content: String },
    /// A fresh procfs.
    Proc { dst: PathBuf },
}

impl Op {
    pub(crate) fn dst(&self) -> &Path {
        match self {
            Op::Tmpfs { dst, .. }
            | Op::Bind { dst, .. }
            | Op::Attach { dst, .. }
            | Op::Symlink { dst, .. }
            | Op::Mask { dst, .. }
            | Op::File { dst, .. }
            | Op::Proc { dst } => dst,
        }
    }
}

pub(crate) type Fail = (&'static str, String);

fn errno_msg(what: &str, path: &Path) -> String {
    format!(
        "{what} {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    )
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

fn in_base(dst: &Path) -> PathBuf {
    let rel = dst.strip_prefix("/").unwrap_or(dst);
    Path::new(BASE).join(rel)
}

fn fd_path(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default()
}

fn sys_mount(
    src: Option<&CString>,
    dst: &CString,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    let fstype = fstype.map(|s| CString::new(s).unwrap_or_default());
    let data = data.map(|s| CString::new(s).unwrap_or_default());
    // SAFETY: all pointers are valid NUL-terminated strings or null.
    let r = unsafe {
        libc::mount(
            src.map_or(std::ptr::null(), |s| s.as_ptr()),
            dst.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr() as *const libc::c_void),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// mount_setattr(2) on `dirfd`/`path` (empty path: the fd itself).
pub(crate) fn mount_setattr(
    dirfd: RawFd,
    path: &CString,
    flags: libc::c_uint,
    attr: &MountAttr,
) -> std::io::Result<()> {
    // SAFETY: attr is a properly laid out struct mount_attr.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Adds `set` attributes (never clears any: locked flags stay) to the mount
/// at `path`, recursively when `recursive`.
fn add_attrs(path: &CString, set: u64, recursive: bool) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    mount_setattr(libc::AT_FDCWD, path, flags, &attr)
}

/// `mkdir -p` on the new root (mode 0755); existing directories are fine.
fn mkdir_p(p: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(p)
}

/// Runs `f`; when it fails with `ENOENT` (a missing parent), creates the
/// parent directories of `p` and runs it once more. Most parents exist (the
/// root tmpfs, `/dev`), so the common case costs one syscall.
fn with_parent<T>(p: &Path, mut f: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    match f() {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            if let Some(parent) = p.parent() {
                mkdir_p(parent)?;
            }
            f()
        }
        r => r,
    }
}

/// Creates an empty file at `p` (a bind target) unless something already
/// exists there (`O_CREAT | O_EXCL | O_NOFOLLOW`: an existing entry, even a
/// symlink, is left alone as before).
fn touch(p: &Path) -> std::io::Result<()> {
    let c = cstr(p);
    let r = with_parent(p, || {
        // SAFETY: valid C string; the fd is closed right away.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: our fresh fd.
        unsafe { libc::close(fd) };
        Ok(())
    });
    match r {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        r => r,
    }
}

/// Builds the view and pivots into it. Runs in the child, inside the new
/// user and mount namespaces, before anything of the command runs.
/// Opens every bind source `O_PATH` in the child's (copied) mount namespace:
/// a bind from an fd of another mount namespace fails with `EINVAL`. Runs
/// before the child drops to the sandbox id, with the helper's credentials.
pub(crate) fn open_sources(ops: &[Op]) -> Result<Vec<Option<OwnedFd>>, Fail> {
    ops.iter()
        .map(|op| match op {
            Op::Bind { src, .. } => {
                let c = cstr(src);
                // SAFETY: valid C string.
                let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
                if fd < 0 {
                    Err(("mount", errno_msg("open", src)))
                } else {
                    // SAFETY: fresh fd.
                    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
                }
            }
            _ => Ok(None),
        })
        .collect()
}

pub(crate) fn build(ops: &[Op], srcs: &[Option<OwnedFd>], root_size: u64) -> Result<(), Fail> {
    let root = CString::new("/").unwrap();
    // Nothing we do propagates back to the host.
    sys_mount(
        None,
        &root,
        None,
        (libc::MS_REC | libc::MS_PRIVATE) as _,
        None,
    )
    .map_err(|e| ("mount", format!("make / private: {e}")))?;
    let base = CString::new(BASE).unwrap();
    let opts = format!("mode=0755,size={root_size}");
    sys_mount(
        Some(&CString::new("tmpfs").unwrap()),
        &base,
        Some("tmpfs"),
        (libc::MS_NOSUID | libc::MS_NODEV) as _,
        Some(&opts),
    )
    .map_err(|e| ("mount", format!("root tmpfs: {e}")))?;

    for (op, src) in ops.iter().zip(srcs) {
        apply(op, src.as_ref()).map_err(|m| ("mount", m))?;
    }

    // pivot_root(".", "."): the old root ends up stacked under the new one
    // and is detached right away (pivot_root(2), "NOTES").
    std::env::set_current_dir(BASE).map_err(|e| ("pivot_root", format!("chdir: {e}")))?;
    let dot = CString::new(".").unwrap();
    // SAFETY: valid C strings.
    if unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) } != 0 {
        return Err(("pivot_root", errno_msg("pivot_root", Path::new(BASE))));
    }
    // SAFETY: valid C string.
    if unsafe { libc::umount2(dot.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(("pivot_root", errno_msg("detach old root", Path::new("/"))));
    }
    std::env::set_current_dir("/").map_err(|e| ("pivot_root", format!("chdir /: {e}")))?;
    Ok(())
}

/// Makes the root tmpfs read-only; last step of the view.
pub(crate) fn seal_root() -> Result<(), Fail> {
    add_attrs(&CString::new("/").unwrap(), MOUNT_ATTR_RDONLY, false)
        .map_err(|e| ("mount", format!("read-only root: {e}")))
}

fn apply(op: &Op, src: Option<&OwnedFd>) -> Result<(), String> {
    let dst = in_base(op.dst());
    let cdst = cstr(&dst);
    let err = |what: &str, e: std::io::Error| format!("{what} {}: {e}", op.dst().display());
    match op {
        Op::Tmpfs { mode, size, .. } => {
            mkdir_p(&dst).map_err(|e| err("mkdir", e))?;
            let opts = format!("mode={mode:o},size={size}");
            sys_mount(
                Some(&CString::new("tmpfs").unwrap()),
                &cdst,
                Some("tmpfs"),
                (libc::MS_NOSUID | libc::MS_NODEV) as _,
                Some(&opts),
            )
            .map_err(|e| err("tmpfs", e))
        }
        Op::Bind {
            file,
            readonly,
            device,
            ..
        } => {
            if *file {
                touch(&dst).map_err(|e| err("create", e))?;
            } else {
                mkdir_p(&dst).map_err(|e| err("mkdir", e))?;
            }
            let Some(src) = src else {
                return Err(format!("bind {}: source not opened", op.dst().display()));
            };
            let csrc = fd_path(src.as_raw_fd());
            sys_mount(
                Some(&csrc),
                &cdst,
                None,
                (libc::MS_BIND | libc::MS_REC) as _,
                None,
            )
            .map_err(|e| err("bind", e))?;
            let mut set = MOUNT_ATTR_NOSUID;
            if !device {
                set |= MOUNT_ATTR_NODEV;
            }
            if *readonly {
                set |= MOUNT_ATTR_RDONLY;
            }
            add_attrs(&cdst, set, true).map_err(|e| err("mount_setattr", e))
        }
        Op::Attach { mnt, .. } => {
            mkdir_p(&dst).map_err(|e| err("mkdir", e))?;
            let empty = CString::new("").unwrap();
            // SAFETY: valid fds and C strings (move_mount(2)).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_move_mount,
                    mnt.as_raw_fd(),
                    empty.as_ptr(),
                    libc::AT_FDCWD,
                    cdst.as_ptr(),
                    0x4u32, // MOVE_MOUNT_F_EMPTY_PATH
                )
            };
            if r != 0 {
                return Err(err("move_mount", std::io::Error::last_os_error()));
            }
            Ok(())
        }
        Op::Symlink { target, .. } => {
            with_parent(&dst, || std::os::unix::fs::symlink(target, &dst))
                .map_err(|e| err("symlink", e))
        }
        Op::Mask { file, .. } => {
            if std::fs::symlink_metadata(&dst).is_err() {
                return Ok(());
            }
            let opts = if *file { "size=0" } else { "mode=0555,size=0" };
            if *file {
                // An empty read-only file: bind /dev/null would hand out a
                // writable device; a tmpfs cannot cover a file, so bind an
                // empty file from our root tmpfs.
                let empty = in_base(Path::new("/.warden-empty"));
                touch(&empty).map_err(|e| err("create", e))?;
                sys_mount(Some(&cstr(&empty)), &cdst, None, libc::MS_BIND as _, None)
                    .map_err(|e| err("mask", e))?;
                let _ = opts;
            } else {
                sys_mount(
                    Some(&CString::new("tmpfs").unwrap()),
                    &cdst,
                    Some("tmpfs"),
                    (libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RDONLY) as _,
                    Some(opts),
                )
                .map_err(|e| err("mask", e))?;
            }
            add_attrs(
                &cdst,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                false,
            )
            .map_err(|e| err("mount_setattr", e))
        }
        Op::File { content, .. } => {
            if std::fs::symlink_metadata(&dst).is_err() {
                return Ok(());
            }
            let name = op.dst().file_name().unwrap_or(OsStr::new("f"));
            let staged =
                in_base(Path::new("/")).join(format!(".warden-{}", name.to_string_lossy()));
            std::fs::write(&staged, content).map_err(|e| err("write", e))?;
            sys_mount(Some(&cstr(&staged)), &cdst, None, libc::MS_BIND as _, None)
                .map_err(|e| err("bind", e))?;
            add_attrs(
                &cdst,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                false,
            )
            .map_err(|e| err("mount_setattr", e))?;
            // The mount keeps the inode; the staging name goes away.
            let _ = std::fs::remove_file(&staged);
            Ok(())
        }
        Op::Proc { .. } => {
            mkdir_p(&dst).map_err(|e| err("mkdir", e))?;
            sys_mount(
                Some(&CString::new("proc").unwrap()),
                &cdst,
                Some("proc"),
                (libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC) as _,
                None,
            )
            .map_err(|e| err("proc", e))
        }
    }
}

/// openat2(2) `struct open_how`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

fn openat2(dirfd: RawFd, rel: &Path, resolve: u64) -> std::io::Result<OwnedFd> {
    let c = cstr(rel);
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    // SAFETY: valid pointers; size matches struct open_how.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        // SAFETY: openat2 returned a new fd.
        Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
    }
}

/// Makes the protected paths read-only inside the (already mounted)
/// workspace; runs after `pivot_root`, so symlinks resolve as the command
/// would see them.
///
/// - absent: stays absent (nothing is created in the user's repository);
/// - reached without symlinks: every directory between the workspace root
///   and it becomes a mount point (so it cannot be renamed away), and it is
///   bound read-only onto itself;
/// - crossing a symlink that resolves inside the workspace: refused (fail
///   closed); resolving outside the workspace: nothing there is writable.
pub(crate) fn protect(workspace: &Path, rels: &[PathBuf]) -> Result<(), Fail> {
    let ws = std::fs::File::open(workspace).map_err(|e| {
        (
            "protect",
            format!("open workspace {}: {e}", workspace.display()),
        )
    })?;
    let wfd = ws.as_raw_fd();
    let strict = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    let mut anchored: Vec<PathBuf> = Vec::new();
    for rel in rels {
        match openat2(wfd, rel, strict) {
            Ok(probe) => {
                drop(probe);
                // Anchor the ancestors first (shallow to deep).
                let mut ancestors: Vec<&Path> = rel.ancestors().skip(1).collect();
                ancestors.reverse();
                for a in ancestors {
                    if a.as_os_str().is_empty() || anchored.iter().any(|d| d == a) {
                        continue;
                    }
                    let afd = openat2(wfd, a, strict)
                        .map_err(|e| ("protect", format!("{}: {e}", a.display())))?;
                    let p = fd_path(afd.as_raw_fd());
                    sys_mount(Some(&p), &p, None, libc::MS_BIND as _, None)
                        .map_err(|e| ("protect", format!("anchor {}: {e}", a.display())))?;
                    anchored.push(a.to_path_buf());
                }
                // Opened after the anchors, so it lies on the top mount.
                let fd = openat2(wfd, rel, strict)
                    .map_err(|e| ("protect", format!("{}: {e}", rel.display())))?;
                let p = fd_path(fd.as_raw_fd());
                sys_mount(
                    Some(&p),
                    &p,
                    None,
                    (libc::MS_BIND | libc::MS_REC) as _,
                    None,
                )
                .map_err(|e| ("protect", format!("bind {}: {e}", rel.display())))?;
                // Re-resolve: the fd points below the new mount.
                let fd2 = openat2(wfd, rel, strict)
                    .map_err(|e| ("protect", format!("{}: {e}", rel.display())))?;
                let attr = MountAttr {
                    attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                    attr_clr: 0,
                    propagation: 0,
                    userns_fd: 0,
                };
                mount_setattr(
                    fd2.as_raw_fd(),
                    &CString::new("").unwrap(),
                    AT_RECURSIVE | libc::AT_EMPTY_PATH as libc::c_uint,
                    &attr,
                )
                .map_err(|e| ("protect", format!("read-only {}: {e}", rel.display())))?;
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::EXDEV)) => {
                // A symlink on the way: where does it really go?
                let full = workspace.join(rel);
                if let Ok(real) = std::fs::canonicalize(&full) {
                    if real.starts_with(workspace) {
                        return Err((
                            "protect",
                            format!(
                                "protected path {} crosses a symlink into the workspace ({}); refusing to run",
                                rel.display(),
                                real.display()
                            ),
                        ));
                    }
                }
            }
            Err(e) => return Err(("protect", format!("{}: {e}", rel.display()))),
        }
    }
    Ok(())
}

/// A detached clone of the mount at `path` (open_tree(2) `OPEN_TREE_CLONE`),
/// idmapped through `userns` (mount_setattr(2) `MOUNT_ATTR_IDMAP`), nosuid,
/// nodev, and read-only when `readonly`. Needs `CAP_SYS_ADMIN` over the
/// filesystem; fails (`EINVAL`, `EPERM`, `EOPNOTSUPP`) on filesystems that
/// cannot be idmapped.
pub(crate) fn idmapped_clone(
    path: &Path,
    userns: &OwnedFd,
    readonly: bool,
) -> Result<OwnedFd, String> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| "NUL in path".to_string())?;
    // SAFETY: open_tree(2) with a valid path.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            (1u32 /* OPEN_TREE_CLONE */ | libc::O_CLOEXEC as u32) as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(format!("open_tree: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh fd.
    let mnt = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let mut set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if readonly {
        set |= MOUNT_ATTR_RDONLY;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    mount_setattr(
        mnt.as_raw_fd(),
        &CString::new("").unwrap(),
        libc::AT_EMPTY_PATH as libc::c_uint,
        &attr,
    )
    .map_err(|e| format!("mount_setattr(MOUNT_ATTR_IDMAP): {e}"))?;
    Ok(mnt)
}
