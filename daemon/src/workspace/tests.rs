use super::*;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt as _};

fn ws() -> (tempfile::TempDir, Workspace) {
    let t = tempfile::tempdir().unwrap();
    fs::create_dir(t.path().join("ws")).unwrap();
    let w = Workspace::open(&t.path().join("ws")).unwrap();
    (t, w)
}

fn no_filter(_: &str, s: &str) -> Option<(String, u32)> {
    Some((s.to_string(), 0))
}

#[test]
fn read_write_roundtrip_with_base_hash() {
    let (_t, w) = ws();
    let c = w
        .write_file("a/b/c.txt", b"hello\n", Some(ABSENT), None)
        .unwrap();
    assert_eq!(c.kind, ChangeKind::Added);
    assert_eq!(c.old_hash, ABSENT);
    assert_eq!(c.new_hash, hash_bytes(b"hello\n"));
    assert_eq!(c.path, "a/b/c.txt");
    let r = w.read_file("a/b/c.txt", 0, None).unwrap();
    assert_eq!(r.content, "hello\n");
    assert_eq!(r.hash, c.new_hash);
    // Stale base hash: refused with the current hash, file unchanged.
    let e = w
        .write_file("a/b/c.txt", b"x", Some(&hash_bytes(b"other")), None)
        .unwrap_err();
    match e {
        WorkspaceError::FailedPrecondition { current_hash, .. } => assert_eq!(current_hash, r.hash),
        e => panic!("{e:?}"),
    }
    assert_eq!(
        w.read_file("a/b/c.txt", 0, None).unwrap().content,
        "hello\n"
    );
    // "absent" on an existing file is a mismatch too.
    assert!(matches!(
        w.write_file("a/b/c.txt", b"x", Some(ABSENT), None),
        Err(WorkspaceError::FailedPrecondition { .. })
    ));
    let c2 = w
        .write_file("a/b/c.txt", b"bye\n", Some(&r.hash), None)
        .unwrap();
    assert_eq!(c2.kind, ChangeKind::Modified);
    assert!(c2.patch.contains("-hello\n+bye\n"), "{}", c2.patch);
}

