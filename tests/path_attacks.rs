//! Path-attack suite of the confined file tools (issue #5).
//!
//! Every case builds a real workspace next to a real "outside" directory,
//! attacks it through `warden_daemon::workspace` (and, at the end, through a
//! real `wardend` and the `warden fs` CLI), and asserts both the refusal and
//! that the outside tree is byte-for-byte unchanged (contents, modes, link
//! counts, no new entries).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use warden_daemon::workspace::{Workspace, WorkspaceError, ABSENT};

const SECRET: &str = "TOP SECRET outside content\n";

struct Fx {
    _t: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
    out: PathBuf,
    w: Workspace,
}

fn fx() -> Fx {
    let t = tempfile::Builder::new()
        .prefix("pa-")
        .tempdir_in("/tmp")
        .unwrap();
    let base = t.path().canonicalize().unwrap();
    let root = base.join("ws");
    let out = base.join("outside");
    fs::create_dir_all(root.join("sub/deeper")).unwrap();
    fs::write(root.join("inside.txt"), "inside\n").unwrap();
    fs::create_dir_all(out.join("dir")).unwrap();
    fs::write(out.join("secret.txt"), SECRET).unwrap();
    fs::write(out.join("dir/also.txt"), "also\n").unwrap();
    let w = Workspace::open(&root).unwrap();
    Fx {
        _t: t,
        base,
        root,
        out,
        w,
    }
}

/// Everything observable about a tree: per path, kind + content + mode + nlink.
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    fn walk(d: &Path, base: &Path, m: &mut BTreeMap<String, String>) {
        let mut es: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        es.sort();
        for p in es {
            let md = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let v = if md.file_type().is_symlink() {
                format!("link {}", fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                walk(&p, base, m);
                format!("dir {:o}", md.mode())
            } else {
                format!(
                    "file {:o} n{} {:?}",
                    md.mode(),
                    md.nlink(),
                    fs::read(&p).unwrap()
                )
            };
            m.insert(rel, v);
        }
    }
    walk(dir, dir, &mut m);
    m
}

impl Fx {
    /// Runs `attack`, which must be refused with PermissionDenied whose
    /// message names `component`; the outside tree must not change.
    fn denied<T: std::fmt::Debug>(
        &self,
        component: &str,
        attack: impl FnOnce(&Workspace) -> Result<T, WorkspaceError>,
    ) {
        let before = snapshot(&self.out);
        let r = attack(&self.w);
        match r {
            Err(e @ WorkspaceError::PermissionDenied { .. }) => {
                assert!(
                    e.to_string().contains(component),
                    "message {e} does not name {component:?}"
                );
            }
            other => panic!("expected PermissionDenied naming {component:?}, got {other:?}"),
        }
        assert_eq!(snapshot(&self.out), before, "the outside tree changed");
    }

