//! Unit tests against real files in temp dirs.

use super::*;
use crate::state::Db;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

struct Fixture {
    _state: tempfile::TempDir,
    ws_dir: tempfile::TempDir,
    store: CheckpointStore,
    settings: CheckpointSettings,
}

impl Fixture {
    fn new() -> Fixture {
        let state = tempfile::tempdir().unwrap();
        let ws_dir = tempfile::tempdir().unwrap();
        let db = Db::open(state.path()).unwrap();
        let store = CheckpointStore::open(state.path(), db).unwrap();
        Fixture {
            _state: state,
            ws_dir,
            store,
            settings: CheckpointSettings::default(),
        }
    }
    fn ws(&self) -> &Path {
        self.ws_dir.path()
    }
    fn write(&self, rel: &str, content: &str) {
        let p = self.ws().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    fn meta(&self, step: &str) -> CheckpointMeta {
        CheckpointMeta {
            session_id: "s1".into(),
            step_id: step.into(),
            tool: "exec".into(),
            arguments_json: r#"{"command":"x"}"#.into(),
            side_effects: SideEffects::Workspace,
            ..Default::default()
        }
    }
    /// Runs `f` as one recorded step; returns (pre, post).
    fn step(&self, name: &str, f: impl FnOnce(&Path)) -> (Checkpoint, Checkpoint) {
        let pre = self
            .store
            .pre_step(self.ws(), &self.settings, &self.meta(name))
            .unwrap();
        f(self.ws());
        let post = self
            .store
            .post_step(self.ws(), &self.settings, &pre.id, &self.meta(name))
            .unwrap();
        (pre, post)
    }
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn find<'a>(changes: &'a [FileChange], path: &str) -> &'a FileChange {
    changes
        .iter()
        .find(|c| c.path == path)
        .unwrap_or_else(|| panic!("no change for {path} in {changes:#?}"))
}

/// Files written within the racy margin are rehashed; wait it out.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(120));
}

#[test]
fn settings_default_when_absent_or_partial_and_refuse_unknown_fields() {
    let p: crate::policy::PolicyFile = toml::from_str("").unwrap();
    assert_eq!(p.checkpoint, CheckpointSettings::default());
    assert!(p.checkpoint.exclude.iter().any(|e| e == "target/"));
    let p: crate::policy::PolicyFile =
        toml::from_str("[checkpoint]\nmax_file_bytes = 10\n").unwrap();
    assert_eq!(p.checkpoint.max_file_bytes, 10);
    assert_eq!(p.checkpoint.keep_runs, 50);
    assert!(toml::from_str::<crate::policy::PolicyFile>("[checkpoint]\nbogus = 1\n").is_err());
    for (name, _) in crate::policy::BUILTIN {
        crate::policy::Policy::builtin(name).expect("builtin policy parses");
    }
}