#[test]
fn write_keeps_mode_and_leaves_no_temp() {
    let (t, w) = ws();
    let p = t.path().join("ws/run.sh");
    fs::write(&p, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o750)).unwrap();
    let c = w
        .write_file("run.sh", b"#!/bin/sh\necho\n", None, None)
        .unwrap();
    assert_eq!(c.old_mode, Some(0o750));
    assert_eq!(
        fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
        0o750
    );
    let names: Vec<_> = fs::read_dir(t.path().join("ws"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let c = w.write_file("new.sh", b"x", None, Some(0o755)).unwrap();
    assert_eq!(c.new_mode, Some(0o755));
    assert_eq!(
        fs::metadata(t.path().join("ws/new.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
}

#[test]
fn read_window_binary_and_caps() {
    let (t, _) = ws();
    let root = t.path().join("ws");
    let w = Workspace::open_with(
        &root,
        &[],
        Limits {
            read_bytes: 10,
            ..Limits::default()
        },
    )
    .unwrap();
    fs::write(root.join("big.txt"), "0123456789abcdef").unwrap();
    assert!(matches!(
        w.read_file("big.txt", 0, None),
        Err(WorkspaceError::TooLarge(_))
    ));
    let r = w.read_file("big.txt", 4, Some(4)).unwrap();
    assert_eq!(r.content, "4567");
    assert!(r.truncated);
    assert_eq!(r.size, 16);
    assert_eq!(r.hash, hash_bytes(b"0123456789abcdef"));
    let r = w.read_file("big.txt", 0, Some(100)).unwrap();
    assert_eq!(r.content, "0123456789");
    fs::write(root.join("bin"), b"ab\0cd").unwrap();
    let r = w.read_file("bin", 0, None).unwrap();
    assert!(r.binary);
    assert!(r.content.is_empty());
    // A window cutting a multi-byte character is still text.
    fs::write(root.join("u.txt"), "aé b").unwrap();
    let r = w.read_file("u.txt", 0, Some(2)).unwrap();
    assert!(!r.binary);
    assert_eq!(r.content, "a");
}

#[test]
fn bad_inputs_are_clear_errors() {
    let (t, w) = ws();
    fs::create_dir(t.path().join("ws/d")).unwrap();
    assert!(matches!(
        w.read_file("missing", 0, None),
        Err(WorkspaceError::NotFound(_))
    ));
    assert!(matches!(
        w.read_file("nodir/x", 0, None),
        Err(WorkspaceError::NotFound(_))
    ));
    assert!(matches!(
        w.read_file("d", 0, None),
        Err(WorkspaceError::InvalidArgument(_))
    ));
    assert!(matches!(
        w.read_file("", 0, None),
        Err(WorkspaceError::InvalidArgument(_))
    ));
    assert!(matches!(
        w.write_file("d", b"x", None, None),
        Err(WorkspaceError::InvalidArgument(_))
    ));
    assert!(fs::metadata(t.path().join("ws/d")).unwrap().is_dir());
}

#[test]
fn protected_paths_are_read_only() {
    let (t, _) = ws();
    let root = t.path().join("ws");
    fs::create_dir_all(root.join(".git/hooks")).unwrap();
    fs::write(root.join(".git/config"), "[core]\n").unwrap();
    fs::create_dir_all(root.join("secrets")).unwrap();
    let w = Workspace::open_with(&root, &["secrets/".into()], Limits::default()).unwrap();
    for p in [
        ".git/hooks/pre-commit",
        ".git/config",
        ".envrc",
        ".vscode/settings.json",
        ".husky/pre-push",
        "secrets/k",
        "x/../.git/config",
        ".git",
    ] {
        let e = w.write_file(p, b"evil", None, None).unwrap_err();
        assert!(
            matches!(e, WorkspaceError::PermissionDenied { .. }),
            "{p}: {e:?}"
        );
    }
    // Through an inside symlink too.
    symlink(".git/hooks", root.join("hooks")).unwrap();
    let e = w
        .write_file("hooks/post-checkout", b"evil", None, None)
        .unwrap_err();
    assert!(e.to_string().contains(".git/hooks"), "{e}");
    assert!(!root.join(".git/hooks/post-checkout").exists());
    // Reading is fine.
    assert_eq!(
        w.read_file(".git/config", 0, None).unwrap().content,
        "[core]\n"
    );
    assert_eq!(
        fs::read_to_string(root.join(".git/config")).unwrap(),
        "[core]\n"
    );
}

/// (Red-team case.) The file tools never lay out a git directory without a
/// `.git` (a bare repository, or a gitdir with `commondir`), nor write
/// the config or hooks of one: git run there would read and run them.
#[test]
fn file_tools_never_plant_a_bare_repository() {
    let (t, w) = ws();
    let root = t.path().join("ws");
    w.write_file("bare/HEAD", b"ref: refs/heads/main\n", None, None)
        .unwrap();
    w.write_file("bare/objects/k", b"x", None, None).unwrap();
    // The write that would complete the layout is refused.
    let e = w.write_file("bare/refs/k", b"x", None, None).unwrap_err();
    assert!(
        matches!(e, WorkspaceError::PermissionDenied { .. }),
        "{e:?}"
    );
    assert!(!root.join("bare/refs").exists());
    // Into one that exists already: config, hooks, commondir.
    for d in ["repo/objects", "repo/refs"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    fs::write(root.join("repo/HEAD"), "ref: refs/heads/main\n").unwrap();
    for p in ["repo/config", "repo/hooks/post-checkout", "wt/commondir"] {
        if p.starts_with("wt/") {
            fs::create_dir_all(root.join("wt")).unwrap();
            fs::write(root.join("wt/HEAD"), "x").unwrap();
        }
        let e = w.write_file(p, b"evil", None, None).unwrap_err();
        assert!(
            matches!(e, WorkspaceError::PermissionDenied { .. }),
            "{p}: {e:?}"
        );
        assert!(!root.join(p).exists(), "{p}");
    }
    // Ordinary files named like git's are fine elsewhere.
    w.write_file("app/config", b"ok", None, None).unwrap();
    w.write_file("docs/HEAD", b"ok", None, None).unwrap();
}

#[test]
fn inside_symlinks_are_followed() {
    let (t, w) = ws();
    let root = t.path().join("ws");
    fs::create_dir(root.join("real")).unwrap();
    fs::write(root.join("real/f"), "1").unwrap();
    symlink("real", root.join("link")).unwrap();
    symlink("real/f", root.join("flink")).unwrap();
    symlink(root.join("real"), root.join("abs")).unwrap();
    assert_eq!(w.read_file("link/f", 0, None).unwrap().content, "1");
    assert_eq!(w.read_file("abs/f", 0, None).unwrap().content, "1");
    let c = w.write_file("flink", b"2", None, None).unwrap();
    assert_eq!(c.path, "real/f");
    assert!(fs::symlink_metadata(root.join("flink"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read_to_string(root.join("real/f")).unwrap(), "2");
    assert_eq!(
        w.read_file("real/../link/./f", 0, None).unwrap().path,
        "real/f"
    );
}

#[test]
fn hard_link_is_replaced_not_written_through() {
    let (t, w) = ws();
    let outside = t.path().join("outside.txt");
    fs::write(&outside, "keep").unwrap();
    fs::hard_link(&outside, t.path().join("ws/h")).unwrap();
    w.write_file("h", b"new", None, None).unwrap();
    assert_eq!(fs::read_to_string(&outside).unwrap(), "keep");
    assert_eq!(fs::metadata(&outside).unwrap().nlink(), 1);
    assert_eq!(fs::read_to_string(t.path().join("ws/h")).unwrap(), "new");
}

#[test]
fn patch_multi_file_applies_atomically() {
    let (t, w) = ws();
    let root = t.path().join("ws");
    fs::write(root.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    fs::write(root.join("gone.txt"), "bye\n").unwrap();
    fs::write(root.join("old.txt"), "moved\n").unwrap();
    let p = "\
diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
diff --git a/sub/new.txt b/sub/new.txt
new file mode 100755
--- /dev/null
+++ b/sub/new.txt
@@ -0,0 +1,2 @@
+fresh
+file
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/old.txt b/new.txt
similarity index 100%
rename from old.txt
rename to new.txt
";
    let ch = w.apply_patch(p).unwrap();
    assert_eq!(ch.len(), 4);
    assert_eq!(ch[0].kind, ChangeKind::Modified);
    assert_eq!(ch[0].old_hash, hash_bytes(b"one\ntwo\nthree\n"));
    assert_eq!(ch[1].kind, ChangeKind::Added);
    assert_eq!(ch[1].new_mode, Some(0o755));
    assert_eq!(ch[2].kind, ChangeKind::Deleted);
    assert_eq!(ch[2].new_hash, ABSENT);
    assert_eq!(ch[3].kind, ChangeKind::Renamed);
    assert_eq!(ch[3].from_path.as_deref(), Some("old.txt"));
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap(),
        "one\nTWO\nthree\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("sub/new.txt")).unwrap(),
        "fresh\nfile\n"
    );
    assert!(!root.join("gone.txt").exists());
    assert!(!root.join("old.txt").exists());
    assert_eq!(fs::read_to_string(root.join("new.txt")).unwrap(), "moved\n");
}

#[test]
fn patch_failure_changes_nothing_and_names_the_hunk() {
    let (t, w) = ws();
    let root = t.path().join("ws");
    fs::write(root.join("a.txt"), "one\ntwo\n").unwrap();
    fs::write(root.join("b.txt"), "x\ny\n").unwrap();
    let p = "\
--- a/a.txt
+++ b/a.txt
@@ -1,2 +1,2 @@
 one
-two
+TWO
--- /dev/null
+++ b/c/new.txt
@@ -0,0 +1 @@
+n
--- a/b.txt
+++ b/b.txt
@@ -1,2 +1,2 @@
 x
-z
+Z
";
    let e = w.apply_patch(p).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("b.txt")
            && msg.contains("hunk 1")
            && msg.contains("\"z\\n\"")
            && msg.contains("\"y\\n\""),
        "{msg}"
    );
    assert!(
        matches!(e, WorkspaceError::FailedPrecondition { ref current_hash, .. } if *current_hash == hash_bytes(b"x\ny\n"))
    );
    assert_eq!(
        fs::read_to_string(root.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert!(!root.join("c").exists());
    // Patching a missing file.
    assert!(matches!(
        w.apply_patch("--- a/nope\n+++ b/nope\n@@ -1 +1 @@\n-a\n+b\n"),
        Err(WorkspaceError::NotFound(_))
    ));
    // Creating a file that exists.
    assert!(matches!(
        w.apply_patch("--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+a\n"),
        Err(WorkspaceError::FailedPrecondition { .. })
    ));
    assert_eq!(fs::read_dir(&root).unwrap().count(), 2);
}

#[test]
fn list_and_grep_respect_gitignore_and_caps() {
    let (t, w) = ws();
    let root = t.path().join("ws");
    fs::create_dir_all(root.join("src/deep")).unwrap();
    fs::create_dir_all(root.join("target")).unwrap();
    fs::create_dir_all(root.join(".git")).unwrap();
    fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
    fs::write(root.join("src/a.rs"), "fn main() {}\nlet token = 1;\n").unwrap();
    fs::write(root.join("src/deep/b.rs"), "fn helper() {}\n").unwrap();
    fs::write(root.join("target/out.rs"), "fn main() {}\n").unwrap();
    fs::write(root.join("x.log"), "fn main() {}\n").unwrap();
    fs::write(root.join(".git/HEAD"), "fn main() {}\n").unwrap();
    let l = w.list_dir("", 1, 0).unwrap();
    let names: Vec<_> = l.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(names, vec![".git", ".gitignore", "src", "target", "x.log"]);
    let l = w.list_dir("", 3, 0).unwrap();
    let names: Vec<_> = l.entries.iter().map(|e| e.path.as_str()).collect();
    assert!(
        names.contains(&"src/deep/b.rs")
            && !names.contains(&"target/out.rs")
            && !names.contains(&".git/HEAD"),
        "{names:?}"
    );
    let l = w.list_dir("", 3, 2).unwrap();
    assert!(l.truncated && l.entries.len() == 2);
    let g = w.grep("fn \\w+", "", false, 0, &no_filter).unwrap();
    let hits: Vec<_> = g
        .matches
        .iter()
        .map(|m| (m.path.as_str(), m.line))
        .collect();
    assert_eq!(hits, vec![("src/a.rs", 1), ("src/deep/b.rs", 1)]);
    let g = w.grep("FN MAIN", "src", true, 0, &no_filter).unwrap();
    assert_eq!(g.matches.len(), 1);
    // The filter runs before matching: a hidden value cannot be probed.
    let hide = |_: &str, s: &str| {
        let n = s.matches("token = 1").count() as u32;
        Some((s.replace("token = 1", "token = [REDACTED]"), n))
    };
    assert!(w
        .grep("token = 1", "", false, 0, &hide)
        .unwrap()
        .matches
        .is_empty());
    let g = w.grep("token", "src/a.rs", false, 0, &hide).unwrap();
    assert_eq!(g.matches[0].text, "let token = [REDACTED];");
    assert_eq!(g.redactions, 1);
    assert!(matches!(
        w.grep("(", "", false, 0, &no_filter),
        Err(WorkspaceError::InvalidArgument(_))
    ));
}

#[test]
fn plain_diff_between_two_names_patches_the_existing_one() {
    let (t, w) = ws();
    let root = t.path().join("ws");
    fs::write(root.join("f.c"), "a\n").unwrap();
    let ch = w
        .apply_patch("--- f.c.orig\t2024-01-01\n+++ f.c\t2024-01-02\n@@ -1 +1 @@\n-a\n+b\n")
        .unwrap();
    assert_eq!(
        (ch[0].path.as_str(), ch[0].kind),
        ("f.c", ChangeKind::Modified)
    );
    assert_eq!(fs::read_to_string(root.join("f.c")).unwrap(), "b\n");
    assert!(!root.join("f.c.orig").exists());
    fs::write(root.join("g"), "b\n").unwrap();
    assert!(matches!(
        w.apply_patch("--- f.c\n+++ g\n@@ -1 +1 @@\n-b\n+c\n"),
        Err(WorkspaceError::InvalidArgument(_))
    ));
    assert_eq!(fs::read_to_string(root.join("g")).unwrap(), "b\n");
}

#[test]
fn read_with_context_gives_the_bytes_around_the_window() {
    let (t, w) = ws();
    fs::write(t.path().join("ws/f"), "0123456789abcdef").unwrap();
    let r = w.read_file_with_context("f", 6, Some(4), 3).unwrap();
    assert_eq!(r.result.content, "6789");
    assert_eq!(r.result.offset, 6);
    assert_eq!(
        (r.before.as_slice(), r.after.as_slice()),
        (&b"345"[..], &b"abc"[..])
    );
    let r = w.read_file_with_context("f", 1, Some(2), 5).unwrap();
    assert_eq!(
        (r.before.as_slice(), r.after.as_slice()),
        (&b"0"[..], &b"34567"[..])
    );
    // A window starting inside a multi-byte character skips it, and the
    // context starts where the content does not.
    fs::write(t.path().join("ws/u"), "aéb").unwrap();
    let r = w.read_file_with_context("u", 2, Some(2), 4).unwrap();
    assert_eq!((r.result.content.as_str(), r.result.offset), ("b", 3));
    assert_eq!(r.before, "aé".as_bytes());
}

#[test]
fn install_refuses_a_file_replaced_after_it_was_read() {
    let (t, w) = ws();
    let p = t.path().join("ws/f");
    fs::write(&p, "mine\n").unwrap();
    let root = Dir::open_ambient_dir(t.path().join("ws"), cap_std::ambient_authority()).unwrap();
    let cur = w.current(&root, "f", "f").unwrap();
    // Someone else replaces it (new inode) before we install.
    fs::write(t.path().join("ws/other"), "theirs\n").unwrap();
    fs::rename(t.path().join("ws/other"), &p).unwrap();
    let tmp = stage_temp(&root, b"new\n", 0o644, None, "f").unwrap();
    match w.install(&root, &tmp, "f", "f", &cur) {
        Err(WorkspaceError::FailedPrecondition { current_hash, .. }) => {
            assert_eq!(current_hash, hash_bytes(b"theirs\n"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read_to_string(&p).unwrap(), "theirs\n");
    // A file created meanwhile where none was is not replaced either.
    let absent = w.current(&root, "g", "g").unwrap();
    fs::write(t.path().join("ws/g"), "theirs\n").unwrap();
    assert!(matches!(
        w.install(&root, &tmp, "g", "g", &absent),
        Err(WorkspaceError::FailedPrecondition { .. })
    ));
    assert_eq!(
        fs::read_to_string(t.path().join("ws/g")).unwrap(),
        "theirs\n"
    );
    // The unchanged case installs and leaves no temp file.
    let cur = w.current(&root, "f", "f").unwrap();
    w.install(&root, &tmp, "f", "f", &cur).unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), "new\n");
    assert_eq!(fs::read_dir(t.path().join("ws")).unwrap().count(), 2);
}

#[test]
fn grep_answers_stay_under_the_result_byte_cap() {
    let (t, w) = ws();
    let line = "x".repeat(999) + "\n";
    fs::write(t.path().join("ws/many.txt"), line.repeat(3000)).unwrap();
    let g = w.grep("x", "", false, 10_000, &no_filter).unwrap();
    assert!(g.truncated);
    assert!(
        g.matches.len() < 3000 && g.matches.len() > 1000,
        "{}",
        g.matches.len()
    );
    let total: usize = g.matches.iter().map(|m| m.text.len()).sum();
    assert!(total <= walk::MAX_RESULT_BYTES + 2000, "{total}");
}