    /// Like `denied`, for refusals that are InvalidArgument.
    fn invalid<T: std::fmt::Debug>(
        &self,
        attack: impl FnOnce(&Workspace) -> Result<T, WorkspaceError>,
    ) -> String {
        let before = snapshot(&self.out);
        let r = attack(&self.w);
        let msg = match r {
            Err(e @ WorkspaceError::InvalidArgument(_)) => e.to_string(),
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        assert_eq!(snapshot(&self.out), before, "the outside tree changed");
        msg
    }

    /// The PermissionDenied message of `attack` (which must be refused).
    fn denied_message<T: std::fmt::Debug>(
        &self,
        attack: impl FnOnce(&Workspace) -> Result<T, WorkspaceError>,
    ) -> String {
        match attack(&self.w) {
            Err(e @ WorkspaceError::PermissionDenied { .. }) => e.to_string(),
            other => panic!("expected PermissionDenied, got {other:?}"),
        }
    }

    fn secret(&self) -> PathBuf {
        self.out.join("secret.txt")
    }
}

// --- lexical escapes -------------------------------------------------------

#[test]
fn dotdot_read_and_write() {
    let f = fx();
    f.denied("..", |w| w.read_file("../outside/secret.txt", 0, None));
    f.denied("..", |w| {
        w.write_file("../outside/secret.txt", b"pwned", None, None)
    });
    f.denied("..", |w| w.write_file("../x", b"pwned", None, None));
    assert!(!f.base.join("x").exists());
}

#[test]
fn nested_dotdot_escapes() {
    let f = fx();
    f.denied("..", |w| {
        w.read_file("sub/../../outside/secret.txt", 0, None)
    });
    f.denied("..", |w| {
        w.write_file("sub/deeper/../../../outside/secret.txt", b"x", None, None)
    });
    f.denied("..", |w| w.write_file("./sub/../../x", b"x", None, None));
    f.denied("..", |w| w.write_file("missing/../../x", b"x", None, None));
    assert!(!f.base.join("x").exists());
    assert!(!f.root.join("missing").exists());
}

#[test]
fn absolute_paths() {
    let f = fx();
    f.denied("/etc", |w| w.read_file("/etc/passwd", 0, None));
    let abs = f.secret().display().to_string();
    f.denied("absolute", |w| w.write_file(&abs, b"pwned", None, None));
    f.denied("absolute", |w| w.read_file("//etc/passwd", 0, None));
    f.denied("absolute", |w| w.list_dir("/", 1, 0));
    f.denied("absolute", |w| {
        w.grep("root", "/etc", false, 0, &|_: &str, s: &str| {
            Some((s.to_string(), 0))
        })
    });
}

#[test]
fn proc_self_root() {
    let f = fx();
    f.denied("/proc", |w| {
        w.read_file("/proc/self/root/etc/passwd", 0, None)
    });
    symlink("/proc/self/root", f.root.join("p")).unwrap();
    f.denied("p", |w| w.read_file("p/etc/passwd", 0, None));
    f.denied("p", |w| w.write_file("p/tmp/pwned", b"x", None, None));
    assert!(!Path::new("/tmp/pwned").exists());
}

#[test]
fn nul_bytes_and_control_characters() {
    let f = fx();
    f.denied("NUL", |w| {
        w.read_file("inside.txt\0../../etc/passwd", 0, None)
    });
    f.denied("NUL", |w| w.write_file("a\0b", b"x", None, None));
    f.denied("control character", |w| {
        w.write_file("evil\nname", b"x", None, None)
    });
    f.denied("control character", |w| {
        w.write_file("sub/\x1b[31mred", b"x", None, None)
    });
    assert_eq!(fs::read_dir(&f.root).unwrap().count(), 2);
}

// --- symlinks ----------------------------------------------------------------

#[test]
fn symlink_to_filesystem_root() {
    let f = fx();
    symlink("/", f.root.join("rootlink")).unwrap();
    f.denied("rootlink", |w| w.read_file("rootlink/etc/passwd", 0, None));
    let rel = format!("rootlink{}", f.secret().display());
    f.denied("rootlink", |w| w.write_file(&rel, b"pwned", None, None));
    f.denied("rootlink", |w| w.list_dir("rootlink", 1, 0));
}

#[test]
fn symlink_chain_leaving_the_root() {
    let f = fx();
    symlink("l2", f.root.join("l1")).unwrap();
    symlink("sub/l3", f.root.join("l2")).unwrap();
    symlink("../../outside", f.root.join("sub/l3")).unwrap();
    f.denied("sub/l3", |w| w.read_file("l1/secret.txt", 0, None));
    f.denied("sub/l3", |w| {
        w.write_file("l1/secret.txt", b"pwned", None, None)
    });
    f.denied("sub/l3", |w| {
        w.write_file("l1/new.txt", b"pwned", None, None)
    });
}

#[test]
fn symlink_in_the_middle_of_a_path() {
    let f = fx();
    symlink(&f.out, f.root.join("sub/mid")).unwrap();
    f.denied("sub/mid", |w| w.read_file("sub/mid/dir/also.txt", 0, None));
    f.denied("sub/mid", |w| {
        w.write_file("sub/mid/dir/also.txt", b"pwned", None, None)
    });
    f.denied("sub/mid", |w| {
        w.write_file("sub/mid/dir/new/deep.txt", b"pwned", None, None)
    });
}

#[test]
fn dangling_symlink_to_outside_then_write() {
    let f = fx();
    symlink("../outside/created.txt", f.root.join("dang")).unwrap();
    symlink(f.out.join("created2.txt"), f.root.join("dang2")).unwrap();
    symlink("../outside/newdir/x", f.root.join("dang3")).unwrap();
    f.denied("dang", |w| {
        w.write_file("dang", b"pwned", Some(ABSENT), None)
    });
    f.denied("dang2", |w| w.write_file("dang2", b"pwned", None, None));
    f.denied("dang3", |w| w.write_file("dang3", b"pwned", None, None));
    assert!(!f.out.join("created.txt").exists());
    assert!(!f.out.join("newdir").exists());
}

#[test]
fn symlink_to_an_outside_file_read_and_write() {
    let f = fx();
    symlink("../outside/secret.txt", f.root.join("rel")).unwrap();
    symlink(f.secret(), f.root.join("abs")).unwrap();
    for l in ["rel", "abs"] {
        f.denied(l, |w| w.read_file(l, 0, None));
        f.denied(l, |w| w.write_file(l, b"pwned", None, None));
        f.denied(l, |w| {
            w.grep("SECRET", l, false, 0, &|_: &str, s: &str| {
                Some((s.to_string(), 0))
            })
        });
    }
    assert_eq!(fs::read_to_string(f.secret()).unwrap(), SECRET);
}

#[test]
fn walks_never_follow_symlinks_out() {
    let f = fx();
    symlink("../outside", f.root.join("sub/out")).unwrap();
    symlink(f.secret(), f.root.join("sub/s")).unwrap();
    let g =
        f.w.grep("SECRET", "", false, 0, &|_: &str, s: &str| {
            Some((s.to_string(), 0))
        })
        .unwrap();
    assert!(g.matches.is_empty(), "{:?}", g.matches);
    let l = f.w.list_dir("", 10, 0).unwrap();
    assert!(
        l.entries.iter().all(|e| !e.path.contains("secret")),
        "{:?}",
        l.entries
    );
    let kinds: Vec<_> = l
        .entries
        .iter()
        .filter(|e| e.path.starts_with("sub/"))
        .map(|e| (e.path.as_str(), e.kind.as_str()))
        .collect();
    assert!(kinds.contains(&("sub/out", "symlink")), "{kinds:?}");
}

#[test]
fn symlink_to_the_root_then_dotdot() {
    let f = fx();
    symlink("..", f.root.join("sub/up")).unwrap();
    // Inside: sub/up is the root itself.
    assert_eq!(
        f.w.read_file("sub/up/inside.txt", 0, None).unwrap().content,
        "inside\n"
    );
    f.denied("..", |w| {
        w.read_file("sub/up/../outside/secret.txt", 0, None)
    });
    f.denied("..", |w| {
        w.write_file("sub/up/../outside/secret.txt", b"x", None, None)
    });
    symlink("sub/up/..", f.root.join("top")).unwrap();
    f.denied("top", |w| {
        w.write_file("top/outside/secret.txt", b"x", None, None)
    });
}

#[test]
fn climbing_symlink_that_comes_back_is_refused() {
    // `../ws/inside.txt` names an inside file, but only by passing through
    // the parent of the root (whose contents the workspace must not depend
    // on): refused, like openat2(RESOLVE_BENEATH) does.
    let f = fx();
    symlink("../ws/inside.txt", f.root.join("back")).unwrap();
    f.denied("back", |w| w.read_file("back", 0, None));
    f.denied("back", |w| w.write_file("back", b"x", None, None));
    assert_eq!(
        fs::read_to_string(f.root.join("inside.txt")).unwrap(),
        "inside\n"
    );
}

#[test]
fn inside_symlinks_are_followed_positive_control() {
    let f = fx();
    symlink("sub/deeper", f.root.join("rel")).unwrap();
    symlink(f.root.join("sub"), f.root.join("abs")).unwrap();
    let c = f.w.write_file("rel/x.txt", b"1", None, None).unwrap();
    assert_eq!(c.path, "sub/deeper/x.txt");
    assert_eq!(
        f.w.read_file("abs/deeper/x.txt", 0, None).unwrap().content,
        "1"
    );
    let ch = f.w.apply_patch("--- a/abs/deeper/x.txt\n+++ b/abs/deeper/x.txt\n@@ -1 +1 @@\n-1\n\\ No newline at end of file\n+2\n").unwrap();
    assert_eq!(ch[0].path, "sub/deeper/x.txt");
    assert_eq!(
        fs::read_to_string(f.root.join("sub/deeper/x.txt")).unwrap(),
        "2\n"
    );
    assert!(fs::symlink_metadata(f.root.join("rel"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn list_and_grep_escapes() {
    let f = fx();
    let id = |_: &str, s: &str| Some((s.to_string(), 0));
    f.denied("..", |w| w.list_dir("..", 1, 0));
    f.denied("..", |w| w.list_dir("sub/../..", 1, 0));
    f.denied("..", |w| w.grep("SECRET", "..", false, 0, &id));
    f.denied("..", |w| {
        w.grep("SECRET", "sub/../../outside", false, 0, &id)
    });
    symlink("../outside", f.root.join("o")).unwrap();
    f.denied("o", |w| w.list_dir("o", 3, 0));
    f.denied("o", |w| w.grep(".", "o/dir", false, 0, &id));
}

// --- hard links, special files ----------------------------------------------

#[test]
fn hard_link_to_outside_file_is_replaced_not_written_through() {
    let f = fx();
    fs::hard_link(f.secret(), f.root.join("hl")).unwrap();
    fs::hard_link(f.out.join("dir/also.txt"), f.root.join("hl2")).unwrap();
    let c = f.w.write_file("hl", b"replaced\n", None, None).unwrap();
    assert_eq!(
        c.old_hash,
        warden_daemon::workspace::hash_bytes(SECRET.as_bytes())
    );
    assert_eq!(fs::read_to_string(f.secret()).unwrap(), SECRET);
    assert_eq!(fs::metadata(f.secret()).unwrap().nlink(), 1);
    assert_eq!(fs::read_to_string(f.root.join("hl")).unwrap(), "replaced\n");
    // And through a patch.
    f.w.apply_patch("--- a/hl2\n+++ b/hl2\n@@ -1 +1 @@\n-also\n+patched\n")
        .unwrap();
    assert_eq!(
        fs::read_to_string(f.out.join("dir/also.txt")).unwrap(),
        "also\n"
    );
    assert_eq!(fs::read_to_string(f.root.join("hl2")).unwrap(), "patched\n");
}

#[test]
fn fifo_is_refused_without_blocking() {
    let f = fx();
    let fifo = f.root.join("pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let t0 = Instant::now();
    let m = f.invalid(|w| w.read_file("pipe", 0, None));
    assert!(m.contains("FIFO"), "{m}");
    f.invalid(|w| w.write_file("pipe", b"x", None, None));
    f.invalid(|w| w.apply_patch("--- a/pipe\n+++ b/pipe\n@@ -1 +1 @@\n-a\n+b\n"));
    // Walks skip it.
    f.w.grep("x", "", false, 0, &|_: &str, s: &str| {
        Some((s.to_string(), 0))
    })
    .unwrap();
    let l = f.w.list_dir("", 1, 0).unwrap();
    assert!(l
        .entries
        .iter()
        .any(|e| e.path == "pipe" && e.kind.as_str() == "other"));
    assert!(t0.elapsed() < Duration::from_secs(5), "blocked on a FIFO");
    assert!(fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo_like());
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}
impl FifoLike for fs::FileType {
    fn is_fifo_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.is_fifo()
    }
}

#[test]
fn device_names_are_refused() {
    let f = fx();
    // A symlink named like a device, pointing at one.
    symlink("/dev/zero", f.root.join("zero")).unwrap();
    f.denied("zero", |w| w.read_file("zero", 0, None));
    // A real character device node inside the workspace (needs CAP_MKNOD).
    let node = f.root.join("null");
    match nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 5),
    ) {
        Ok(()) => {
            let t0 = Instant::now();
            let m = f.invalid(|w| w.read_file("null", 0, None));
            assert!(m.contains("device"), "{m}");
            f.invalid(|w| w.write_file("null", b"x", None, None));
            f.w.grep("x", "", false, 0, &|_: &str, s: &str| {
                Some((s.to_string(), 0))
            })
            .unwrap();
            assert!(t0.elapsed() < Duration::from_secs(5));
        }
        Err(e) => assert!(
            !warden_tests::require_sandbox(),
            "mknod needed for this case: {e}"
        ),
    }
}

#[test]
fn setuid_bits_are_dropped_on_replace() {
    let f = fx();
    let p = f.root.join("tool");
    fs::write(&p, "old").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o6755)).unwrap();
    let c = f.w.write_file("tool", b"new", None, None).unwrap();
    assert_eq!(c.new_mode, Some(0o755));
    assert_eq!(
        fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
        0o755
    );
    // A requested mode cannot set them either.
    f.w.write_file("tool2", b"x", None, Some(0o6777)).unwrap();
    assert_eq!(
        fs::metadata(f.root.join("tool2"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7000,
        0
    );
}

#[test]
fn stale_base_hash_replay_changes_nothing() {
    let f = fx();
    let c1 = f.w.write_file("r.txt", b"v1", Some(ABSENT), None).unwrap();
    let c2 =
        f.w.write_file("r.txt", b"v2", Some(&c1.new_hash), None)
            .unwrap();
    // Replaying the first write (same base) is refused with the current hash.
    match f.w.write_file("r.txt", b"v2", Some(&c1.new_hash), None) {
        Err(WorkspaceError::FailedPrecondition { current_hash, .. }) => {
            assert_eq!(current_hash, c2.new_hash)
        }
        other => panic!("{other:?}"),
    }
    match f.w.write_file("r.txt", b"v1", Some(ABSENT), None) {
        Err(WorkspaceError::FailedPrecondition { current_hash, .. }) => {
            assert_eq!(current_hash, c2.new_hash)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read_to_string(f.root.join("r.txt")).unwrap(), "v2");
}

// --- size and shape -----------------------------------------------------------

#[test]
fn very_long_paths_and_deep_nesting() {
    let f = fx();
    let long = "a/".repeat(2100) + "x";
    f.invalid(|w| w.write_file(&long, b"x", None, None));
    let name = "n".repeat(300);
    f.invalid(|w| w.write_file(&name, b"x", None, None));
    let deep = "d/".repeat(300) + "x";
    f.invalid(|w| w.write_file(&deep, b"x", None, None));
    // Deep climbing out after going down.
    let climb = "sub/".repeat(40) + &"../".repeat(41) + "outside/secret.txt";
    f.denied("..", |w| w.write_file(&climb, b"x", None, None));
    assert!(!f.root.join("a").exists() && !f.root.join("d").exists());
    // A legitimately deep path works (and stays inside).
    let ok = "k/".repeat(60) + "leaf.txt";
    f.w.write_file(&ok, b"deep", None, None).unwrap();
    assert_eq!(f.w.read_file(&ok, 0, None).unwrap().content, "deep");
}

#[test]
fn symlink_loops_end() {
    let f = fx();
    symlink("loop2", f.root.join("loop1")).unwrap();
    symlink("loop1", f.root.join("loop2")).unwrap();
    let m = f.invalid(|w| w.read_file("loop1", 0, None));
    assert!(m.contains("symlinks"), "{m}");
    f.invalid(|w| w.write_file("loop1/x", b"x", None, None));
}

#[test]
fn names_with_newlines_and_invalid_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let f = fx();
    let bad = f.root.join(std::ffi::OsStr::from_bytes(b"bad\xffname"));
    fs::write(&bad, "token in a badly named file\n").unwrap();
    let nl = f.root.join("two\nlines");
    fs::write(&nl, "x\n").unwrap();
    let l = f.w.list_dir("", 1, 0).unwrap();
    let paths: Vec<_> = l.entries.iter().map(|e| e.path.clone()).collect();
    assert!(paths.contains(&"bad\\xffname".to_string()), "{paths:?}");
    assert!(paths.contains(&"two\\nlines".to_string()), "{paths:?}");
    assert!(paths.iter().all(|p| !p.contains('\n')));
    // Grep skips what it cannot name safely; nothing crashes.
    let g =
        f.w.grep("token", "", false, 0, &|_: &str, s: &str| {
            Some((s.to_string(), 0))
        })
        .unwrap();
    assert!(g.matches.is_empty());
    f.denied("control character", |w| w.read_file("two\nlines", 0, None));
    f.denied("control character", |w| {
        w.write_file("two\nlines", b"y", None, None)
    });
    assert!(matches!(
        f.w.read_file("bad\u{fffd}name", 0, None),
        Err(WorkspaceError::NotFound(_))
    ));
    assert_eq!(fs::read_to_string(&nl).unwrap(), "x\n");
}

// --- races --------------------------------------------------------------------

/// `renameat2(RENAME_EXCHANGE)`: atomically swaps two names (rename(2)).
fn exchange(a: &Path, b: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
    let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
    unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        ) == 0
    }
}

/// Swaps `a` and `b` back and forth until stopped; returns the swap count.
fn swapper(a: PathBuf, b: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            if exchange(&a, &b) {
                n += 1;
            }
        }
        n
    })
}