#[test]
fn snapshot_hashes_content_modes_symlinks_and_skips_excludes() {
    let fx = Fixture::new();
    fx.write("a.txt", "hello");
    fx.write("src/lib.rs", "fn main() {}");
    fx.write("target/debug/big", "ignored");
    fx.write("pkg/node_modules/x.js", "ignored too");
    symlink("/etc", fx.ws().join("etc-link")).unwrap();
    fs::set_permissions(fx.ws().join("a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    let s = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    let a = &s.entries["a.txt"];
    assert_eq!(a.kind, EntryKind::File);
    assert_eq!(a.hash, blake3::hash(b"hello"));
    assert_eq!(a.mode, 0o640);
    let l = &s.entries["etc-link"];
    assert_eq!(l.kind, EntryKind::Symlink);
    assert_eq!(l.hash, blake3::hash(b"/etc"));
    assert!(
        !s.entries.keys().any(|k| k.starts_with("etc-link/")),
        "a symlink was followed"
    );
    assert!(!s
        .entries
        .keys()
        .any(|k| k.contains("target") || k.contains("node_modules")));
    assert_eq!(s.entries["src"].kind, EntryKind::Dir);
    // Same tree, same root; any change, new root.
    let s2 = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(s.root, s2.root);
    fx.write("src/lib.rs", "fn main() { }");
    assert_ne!(
        fx.store.snapshot(fx.ws(), &fx.settings).unwrap().root,
        s.root
    );
}

#[test]
fn file_patterns_exclude_files_and_dir_patterns_only_dirs() {
    let mut fx = Fixture::new();
    fx.settings.exclude = vec!["*.log".into(), "build/".into(), "# comment".into()];
    fx.write("a.log", "x");
    fx.write("sub/b.log", "x");
    fx.write("sub/keep.txt", "x");
    fx.write("build/out", "x");
    fx.write("notes/build", "a file named like a dir pattern");
    let s = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    let paths: Vec<&str> = s.entries.keys().map(String::as_str).collect();
    assert_eq!(paths, ["notes", "notes/build", "sub", "sub/keep.txt"]);
}

#[test]
fn racily_clean_and_deleted_files_never_hit_stale_cache_entries() {
    let fx = Fixture::new();
    for i in 0..40 {
        fx.write(&format!("f{i}"), "same size");
    }
    settle();
    let first = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(first.hashed_files, 40);
    // Rewrite in place (same size), delete and recreate (maybe the same
    // inode): each is seen, though the cache keeps stale entries around.
    fx.write("f1", "SAME SIZE");
    fs::remove_file(fx.ws().join("f2")).unwrap();
    fx.write("f2", "new  size");
    let s = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(s.entries["f1"].hash, blake3::hash(b"SAME SIZE"));
    assert_eq!(s.entries["f2"].hash, blake3::hash(b"new  size"));
    // Racily clean (just written): rehashed again on every walk.
    fx.write("f1", "SAME-SIZE");
    let s = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(s.entries["f1"].hash, blake3::hash(b"SAME-SIZE"));
    fs::remove_file(fx.ws().join("f3")).unwrap();
    settle();
    let s = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert!(!s.entries.contains_key("f3"));
    assert_eq!(s.entries["f1"].hash, blake3::hash(b"SAME-SIZE"));
    let again = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(again.hashed_files, 0);
    assert_eq!(again.root, s.root);
}

#[test]
fn fifo_is_recorded_not_opened() {
    let fx = Fixture::new();
    fx.write("a", "x");
    nix::unistd::mkfifo(
        &fx.ws().join("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    // A blocking open of a FIFO without a writer would hang this test.
    let s = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(s.entries["pipe"].kind, EntryKind::Other);
    assert!(!s.entries["pipe"].stored);
}

#[test]
fn unchanged_resnapshot_hashes_nothing_and_survives_a_new_store() {
    let fx = Fixture::new();
    for i in 0..50 {
        fx.write(&format!("d{}/f{i}.txt", i % 5), &format!("content {i}"));
    }
    settle();
    let first = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(first.hashed_files, 50);
    let again = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(again.hashed_files, 0);
    assert_eq!(again.root, first.root);
    // A new store (a restarted daemon) reads the cache file.
    fx.store.wait_for_stat_cache_writes();
    let store2 = CheckpointStore::open(fx._state.path(), fx.store.db().clone()).unwrap();
    let s3 = store2.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(s3.hashed_files, 0);
    // A modified file is seen even with the same size.
    fx.write("d1/f1.txt", "CONTENT 1");
    let s4 = store2.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(s4.hashed_files, 1);
    assert_eq!(s4.entries["d1/f1.txt"].hash, blake3::hash(b"CONTENT 1"));
}

#[test]
fn over_cap_files_are_hashed_not_stored_and_reported_on_rollback() {
    let mut fx = Fixture::new();
    fx.settings.max_file_bytes = 8;
    fx.write("big", "0123456789abcdef");
    fx.write("small", "tiny");
    let (pre, post) = fx.step("s", |ws| {
        fs::write(ws.join("big"), "fedcba9876543210").unwrap();
        fs::write(ws.join("small"), "tiny2").unwrap();
    });
    assert_eq!(post.not_stored, vec!["big".to_string()]);
    let snap = fx.store.load_snapshot(&pre.id).unwrap();
    assert_eq!(snap.entries["big"].hash, blake3::hash(b"0123456789abcdef"));
    let r = fx
        .store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(fs::read_to_string(fx.ws().join("small")).unwrap(), "tiny");
    assert!(
        r.not_restored
            .iter()
            .any(|n| n.starts_with("big: ") && n.contains("not stored")),
        "{r:?}"
    );
}

#[test]
fn change_set_of_edit_create_delete_rename_chmod() {
    let fx = Fixture::new();
    fx.write("edit.txt", "one\ntwo\nthree\n");
    fx.write("gone.txt", "bye\n");
    fx.write("old/name.txt", "moving\n");
    fx.write("run.sh", "#!/bin/sh\n");
    let (_pre, post) = fx.step("s1", |ws| {
        fs::write(ws.join("edit.txt"), "one\nTWO\nthree\n").unwrap();
        fs::write(ws.join("new.txt"), "fresh\n").unwrap();
        fs::remove_file(ws.join("gone.txt")).unwrap();
        fs::create_dir(ws.join("new")).unwrap();
        fs::rename(ws.join("old/name.txt"), ws.join("new/name.txt")).unwrap();
        fs::set_permissions(ws.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    });
    let c = &post.changes;
    let e = find(c, "edit.txt");
    assert_eq!(e.kind, ChangeKind::Modified);
    assert_eq!(
        e.old_hash.as_deref(),
        Some(blake3::hash(b"one\ntwo\nthree\n").to_hex().as_str())
    );
    let patch = e.patch.as_deref().unwrap();
    assert!(
        patch.contains("-two\n+TWO\n") && patch.contains("a/edit.txt"),
        "{patch}"
    );
    let n = find(c, "new.txt");
    assert_eq!(n.kind, ChangeKind::Added);
    assert!(n.patch.as_deref().unwrap().contains("+fresh"));
    assert_eq!(find(c, "gone.txt").kind, ChangeKind::Deleted);
    let r = find(c, "new/name.txt");
    assert_eq!(r.kind, ChangeKind::Renamed);
    assert_eq!(r.from_path.as_deref(), Some("old/name.txt"));
    assert!(!c.iter().any(|x| x.path == "old/name.txt"));
    let m = find(c, "run.sh");
    assert_eq!(
        (m.kind, m.old_mode, m.new_mode),
        (ChangeKind::Mode, Some(0o644), Some(0o755))
    );
    assert_eq!(find(c, "new").entry_kind, EntryKind::Dir);
    assert_eq!(c.len(), 6, "{c:#?}");
}

#[test]
fn rollback_restores_bytes_and_modes_and_can_be_rolled_back() {
    let fx = Fixture::new();
    fx.write("keep.txt", "keep\n");
    fx.write("edit.bin", "\u{0}\u{1}binary");
    fx.write("dir/gone.txt", "bye\n");
    fs::set_permissions(fx.ws().join("keep.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    symlink("keep.txt", fx.ws().join("link")).unwrap();
    let before = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    let (pre, post) = fx.step("s1", |ws| {
        fs::write(ws.join("edit.bin"), "changed").unwrap();
        fs::remove_dir_all(ws.join("dir")).unwrap();
        fs::write(ws.join("added.txt"), "new\n").unwrap();
        fs::set_permissions(ws.join("keep.txt"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::remove_file(ws.join("link")).unwrap();
        symlink("/etc/passwd", ws.join("link")).unwrap();
    });
    let after = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    let r = fx
        .store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(r.not_restored.is_empty(), "{r:?}");
    let now = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(now.root, before.root, "not byte/mode identical");
    assert_eq!(fs::read(fx.ws().join("edit.bin")).unwrap(), b"\0\x01binary");
    assert_eq!(mode(&fx.ws().join("keep.txt")), 0o600);
    assert_eq!(
        fs::read_link(fx.ws().join("link")).unwrap(),
        Path::new("keep.txt")
    );
    assert!(!fx.ws().join("added.txt").exists());
    let rb = fx.store.get(&r.checkpoint_id).unwrap();
    assert_eq!(rb.kind, CheckpointKind::Rollback);
    assert_eq!(rb.rollback_of.as_deref(), Some(pre.id.as_str()));
    assert!(!r.restored.is_empty());
    // Undo the rollback: back to the step's post state.
    let r2 = fx
        .store
        .rollback(
            &post.id,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(r2.not_restored.is_empty(), "{r2:?}");
    assert_eq!(
        fx.store.snapshot(fx.ws(), &fx.settings).unwrap().root,
        after.root
    );
    assert_eq!(
        fs::read_link(fx.ws().join("link")).unwrap(),
        Path::new("/etc/passwd")
    );
}

#[test]
fn drift_refuses_unless_forced_and_forced_rollback_is_undoable() {
    let fx = Fixture::new();
    fx.write("a.txt", "v1");
    let (pre, _post) = fx.step("s1", |ws| fs::write(ws.join("a.txt"), "v2").unwrap());
    // Someone edits outside any step.
    fx.write("a.txt", "v3-user");
    fx.write("b.txt", "user file");
    let err = fx
        .store
        .rollback(&pre.id, &RollbackOptions::default())
        .unwrap_err();
    match &err {
        CheckpointError::Drift { paths, .. } => {
            assert_eq!(paths, &vec!["a.txt".to_string(), "b.txt".to_string()])
        }
        e => panic!("expected drift, got {e}"),
    }
    assert_eq!(
        fs::read_to_string(fx.ws().join("a.txt")).unwrap(),
        "v3-user"
    );
    let r = fx
        .store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                force: true,
                ..Default::default()
            },
        )
        .unwrap();
    // a.txt, which the step changed, goes back; b.txt, which only the user
    // touched, is left alone (README: never touching untracked files the
    // agent did not change).
    assert_eq!(fs::read_to_string(fx.ws().join("a.txt")).unwrap(), "v1");
    assert_eq!(
        fs::read_to_string(fx.ws().join("b.txt")).unwrap(),
        "user file"
    );
    let drift_cp = r.drift_checkpoint_id.clone().unwrap();
    fx.store
        .rollback(
            &drift_cp,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        fs::read_to_string(fx.ws().join("a.txt")).unwrap(),
        "v3-user"
    );
    assert_eq!(
        fs::read_to_string(fx.ws().join("b.txt")).unwrap(),
        "user file"
    );
}

#[test]
fn forced_rollback_leaves_a_users_own_rename_alone() {
    let fx = Fixture::new();
    fx.write("a.txt", "content that moves");
    fx.write("keep.txt", "k");
    let (_pre, post) = fx.step("s1", |ws| fs::write(ws.join("keep.txt"), "k2").unwrap());
    // Outside any step: a rename. Both ends are drift; a forced rollback
    // to the latest checkpoint has no step's change to undo, so the
    // user's rename stays.
    fs::rename(fx.ws().join("a.txt"), fx.ws().join("b.txt")).unwrap();
    let r = fx
        .store
        .rollback(
            &post.id,
            &RollbackOptions {
                files: true,
                force: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(r.drifted, vec!["a.txt".to_string(), "b.txt".to_string()]);
    assert!(!fx.ws().join("a.txt").exists());
    assert!(fx.ws().join("b.txt").exists());
}

#[test]
fn forced_rollback_over_a_cut_off_step_restores_the_source_of_its_rename() {
    let fx = Fixture::new();
    fx.write("a.txt", "content that moves");
    fx.write("keep.txt", "k");
    let (_pre, post) = fx.step("s1", |ws| fs::write(ws.join("keep.txt"), "k2").unwrap());
    // A write step opens (pre-checkpoint) and is cut off mid-command: its
    // effect shows as drift since its pre-checkpoint, and is rolled back.
    let mut meta = fx.meta("s2");
    meta.tier = Some(crate::policy::Tier::Write);
    let open = fx.store.pre_step(fx.ws(), &fx.settings, &meta).unwrap();
    assert_eq!(
        fx.store.load_snapshot(&open.id).unwrap().root,
        fx.store.load_snapshot(&post.id).unwrap().root
    );
    // Outside any step: a rename (same content, so the change set pairs it).
    fs::rename(fx.ws().join("a.txt"), fx.ws().join("b.txt")).unwrap();
    let err = fx
        .store
        .rollback(&post.id, &RollbackOptions::default())
        .unwrap_err();
    match &err {
        CheckpointError::Drift { paths, .. } => {
            assert_eq!(paths, &vec!["a.txt".to_string(), "b.txt".to_string()])
        }
        e => panic!("expected drift, got {e}"),
    }
    let r = fx
        .store
        .rollback(
            &post.id,
            &RollbackOptions {
                files: true,
                force: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(r.not_restored.is_empty(), "{r:?}");
    assert_eq!(
        fs::read_to_string(fx.ws().join("a.txt")).unwrap(),
        "content that moves"
    );
    assert!(!fx.ws().join("b.txt").exists());
    let now = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert_eq!(now.root, fx.store.load_snapshot(&post.id).unwrap().root);
}

#[test]
fn rollback_leaves_paths_no_step_changed() {
    let fx = Fixture::new();
    fx.write("a.txt", "v1");
    let (pre, _) = fx.step("s1", |ws| fs::write(ws.join("a.txt"), "v2").unwrap());
    // Between steps the user adds a file; the next pre-checkpoint records it.
    fx.write("user.txt", "mine");
    fx.write("target/out.o", "excluded build output");
    fx.step("s2", |ws| fs::write(ws.join("agent.txt"), "agent").unwrap());
    fx.store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(fs::read_to_string(fx.ws().join("a.txt")).unwrap(), "v1");
    assert!(!fx.ws().join("agent.txt").exists());
    assert_eq!(
        fs::read_to_string(fx.ws().join("user.txt")).unwrap(),
        "mine"
    );
    assert!(fx.ws().join("target/out.o").exists());
}

#[test]
fn git_dir_restored_only_with_include_git() {
    let fx = Fixture::new();
    fx.write(".git/HEAD", "ref: refs/heads/main\n");
    fx.write("a", "1");
    let (pre, _) = fx.step("s1", |ws| {
        fs::write(ws.join(".git/HEAD"), "ref: refs/heads/other\n").unwrap();
        fs::write(ws.join("a"), "2").unwrap();
    });
    let r = fx
        .store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(fs::read_to_string(fx.ws().join("a")).unwrap(), "1");
    assert_eq!(
        fs::read_to_string(fx.ws().join(".git/HEAD")).unwrap(),
        "ref: refs/heads/other\n"
    );
    assert!(r.restored.iter().all(|c| !c.path.starts_with(".git")));
    fx.store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                include_git: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        fs::read_to_string(fx.ws().join(".git/HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
}

#[test]
fn symlink_swapped_for_a_directory_cannot_redirect_rollback_writes() {
    let fx = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("file.txt"), "outside, untouched").unwrap();
    fx.write("sub/file.txt", "original");
    let (pre, _) = fx.step("s1", |ws| {
        fs::write(ws.join("sub/file.txt"), "edited").unwrap()
    });
    // Recorded step: the agent swaps the directory for a symlink out.
    fx.step("s2", |ws| {
        fs::remove_dir_all(ws.join("sub")).unwrap();
        symlink(outside.path(), ws.join("sub")).unwrap();
    });
    let r = fx
        .store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(r.not_restored.is_empty(), "{r:?}");
    assert_eq!(
        fs::read_to_string(outside.path().join("file.txt")).unwrap(),
        "outside, untouched"
    );
    assert!(fs::symlink_metadata(fx.ws().join("sub")).unwrap().is_dir());
    assert_eq!(
        fs::read_to_string(fx.ws().join("sub/file.txt")).unwrap(),
        "original"
    );

    // The race: swapped after the rollback looked at the workspace.
    let current = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    let target = fx.store.load_snapshot(&pre.id).unwrap();
    let mut stale_target = target.clone();
    stale_target.entries.get_mut("sub/file.txt").unwrap().hash = blake3::hash(b"edited");
    fx.store
        .inner_blobs_put_for_test(&blake3::hash(b"edited"), b"edited");
    fs::remove_dir_all(fx.ws().join("sub")).unwrap();
    symlink(outside.path(), fx.ws().join("sub")).unwrap();
    let root = cap_std::fs::Dir::open_ambient_dir(fx.ws(), cap_std::ambient_authority()).unwrap();
    let failed = fx.store.restore_for_test(&root, &current, &stale_target);
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("sub/file.txt: parent directory")),
        "{failed:?}"
    );
    assert_eq!(
        fs::read_to_string(outside.path().join("file.txt")).unwrap(),
        "outside, untouched"
    );
}

#[test]
fn torn_blob_is_rewritten_and_never_read_back() {
    let fx = Fixture::new();
    fx.write("a.txt", "precious");
    let (pre, _) = fx.step("s1", |ws| fs::write(ws.join("a.txt"), "changed").unwrap());
    // Simulate a blob torn by a crash: truncate it.
    let h = blake3::hash(b"precious").to_hex().to_string();
    let blob = fx._state.path().join("blobs").join(&h[..2]).join(&h[2..]);
    fs::write(&blob, "prec").unwrap();
    let err = fx
        .store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(
        err.not_restored
            .iter()
            .any(|n| n.starts_with("a.txt: blob")),
        "{err:?}"
    );
    assert_eq!(
        fs::read_to_string(fx.ws().join("a.txt")).unwrap(),
        "changed"
    );
    // Writing the same content again repairs the blob.
    fx.step("s2", |ws| fs::write(ws.join("a.txt"), "precious").unwrap());
    assert_eq!(fs::read(&blob).unwrap(), b"precious");
}

#[test]
fn incomplete_rows_are_invisible() {
    let fx = Fixture::new();
    fx.write("a", "1");
    let (pre, _) = fx.step("s1", |_| {});
    fx.store
        .db()
        .lock()
        .execute(
            "INSERT INTO checkpoints (id, workspace, kind, root_hash, complete, created_at_ms) VALUES ('half', ?1, 'post', 'bogus', 0, 0)",
            [fx.ws().canonicalize().unwrap().to_string_lossy()],
        )
        .unwrap();
    assert!(matches!(
        fx.store.get("half"),
        Err(CheckpointError::NotFound(_))
    ));
    assert!(fx
        .store
        .list(&CheckpointFilter::default())
        .unwrap()
        .iter()
        .all(|c| c.id != "half"));
    // The next step's base is the last complete one.
    let (pre2, _) = fx.step("s2", |_| {});
    assert!(pre2.base_id.is_some());
    assert_ne!(pre2.base_id.as_deref(), Some("half"));
    assert!(fx.store.get(&pre.id).is_ok());
}

#[test]
fn list_filters_and_orders() {
    let fx = Fixture::new();
    fx.write("a", "1");
    fx.step("s1", |ws| fs::write(ws.join("a"), "2").unwrap());
    let all = fx.store.list(&CheckpointFilter::default()).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].kind, CheckpointKind::Post);
    assert_eq!(all[1].kind, CheckpointKind::Pre);
    assert!(all.iter().all(|c| c.complete && c.root_hash.len() == 64));
    let none = fx
        .store
        .list(&CheckpointFilter {
            session_id: "other".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(none.is_empty());
}

#[test]
fn diff_between_checkpoints_and_to_workspace() {
    let fx = Fixture::new();
    fx.write("a.txt", "1\n");
    let (pre, post) = fx.step("s1", |ws| fs::write(ws.join("a.txt"), "2\n").unwrap());
    let d = fx.store.diff(&pre.id, Some(&post.id)).unwrap();
    assert_eq!(d.changes.len(), 1);
    assert!(d.patch.contains("-1\n+2\n"), "{}", d.patch);
    fx.write("a.txt", "3\n");
    let d = fx.store.diff(&post.id, None).unwrap();
    assert!(d.patch.contains("-2\n+3\n"), "{}", d.patch);
    assert!(matches!(
        fx.store.diff("nope", None),
        Err(CheckpointError::NotFound(_))
    ));
}

#[test]
fn conversation_rollback_archives_run_state_and_lists_external_effects() {
    let fx = Fixture::new();
    fx.write("a", "1");
    {
        let conn = fx.store.db().lock();
        conn.execute(
            "INSERT INTO sessions (id, workspace, policy_name, policy_hash, policy_toml, state, peer_uid, created_at_ms) VALUES ('s1', '/w', 'default', 'h', '', 'open', 0, 0)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO runs (id, session_id, task, model, status, state_json, created_at_ms, updated_at_ms) VALUES ('r1', 's1', 't', 'm', 'running', '{\"history\":[1]}', 0, 0)",
            [],
        )
        .unwrap();
    }
    let mut meta = fx.meta("st1");
    meta.run_id = "r1".into();
    let pre = fx.store.pre_step(fx.ws(), &fx.settings, &meta).unwrap();
    assert_eq!(pre.run_state_json.as_deref(), Some("{\"history\":[1]}"));
    fx.store
        .db()
        .lock()
        .execute(
            "UPDATE runs SET state_json = '{\"history\":[1,2]}' WHERE id = 'r1'",
            [],
        )
        .unwrap();
    let mut ext = meta.clone();
    ext.side_effects = SideEffects::External;
    ext.tool = "exec".into();
    ext.arguments_json = r#"{"command":"curl -X POST https://example.invalid"}"#.into();
    ext.compensation = Some("DELETE the created resource".into());
    fx.store
        .post_step(fx.ws(), &fx.settings, &pre.id, &ext)
        .unwrap();
    let r = fx
        .store
        .rollback(&pre.id, &RollbackOptions::default())
        .unwrap();
    let state: String = fx
        .store
        .db()
        .lock()
        .query_row("SELECT state_json FROM runs WHERE id = 'r1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(state, "{\"history\":[1]}");
    let archived: String = fx
        .store
        .db()
        .lock()
        .query_row(
            "SELECT state_json FROM run_state_archive WHERE id = ?1",
            [r.archived_branch_id.as_deref().unwrap()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(archived, "{\"history\":[1,2]}");
    assert_eq!(r.external_effects.len(), 1);
    assert_eq!(
        r.external_effects[0].compensation,
        "DELETE the created resource"
    );
    let rb = fx.store.get(&r.checkpoint_id).unwrap();
    assert!(rb
        .rollback_json
        .unwrap()
        .contains("\"external_effects_undone\":false"));
}

#[test]
fn gc_keeps_last_runs_and_latest_and_frees_blobs() {
    let fx = Fixture::new();
    let mut ids = Vec::new();
    for i in 0..4 {
        let mut meta = fx.meta("st");
        meta.run_id = format!("run{i}");
        let pre = fx.store.pre_step(fx.ws(), &fx.settings, &meta).unwrap();
        fs::write(fx.ws().join("f"), format!("version {i}")).unwrap();
        let post = fx
            .store
            .post_step(fx.ws(), &fx.settings, &pre.id, &meta)
            .unwrap();
        ids.push((pre.id, post.id));
    }
    let r = fx.store.gc(2, u64::MAX).unwrap();
    assert_eq!(r.checkpoints_deleted, 4);
    assert!(r.blobs_deleted >= 2, "{r:?}");
    assert!(matches!(
        fx.store.get(&ids[0].0),
        Err(CheckpointError::NotFound(_))
    ));
    // Kept checkpoints still roll back.
    fx.store
        .rollback(
            &ids[2].0,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(fs::read_to_string(fx.ws().join("f")).unwrap(), "version 1");
    // A size cap of 0 keeps only each workspace's latest checkpoint.
    fx.store.gc(50, 0).unwrap();
    assert_eq!(
        fx.store.list(&CheckpointFilter::default()).unwrap().len(),
        1
    );
    let after = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    fx.step("s", |ws| fs::write(ws.join("f"), "later").unwrap());
    let latest = &fx.store.list(&CheckpointFilter::default()).unwrap()[2];
    assert_eq!(fx.store.load_snapshot(&latest.id).unwrap().root, after.root);
}

fn git(ws: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(ws)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn git_refs_record_commits_without_moving_head_index_or_branches() {
    let mut fx = Fixture::new();
    fx.settings.git_refs = true;
    let ws = fx.ws().to_path_buf();
    git(&ws, &["init", "-q"]);
    fx.write("a.txt", "one\n");
    fx.write("gone.txt", "bye\n");
    git(
        &ws,
        &["-c", "user.email=t@t", "-c", "user.name=t", "add", "-A"],
    );
    git(
        &ws,
        &[
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "base",
        ],
    );
    let head = git(&ws, &["rev-parse", "HEAD"]);
    let index = fs::read(ws.join(".git/index")).unwrap();
    let (pre, post) = fx.step("s1", |ws| {
        fs::write(ws.join("a.txt"), "two\n").unwrap();
        fs::remove_file(ws.join("gone.txt")).unwrap();
        fs::write(ws.join("new.txt"), "new\n").unwrap();
    });
    let pre_ref = pre.git_ref.clone().expect("pre recorded in git");
    let post_ref = post.git_ref.clone().expect("post recorded in git");
    let post_name = post_ref.split(' ').nth(1).unwrap();
    assert!(post_name.starts_with("refs/warden/s1/"));
    assert_eq!(git(&ws, &["show", &format!("{post_name}:a.txt")]), "two");
    assert_eq!(git(&ws, &["show", &format!("{post_name}:new.txt")]), "new");
    assert_eq!(
        git(&ws, &["ls-tree", "--name-only", post_name]),
        "a.txt\nnew.txt"
    );
    // Chained: the post commit's parent is the pre commit.
    let pre_commit = pre_ref.split(' ').next().unwrap();
    assert_eq!(
        git(&ws, &["rev-parse", &format!("{post_name}^")]),
        pre_commit
    );
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]), head);
    assert_eq!(fs::read(ws.join(".git/index")).unwrap(), index);
    assert_eq!(
        git(&ws, &["branch", "--format=%(refname)"]).lines().count(),
        1
    );
}

#[test]
fn drift_only_under_git_does_not_block_a_rollback_that_leaves_git_alone() {
    let fx = Fixture::new();
    fx.write(".git/index", "index v1");
    fx.write("a.txt", "v1");
    let (pre, _) = fx.step("s1", |ws| fs::write(ws.join("a.txt"), "v2").unwrap());
    // The user's `git status` refreshes the index.
    fx.write(".git/index", "index v2");
    let r = fx
        .store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(fs::read_to_string(fx.ws().join("a.txt")).unwrap(), "v1");
    assert_eq!(
        fs::read_to_string(fx.ws().join(".git/index")).unwrap(),
        "index v2"
    );
    assert_eq!(r.drifted, vec![".git/index".to_string()]);
    // With --include-git the same kind of drift refuses (it would be
    // overwritten).
    fx.write(".git/index", "index v3");
    let err = fx
        .store
        .rollback(
            &pre.id,
            &RollbackOptions {
                files: true,
                include_git: true,
                ..Default::default()
            },
        )
        .unwrap_err();
    match &err {
        CheckpointError::Drift { paths, .. } => assert_eq!(paths, &vec![".git/index".to_string()]),
        e => panic!("expected drift, got {e}"),
    }
}

#[test]
fn a_conversation_only_rollback_restores_and_reports_no_files() {
    let fx = Fixture::new();
    fx.write("a.txt", "v1");
    let (pre, _) = fx.step("s1", |ws| fs::write(ws.join("a.txt"), "v2").unwrap());
    // The user edits; a conversation rollback must neither touch it nor
    // report it as restored.
    fx.write("a.txt", "v3-user");
    let r = fx
        .store
        .rollback(
            &pre.id,
            &RollbackOptions {
                conversation: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(r.restored.is_empty(), "{:?}", r.restored);
    assert_eq!(
        fs::read_to_string(fx.ws().join("a.txt")).unwrap(),
        "v3-user"
    );
}

/// The checkpoint walk collects nested git control paths in the same pass:
/// the same set as a walk recording nothing, including repositories inside
/// excluded directories (which are not recorded) and below a non-UTF-8
/// directory name, never the workspace's own `.git`, never through a
/// symlink; a step's post walk sees what the step planted.
#[test]
fn snapshot_walk_collects_nested_git_control_paths() {
    use std::os::unix::ffi::OsStrExt;
    let f = Fixture::new();
    f.write(".git/hooks/pre-commit", "own: not ours to judge");
    f.write(".git/config", "[core]\n");
    f.write("a/.git/config", "[core]\n\tbare = false\n");
    f.write("a/.git/hooks/pre-push", "hook");
    f.write("a/.git/objects/ab/cdef", "object: not a control path");
    f.write(
        "a/.git/sub/.git/config",
        "inside a git dir: not a repository",
    );
    f.write(
        "node_modules/dep/.git/hooks/post-checkout",
        "hook in an excluded dir",
    );
    f.write("node_modules/dep/index.js", "x");
    f.write("target/x/y/.git", "gitdir: ../../evil\n");
    let ext = tempfile::tempdir().unwrap();
    fs::create_dir_all(ext.path().join(".git/hooks")).unwrap();
    fs::write(ext.path().join(".git/hooks/pre-commit"), "outside").unwrap();
    symlink(ext.path(), f.ws().join("link")).unwrap();
    let odd = f
        .ws()
        .join(std::ffi::OsStr::from_bytes(b"odd\xff/deep/.git/hooks"));
    fs::create_dir_all(&odd).unwrap();
    fs::write(odd.join("post-merge"), "hook under a non-UTF-8 name").unwrap();

    let (pre, scan) = f
        .store
        .step_with_nested_git(f.ws(), &f.settings, None, &f.meta("s"))
        .unwrap();
    assert!(!scan.incomplete);
    let paths: Vec<String> = scan
        .paths
        .keys()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        paths,
        [
            "a/.git/config",
            "a/.git/hooks/pre-push",
            "node_modules/dep/.git/hooks/post-checkout",
            "odd\u{fffd}/deep/.git/hooks/post-merge",
            "target/x/y/.git",
        ]
    );
    let alone = crate::checkpoint::scan_nested_git(
        &cap_std::fs::Dir::open_ambient_dir(f.ws(), cap_std::ambient_authority()).unwrap(),
    );
    assert_eq!(alone, scan);
    // Excluded directories are searched, not recorded.
    let snap = f.store.snapshot(f.ws(), &f.settings).unwrap();
    assert!(!snap.entries.keys().any(|p| p.starts_with("node_modules")));
    assert!(snap.entries.contains_key("a/.git/objects/ab/cdef"));
    // Fingerprints change with the content.
    f.write("a/.git/hooks/pre-push", "hook, changed");
    f.write("b/.git/hooks/pre-commit", "planted");
    let (_, after) = f
        .store
        .step_with_nested_git(f.ws(), &f.settings, Some(&pre.id), &f.meta("s"))
        .unwrap();
    let pp = Path::new("a/.git/hooks/pre-push");
    assert_ne!(after.paths[pp], scan.paths[pp]);
    assert!(after
        .paths
        .contains_key(Path::new("b/.git/hooks/pre-commit")));
    assert_eq!(
        after.paths[Path::new("a/.git/config")],
        scan.paths[Path::new("a/.git/config")]
    );
}

/// A directory whose stat key is unchanged is not read again (its cached
/// listing is used), and every way of changing its entries — create,
/// delete, rename within and across directories, a new subdirectory, a
/// symlink, a file swapped for a directory — is seen, by this store and by
/// a new one reading the cache file; so is an entry created right after a
/// walk cached the listing (a cached listing never hides a change).
#[test]
fn cached_directory_listings_never_hide_entry_changes() {
    let fx = Fixture::new();
    for i in 0..20 {
        fx.write(&format!("d{}/f{i}.txt", i % 4), &format!("content {i}"));
    }
    settle();
    let first = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    let names = |s: &Snapshot| s.entries.keys().cloned().collect::<Vec<_>>();
    let fresh = |fx: &Fixture| {
        fx.store.wait_for_stat_cache_writes();
        let store2 = CheckpointStore::open(fx._state.path(), fx.store.db().clone()).unwrap();
        store2.snapshot(fx.ws(), &fx.settings).unwrap()
    };
    assert_eq!(names(&fresh(&fx)), names(&first));
    fx.write("d0/new.txt", "new");
    fs::remove_file(fx.ws().join("d1/f1.txt")).unwrap();
    fs::rename(fx.ws().join("d2/f2.txt"), fx.ws().join("d2/moved.txt")).unwrap();
    fs::rename(fx.ws().join("d3/f3.txt"), fx.ws().join("d0/across.txt")).unwrap();
    fx.write("d1/sub/deep.txt", "deep");
    symlink("f5.txt", fx.ws().join("d1/link")).unwrap();
    fs::remove_file(fx.ws().join("d3/f7.txt")).unwrap();
    fx.write("d3/f7.txt/inner.txt", "now a directory");
    let mut want = names(&first);
    want.retain(|p| !["d1/f1.txt", "d2/f2.txt", "d3/f3.txt"].contains(&p.as_str()));
    want.extend(
        [
            "d0/new.txt",
            "d2/moved.txt",
            "d0/across.txt",
            "d1/sub",
            "d1/sub/deep.txt",
            "d1/link",
            "d3/f7.txt/inner.txt",
        ]
        .map(String::from),
    );
    want.sort();
    for s in [
        fx.store.snapshot(fx.ws(), &fx.settings).unwrap(),
        fresh(&fx),
    ] {
        assert_eq!(names(&s), want);
        assert_eq!(s.entries["d3/f7.txt"].kind, EntryKind::Dir);
        assert_eq!(s.entries["d1/link"].kind, EntryKind::Symlink);
    }
    // Listings cached after the changes settle; a create right after a
    // walk is still seen.
    settle();
    fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    fx.write("d2/late.txt", "late");
    let s = fx.store.snapshot(fx.ws(), &fx.settings).unwrap();
    assert!(s.entries.contains_key("d2/late.txt"));
}