/// A directory swapped for a symlink to the outside while writes are in
/// flight (bounded time): no write may land outside.
#[test]
fn directory_swapped_for_symlink_during_writes() {
    let f = fx();
    let d = f.root.join("d");
    fs::create_dir(&d).unwrap();
    symlink(&f.out, f.root.join("d.lnk")).unwrap();
    symlink("../outside", f.root.join("sub/x.lnk")).unwrap();
    fs::create_dir(f.root.join("sub/x")).unwrap();
    let before = snapshot(&f.out);
    let stop = Arc::new(AtomicBool::new(false));
    let s1 = swapper(d.clone(), f.root.join("d.lnk"), stop.clone());
    let s2 = swapper(f.root.join("sub/x"), f.root.join("sub/x.lnk"), stop.clone());
    let (mut ok, mut refused) = (0u64, 0u64);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        for p in [
            "d/f.txt",
            "d/secret.txt",
            "sub/x/../x/secret.txt",
            "sub/x/new/deep.txt",
        ] {
            match f.w.write_file(p, b"inside only", None, None) {
                Ok(_) => ok += 1,
                Err(_) => refused += 1,
            }
        }
        if let Ok(r) = f.w.read_file("d/secret.txt", 0, None) {
            assert_ne!(r.content, SECRET);
        }
        let _ =
            f.w.apply_patch("--- /dev/null\n+++ b/d/p.txt\n@@ -0,0 +1 @@\n+x\n");
        let _ =
            f.w.apply_patch("--- a/d/p.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n");
    }
    stop.store(true, Ordering::Relaxed);
    let (n1, n2) = (s1.join().unwrap(), s2.join().unwrap());
    eprintln!("directory swap race: {n1}+{n2} swaps, {ok} writes inside, {refused} refused");
    assert!(n1 > 100 && n2 > 100, "the swappers barely ran ({n1}, {n2})");
    assert!(
        ok > 0 && refused > 0,
        "ok {ok}, refused {refused}: the race was not exercised"
    );
    assert_eq!(snapshot(&f.out), before, "a write landed outside");
}

/// A file swapped for a symlink to an outside file while it is read and
/// written: the outside content is never returned nor changed.
#[test]
fn file_swapped_for_symlink_during_reads_and_writes() {
    let f = fx();
    let p = f.root.join("f");
    fs::write(&p, "inside\n").unwrap();
    symlink(f.secret(), f.root.join("f.lnk")).unwrap();
    let before = snapshot(&f.out);
    let stop = Arc::new(AtomicBool::new(false));
    let s = swapper(p.clone(), f.root.join("f.lnk"), stop.clone());
    let t0 = Instant::now();
    let (mut reads, mut refused) = (0, 0);
    while t0.elapsed() < Duration::from_millis(1000) {
        match f.w.read_file("f", 0, None) {
            Ok(r) => {
                assert_eq!(r.content, "inside\n");
                reads += 1;
            }
            Err(_) => refused += 1,
        }
    }
    // Writes race too; they may replace the symlink entry, never its target.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(500) {
        let _ = f.w.write_file("f", b"inside\n", None, None);
        let _ = f.w.write_file("f.lnk", b"inside\n", None, None);
    }
    stop.store(true, Ordering::Relaxed);
    s.join().unwrap();
    eprintln!("file swap race: {reads} reads of the inside file, {refused} refused");
    assert!(reads > 0 && refused > 0, "reads {reads}, refused {refused}");
    assert_eq!(snapshot(&f.out), before);
}

// --- patches -------------------------------------------------------------------

#[test]
fn patch_headers_that_escape() {
    let f = fx();
    let p = "--- a/../outside/secret.txt\n+++ b/../outside/secret.txt\n@@ -1 +1 @@\n-TOP SECRET outside content\n+pwned\n";
    f.denied("..", |w| w.apply_patch(p));
    let p = "diff --git a/../../x b/../../x\nnew file mode 100644\n--- /dev/null\n+++ b/../../x\n@@ -0,0 +1 @@\n+pwned\n";
    f.denied("..", |w| w.apply_patch(p));
    let abs = f.secret().display().to_string();
    let p = format!("--- {abs}\n+++ {abs}\n@@ -1 +1 @@\n-TOP SECRET outside content\n+pwned\n");
    f.denied("absolute", |w| w.apply_patch(&p));
    let p = "--- /dev/null\n+++ \"b/evil\\nname\"\n@@ -0,0 +1 @@\n+x\n";
    f.denied("control character", |w| w.apply_patch(p));
    assert!(!f.base.join("x").exists());
}

#[test]
fn patch_renames_onto_an_outside_path() {
    let f = fx();
    let p = "diff --git a/inside.txt b/../outside/stolen.txt\nsimilarity index 100%\nrename from inside.txt\nrename to ../outside/stolen.txt\n";
    f.denied("..", |w| w.apply_patch(p));
    symlink("../outside", f.root.join("o")).unwrap();
    let p = "diff --git a/inside.txt b/o/stolen.txt\nsimilarity index 100%\nrename from inside.txt\nrename to o/stolen.txt\n";
    f.denied("o", |w| w.apply_patch(p));
    let p =
        "diff --git a/inside.txt b/o/secret.txt\nrename from inside.txt\nrename to o/secret.txt\n";
    f.denied("o", |w| w.apply_patch(p));
    assert_eq!(
        fs::read_to_string(f.root.join("inside.txt")).unwrap(),
        "inside\n"
    );
}

#[test]
fn patch_creates_through_a_symlinked_directory() {
    let f = fx();
    symlink(&f.out, f.root.join("evil")).unwrap();
    let p = "diff --git a/evil/new.txt b/evil/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/evil/new.txt\n@@ -0,0 +1 @@\n+pwned\n";
    f.denied("evil", |w| w.apply_patch(p));
    let p = "--- /dev/null\n+++ b/evil/dir/deeper/new.txt\n@@ -0,0 +1 @@\n+pwned\n";
    f.denied("evil", |w| w.apply_patch(p));
    // Deleting through it.
    let p = "--- a/evil/secret.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-TOP SECRET outside content\n";
    f.denied("evil", |w| w.apply_patch(p));
}

#[test]
fn patch_creating_a_symlink_is_refused() {
    let f = fx();
    let p = "diff --git a/link b/link\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n";
    f.denied("symlink", |w| w.apply_patch(p));
    let p = "diff --git a/inside.txt b/inside.txt\nold mode 100644\nnew mode 120000\n";
    f.denied("symlink", |w| w.apply_patch(p));
    assert!(!f.root.join("link").exists());
    assert!(fs::symlink_metadata(f.root.join("inside.txt"))
        .unwrap()
        .is_file());
}

#[test]
fn patch_is_all_or_nothing_when_a_later_file_escapes() {
    let f = fx();
    let before_ws = snapshot(&f.root);
    let p = "\
--- a/inside.txt
+++ b/inside.txt
@@ -1 +1 @@
-inside
+changed
--- /dev/null
+++ b/sub/new.txt
@@ -0,0 +1 @@
+new
--- /dev/null
+++ b/sub/../../outside/new.txt
@@ -0,0 +1 @@
+pwned
";
    f.denied("..", |w| w.apply_patch(p));
    assert_eq!(snapshot(&f.root), before_ws, "the workspace changed");
}

#[test]
fn protected_paths_refuse_writes_patches_and_renames() {
    let f = fx();
    fs::create_dir_all(f.root.join(".git/hooks")).unwrap();
    fs::write(f.root.join(".git/config"), "[core]\n").unwrap();
    let before = snapshot(&f.root);
    f.denied(".git/hooks", |w| {
        w.write_file(
            ".git/hooks/pre-commit",
            b"#!/bin/sh\ncurl evil\n",
            None,
            Some(0o755),
        )
    });
    f.denied(".envrc", |w| {
        w.write_file(".envrc", b"export X=1", None, None)
    });
    f.denied(".vscode", |w| {
        w.write_file(".vscode/tasks.json", b"{}", None, None)
    });
    f.denied(".husky", |w| {
        w.apply_patch("--- /dev/null\n+++ b/.husky/pre-push\n@@ -0,0 +1 @@\n+evil\n")
    });
    f.denied(".git/config", |w| {
        w.apply_patch(
            "--- a/.git/config\n+++ b/.git/config\n@@ -1 +1,2 @@\n [core]\n+\thooksPath = /tmp\n",
        )
    });
    f.denied(".git/config", |w| w.apply_patch("diff --git a/inside.txt b/.git/config\nrename from inside.txt\nrename to .git/config\n"));
    symlink(".git", f.root.join("g")).unwrap();
    f.denied(".git/hooks", |w| {
        w.write_file("g/hooks/post-checkout", b"evil", None, None)
    });
    fs::remove_file(f.root.join("g")).unwrap();
    assert_eq!(snapshot(&f.root), before);
    // Extra protected paths from the policy.
    let w = Workspace::open_with(&f.root, &["sub/deeper".into()], Default::default()).unwrap();
    assert!(matches!(
        w.write_file("sub/deeper/x", b"x", None, None),
        Err(WorkspaceError::PermissionDenied { .. })
    ));
}

/// A nested repository planted through the file tools (a `sub/.git/config`
/// with `core.fsmonitor`, hooks, a gitfile, `HEAD`/`objects`/`refs`) would
/// run code on the user's next `git status` in `sub/`: every write, patch
/// target and rename whose path has a `.git` component, at any depth and in
/// any case, is refused naming it, and nothing is created.
#[test]
fn nested_git_paths_are_refused_for_writes_patches_and_renames() {
    let f = fx();
    fs::create_dir_all(f.root.join("sub2/.git")).unwrap();
    let before = snapshot(&f.root);
    for path in [
        "sub/.git/config",
        "sub/.git/HEAD",
        "sub/.git/objects/info/x",
        "sub/.git/refs/heads/main",
        "sub/.git/hooks/pre-commit",
        "sub/.git",
        "deep/er/.git/config",
        "sub/.GIT/config",
        "sub2/.git/config",
        ".git/info/exclude",
        "sub/./x/../.git/config",
    ] {
        f.denied(".git", |w| {
            w.write_file(
                path,
                b"[core]\n\tfsmonitor = touch /tmp/PWNED\n",
                None,
                None,
            )
        });
        assert!(
            f.denied_message(|w| w.write_file(path, b"x", None, None))
                .contains("git control path"),
            "{path}"
        );
    }
    f.denied(".git", |w| {
        w.apply_patch("--- /dev/null\n+++ b/sub/.git/config\n@@ -0,0 +1,2 @@\n+[core]\n+\tfsmonitor = touch /tmp/PWNED\n")
    });
    f.denied(".git", |w| {
        w.apply_patch("diff --git a/inside.txt b/sub/.git/config\nrename from inside.txt\nrename to sub/.git/config\n")
    });
    // Through a symlinked directory that stays inside: the canonical path
    // has the `.git` component.
    symlink("sub2/.git", f.root.join("g")).unwrap();
    f.denied(".git", |w| w.write_file("g/config", b"evil", None, None));
    fs::remove_file(f.root.join("g")).unwrap();
    assert_eq!(snapshot(&f.root), before);
    // Names that only contain `.git` are ordinary files.
    f.w.write_file("sub/.gitignore", b"target\n", None, None)
        .unwrap();
    f.w.write_file("sub/x.git/y", b"y", None, None).unwrap();
}

// --- end to end through wardend and the CLI --------------------------------------

fn e2e_fixture() -> (warden_tests::Daemon, tempfile::TempDir, PathBuf) {
    let d = warden_tests::Daemon::start();
    let base = tempfile::Builder::new()
        .prefix("pa-e2e-")
        .tempdir_in("/tmp")
        .unwrap();
    let ws = base.path().join("ws");
    fs::create_dir(&ws).unwrap();
    fs::write(base.path().join("secret.txt"), SECRET).unwrap();
    fs::write(ws.join("a.txt"), "one\n").unwrap();
    (d, base, ws)
}

fn fs_cli(
    d: &warden_tests::Daemon,
    ws: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> std::process::Output {
    use std::io::Write;
    let mut c = d.warden();
    c.arg("fs")
        .arg(args[0])
        .arg("--workspace")
        .arg(ws)
        .args(&args[1..]);
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if stdin.is_some() {
        c.stdin(std::process::Stdio::piped());
    }
    let mut child = c.spawn().unwrap();
    if let Some(s) = stdin {
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

#[test]
fn e2e_cli_refuses_escapes_with_exit_1_and_the_reason() {
    let (d, base, ws) = e2e_fixture();
    symlink("../secret.txt", ws.join("s")).unwrap();
    let cases: &[(&[&str], Option<&str>, &str)] = &[
        (&["read", "../secret.txt"], None, "\"..\""),
        (&["read", "/etc/passwd"], None, "absolute"),
        (&["read", "s"], None, "\"s\""),
        (&["write", "--yes", "s"], Some("pwned"), "\"s\""),
        (
            &["write", "--yes", "../secret.txt"],
            Some("pwned"),
            "\"..\"",
        ),
        (&["ls", "../"], None, "\"..\""),
        (&["grep", "SECRET", "s"], None, "\"s\""),
    ];
    for (args, stdin, needle) in cases {
        let o = fs_cli(&d, &ws, args, *stdin);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(126), "{args:?}: {err}");
        assert!(
            err.contains("permission denied") && err.contains(needle),
            "{args:?}: {err}"
        );
        assert!(!String::from_utf8_lossy(&o.stdout).contains("SECRET"));
    }
    let patch = base.path().join("p.diff");
    fs::write(&patch, "--- a/../secret.txt\n+++ b/../secret.txt\n@@ -1 +1 @@\n-TOP SECRET outside content\n+pwned\n").unwrap();
    let o = fs_cli(&d, &ws, &["patch", "--yes", patch.to_str().unwrap()], None);
    assert_eq!(
        o.status.code(),
        Some(126),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        fs::read_to_string(base.path().join("secret.txt")).unwrap(),
        SECRET
    );
}

#[test]
fn e2e_cli_tools_work_and_bad_input_changes_nothing() {
    let (d, base, ws) = e2e_fixture();
    // Write needs a grant under the default policy (write tier asks).
    let o = fs_cli(&d, &ws, &["write", "b.txt"], Some("x\n"));
    assert_eq!(
        o.status.code(),
        Some(126),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!ws.join("b.txt").exists());
    let o = fs_cli(&d, &ws, &["write", "--yes", "b.txt"], Some("hello\n"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("added b.txt "));
    let o = fs_cli(&d, &ws, &["read", "b.txt"], None);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hello\n");
    // Stale base hash: exit 1 naming the current hash.
    let o = fs_cli(
        &d,
        &ws,
        &["write", "--yes", "--base-hash", ABSENT, "b.txt"],
        Some("y\n"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&warden_daemon::workspace::hash_bytes(b"hello\n")),
        "{err}"
    );
    // A patch that does not apply names the hunk and changes nothing.
    let patch = base.path().join("p.diff");
    fs::write(&patch, "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-nope\n+x\n").unwrap();
    let o = fs_cli(&d, &ws, &["patch", "--yes", patch.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("b.txt") && err.contains("hunk 1"), "{err}");
    assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
    // Missing file, directory given for a file, too large.
    fs::create_dir(ws.join("dir")).unwrap();
    fs::write(ws.join("big"), vec![b'a'; 2 << 20]).unwrap();
    for (args, needle) in [
        (&["read", "missing.txt"][..], "not found"),
        (&["read", "dir"][..], "directory"),
        (&["read", "big"][..], "too large"),
    ] {
        let o = fs_cli(&d, &ws, args, None);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // A large write (over gRPC's default 4 MiB message) works up to the cap.
    let big = "x".repeat(5 << 20);
    let o = fs_cli(&d, &ws, &["write", "--yes", "big5"], Some(&big));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(fs::metadata(ws.join("big5")).unwrap().len(), 5 << 20);
    fs::remove_file(ws.join("big5")).unwrap();
    // ls and grep.
    let o = fs_cli(&d, &ws, &["ls"], None);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "a.txt\nb.txt\nbig\ndir/\n"
    );
    let o = fs_cli(&d, &ws, &["grep", "hel+o"], None);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "b.txt:1:hello\n");
    let o = fs_cli(
        &d,
        &ws,
        &["patch", "--yes", "-"],
        Some("--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-hello\n+bye\n"),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(fs::read_to_string(ws.join("b.txt")).unwrap(), "bye\n");
    let _ = fs::metadata(ws.join("b.txt")).unwrap().permissions().mode();
}

/// Protected paths from the policy's `[sandbox]` section hold for the file
/// tools too; changes are recorded in the audit log with their hashes.
#[test]
fn e2e_policy_protected_paths_and_audit_of_changes() {
    use tokio_stream::StreamExt;
    let (d, base, ws) = e2e_fixture();
    let policy = base.path().join("p.toml");
    fs::write(
        &policy,
        "[tiers]\nsafe-read = \"allow\"\nwrite = \"allow\"\nnetwork = \"ask\"\ninstall = \"ask\"\ndestructive = \"deny\"\n[sandbox]\nprotected_paths = [\"deploy\"]\n",
    )
    .unwrap();
    fs::create_dir(ws.join("deploy")).unwrap();
    let p = policy.to_str().unwrap();
    let o = fs_cli(&d, &ws, &["write", "--policy", p, "deploy/key"], Some("x"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(126), "{err}");
    assert!(
        err.contains("\"deploy\"") && err.contains("protected"),
        "{err}"
    );
    assert!(!ws.join("deploy/key").exists());
    // Allowed by this policy without --yes; recorded in the audit log.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = d.client().await;
        let sid = c.create_session(&ws, Some(p)).await.unwrap().id;
        let r = c
            .files()
            .write_file(warden_tests::pb::WriteFileRequest {
                session_id: sid.clone(),
                path: "c.txt".into(),
                content: b"audited\n".to_vec(),
                base_hash: ABSENT.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let change = r.change.unwrap();
        assert_eq!(
            (change.kind.as_str(), change.old_hash.as_str()),
            ("added", ABSENT)
        );
        let mut s = c
            .audit()
            .list_audit(warden_tests::pb::ListAuditRequest {
                session_id: sid,
                after_seq: 0,
            })
            .await
            .unwrap()
            .into_inner();
        let mut found = false;
        while let Some(rec) = s.next().await {
            let rec = rec.unwrap();
            if rec.action == "file_change" {
                assert!(
                    rec.detail_json.contains("c.txt") && rec.detail_json.contains(&r.hash),
                    "{}",
                    rec.detail_json
                );
                found = true;
            }
        }
        assert!(found, "no file_change audit record");
    });
}

/// Read and grep output goes through the redactor, and grep matches the
/// redacted text, so a pattern cannot probe a secret character by character.
#[test]
fn e2e_read_and_grep_are_redacted() {
    let (d, _base, ws) = e2e_fixture();
    let token = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5";
    fs::write(
        ws.join("config.txt"),
        format!("# config\nGITHUB_TOKEN={token}\nname=demo\n"),
    )
    .unwrap();
    let o = fs_cli(&d, &ws, &["read", "config.txt"], None);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !out.contains(token) && out.contains("REDACTED") && out.contains("name=demo"),
        "{out}"
    );
    let o = fs_cli(&d, &ws, &["grep", "GITHUB_TOKEN"], None);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("config.txt:2:") && !out.contains(token),
        "{out}"
    );
    // Probing for the secret's characters finds nothing.
    let o = fs_cli(&d, &ws, &["grep", "ghp_aB3d"], None);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(o.stdout.is_empty());
    // A read window that cuts the token still hides all of it.
    let at = "# config\nGITHUB_TOKEN=".len();
    for (off, lim) in [(at + 10, 100), (0, at + 10), (at + 4, 8)] {
        let (o, l) = (off.to_string(), lim.to_string());
        let out = fs_cli(
            &d,
            &ws,
            &["read", "--offset", &o, "--limit", &l, "config.txt"],
            None,
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for piece in [&token[..10], &token[10..20], &token[30..]] {
            assert!(
                !text.contains(piece),
                "window {off}+{lim} shows {piece:?}: {text}"
            );
        }
        assert!(text.contains("REDACTED"), "window {off}+{lim}: {text}");
    }
    // A secret file (by name, also when reached through an inside symlink)
    // is shown as one marker and cannot be probed either.
    fs::write(ws.join(".env"), "DB_PASSWORD=plainwords-but-secret\n").unwrap();
    symlink(".env", ws.join("notes.txt")).unwrap();
    for p in [".env", "notes.txt"] {
        let o = fs_cli(&d, &ws, &["read", p], None);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            !out.contains("plainwords") && out.contains("REDACTED"),
            "{p}: {out}"
        );
    }
    let o = fs_cli(&d, &ws, &["grep", "plainwords"], None);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// A workspace root whose path is replaced by a symlink after the session
/// was opened is not followed.
#[test]
fn e2e_workspace_root_swapped_for_a_symlink() {
    let (d, base, ws) = e2e_fixture();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = d.client().await;
        let sid = c.create_session(&ws, None).await.unwrap().id;
        let elsewhere = base.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::write(elsewhere.join("a.txt"), SECRET).unwrap();
        fs::rename(&ws, base.path().join("ws.moved")).unwrap();
        symlink(&elsewhere, &ws).unwrap();
        let e = c
            .files()
            .read_file(warden_tests::pb::ReadFileRequest {
                session_id: sid,
                path: "a.txt".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert!(!e.message().contains("TOP SECRET"));
    });
}

// --- interop: patches git itself produced ------------------------------------

fn git(dir: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Files (not `.git`) with content and the executable bit.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    snapshot(dir)
        .into_iter()
        .filter(|(k, v)| !k.starts_with(".git") && !v.starts_with("dir "))
        .map(|(k, _)| {
            let p = dir.join(&k);
            let exec = fs::metadata(&p).unwrap().permissions().mode() & 0o100 != 0;
            (k, format!("{exec} {:?}", fs::read(&p).unwrap()))
        })
        .collect()
}

/// `git diff -M` output (renames, mode changes, creations, deletions, quoted
/// non-ASCII names, names with spaces, no newline at end of file) applies
/// to the same tree git has.
#[test]
fn git_generated_patches_apply_like_git() {
    let t = tempfile::Builder::new()
        .prefix("pa-git-")
        .tempdir_in("/tmp")
        .unwrap();
    let r = t.path();
    git(r, &["init", "-q"]);
    let lines: String = (1..=40).map(|i| format!("line {i}\n")).collect();
    fs::write(r.join("a.txt"), &lines).unwrap();
    fs::write(r.join("b.txt"), "to be deleted\n").unwrap();
    fs::write(r.join("sp ace.txt"), "some\ncontent\nthat\nmoves\nalong\n").unwrap();
    fs::write(r.join("ünï.txt"), "unicode name\n").unwrap();
    fs::write(r.join("script.sh"), "#!/bin/sh\necho hi\n").unwrap();
    fs::write(r.join("noeol.txt"), "first\nlast").unwrap();
    git(r, &["add", "-A"]);
    git(r, &["commit", "-qm", "base"]);
    let before = tree(r);

    let edited = lines
        .replace("line 2\n", "line two\n")
        .replace("line 20\n", "line 20\ninserted\n")
        .replace("line 39\n", "");
    fs::write(r.join("a.txt"), edited).unwrap();
    fs::remove_file(r.join("b.txt")).unwrap();
    fs::create_dir(r.join("dir")).unwrap();
    fs::remove_file(r.join("sp ace.txt")).unwrap();
    fs::write(
        r.join("dir/renamed space.txt"),
        "some\ncontent\nthat\nmoves\nalong!\n",
    )
    .unwrap();
    fs::set_permissions(r.join("script.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(r.join("new/deep")).unwrap();
    fs::write(r.join("new/deep/file.txt"), "fresh\n").unwrap();
    fs::write(r.join("noeol.txt"), "first\nchanged last").unwrap();
    fs::write(r.join("ünï.txt"), "unicode name, edited\n").unwrap();
    git(r, &["add", "-A"]);
    let patch = git(r, &["diff", "--cached", "-M"]);
    assert!(
        patch.contains("rename from") && patch.contains("\\303\\274"),
        "{patch}"
    );
    let want = tree(r);

    git(r, &["reset", "-q", "--hard", "HEAD"]);
    git(r, &["clean", "-qfd"]);
    assert_eq!(tree(r), before);
    let w = Workspace::open(r).unwrap();
    let changes = w.apply_patch(&patch).unwrap();
    assert_eq!(changes.len(), 7, "{changes:?}");
    assert_eq!(tree(r), want);
    // And git agrees the index now matches the working tree.
    git(r, &["add", "-A"]);
    assert_eq!(git(r, &["diff", "--cached", "-M"]), patch);
}

/// End to end: `warden fs write` and `warden fs patch` cannot plant a nested
/// repository (`sub/.git/config` with `core.fsmonitor`, `HEAD`, `refs/`,
/// `objects/`), nor a hook in the directory the workspace repository's
/// `core.hooksPath` names; the CLI exits 1 naming the path, and the user's
/// own `git status` / `git commit` afterwards runs no payload.
#[test]
fn e2e_fs_write_and_patch_cannot_plant_git_hooks_or_config() {
    let (d, base, ws) = e2e_fixture();
    let marker = base.path().join("PWNED");
    git(&ws, &["init", "-q"]);
    git(&ws, &["config", "core.hooksPath", ".githooks"]);
    fs::create_dir(ws.join("sub")).unwrap();
    let cfg = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = touch {}.fsmonitor\n",
        marker.display()
    );
    let hook = format!("#!/bin/sh\ntouch {}.hook\n", marker.display());
    let writes: &[(&str, &str)] = &[
        ("sub/.git/HEAD", "ref: refs/heads/main\n"),
        ("sub/.git/config", &cfg),
        ("sub/.git/refs/heads/.keep", ""),
        ("sub/.git/objects/.keep", ""),
        ("sub/.git/hooks/pre-commit", &hook),
        ("sub/.git", "gitdir: ../elsewhere\n"),
    ];
    for (path, content) in writes {
        let o = fs_cli(
            &d,
            &ws,
            &["write", "--yes", "--mode", "755", path],
            Some(content),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(126), "{path}: {err}");
        assert!(
            err.contains("permission denied") && err.contains(".git") && err.contains(path),
            "{path}: {err}"
        );
    }
    let patch = base.path().join("git.diff");
    let body: String = cfg.lines().map(|l| format!("+{l}\n")).collect();
    fs::write(
        &patch,
        format!(
            "--- /dev/null\n+++ b/sub/.git/config\n@@ -0,0 +1,{} @@\n{body}",
            cfg.lines().count()
        ),
    )
    .unwrap();
    let o = fs_cli(&d, &ws, &["patch", "--yes", patch.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(126), "{err}");
    assert!(err.contains("sub/.git/config"), "{err}");
    assert!(!ws.join("sub/.git").exists());
    // The hooks directory of the workspace repository's core.hooksPath.
    let o = fs_cli(
        &d,
        &ws,
        &["write", "--yes", "--mode", "755", ".githooks/pre-commit"],
        Some(&hook),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(126), "{err}");
    assert!(
        err.contains(".githooks") && err.contains("protected"),
        "{err}"
    );
    assert!(!ws.join(".githooks").exists());
    // An ordinary write still works.
    let o = fs_cli(&d, &ws, &["write", "--yes", "sub/f"], Some("x\n"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The user's own git (hooks and fsmonitor as configured) runs nothing
    // planted.
    user_git(&ws.join("sub"), &["status"]);
    user_git(&ws, &["add", "-A"]);
    user_git(&ws, &["commit", "-qm", "x"]);
    for what in ["fsmonitor", "hook"] {
        assert!(
            !PathBuf::from(format!("{}.{what}", marker.display())).exists(),
            "planted {what} ran on the host"
        );
    }
}

/// The host user's git as they would run it: their repository's hooks and
/// config apply (unlike [`git`], which disables hooks).
fn user_git(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("git")
        .args(["-c", "user.name=u", "-c", "user.email=u@e"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
