//! cgroup v2 memory and pids limits per command, where the daemon has a
//! delegated cgroup (kernel `Documentation/admin-guide/cgroup-v2.rst`,
//! "Delegation"; systemd's `Delegate=yes`).
//!
//! rlimits stay the baseline (they work everywhere); these limits are added
//! when a policy sets `sandbox.limits.cgroup_memory_max_bytes` or
//! `cgroup_pids_max`, which no shipped policy does. Without delegation such
//! a policy is **refused** with the reason, never run weaker.
//!
//! # Delegation
//!
//! The helper's own cgroup `B` (from `/proc/self/cgroup`, `0::` line, under
//! the `cgroup2` mount) counts as delegated when `B` is writable and its
//! `cgroup.controllers` lists `memory` and `pids`, and no process but the
//! helper and the daemon is in it (unless its `cgroup.subtree_control`
//! already enables both). At start, before any command, the helper makes `B`
//! a parent of leaves, as cgroup v2's "no internal processes" rule requires:
//! it creates `B/warden-daemon`, moves itself and the daemon there
//! (`cgroup.procs`), and enables `+memory +pids` in `B/cgroup.subtree_control`.
//! When any of that fails there is no delegation: policies with cgroup limits
//! are refused, with the reason.
//!
//! # One command
//!
//! Before the clone: `B/warden-cmd-<helper pid>-<id>` with `memory.max`,
//! `memory.swap.max = 0` (a memory bomb is killed, not swapped; skipped
//! without swap accounting), `memory.oom.group = 1` (the OOM killer takes the
//! whole command) and `pids.max`. After the clone, before the child is
//! released: its pid into `cgroup.procs`, so every process of the command is
//! inside from its first instruction. After the command: `memory.events`
//! (`oom_kill`) and `pids.events` (`max`) are read into the exit report,
//! `cgroup.kill`, then `rmdir` (retried while the dying processes leave).

use std::path::{Path, PathBuf};

use super::settings::Limits;

/// What [`detect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delegation {
    /// The helper's cgroup directory (`B`).
    pub base: PathBuf,
}

/// Events of one command's cgroup, read after it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Events {
    /// `memory.events` `oom_kill`: processes the OOM killer took.
    pub oom_kills: u64,
    /// `pids.events` `max`: forks refused by `pids.max`.
    pub pids_max: u64,
}

/// The cgroup2 mount point and this process's cgroup path under it, from
/// `mountinfo` and `cgroup` text (proc(5)).
pub(crate) fn own_cgroup(mountinfo: &str, cgroup: &str) -> Result<PathBuf, String> {
    let Some(path) = cgroup.lines().find_map(|l| l.strip_prefix("0::")) else {
        return Err(
            "no cgroup v2 membership (cgroup v1 only, or hybrid without the unified hierarchy)"
                .into(),
        );
    };
    let Some(mnt) = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next() == Some("cgroup2"))
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))?
    }) else {
        return Err("cgroup2 is not mounted".into());
    };
    if path.split('/').any(|c| c == "..") {
        return Err(format!(
            "this process's cgroup {path} lies outside its cgroup namespace"
        ));
    }
    let rel = path.trim_matches('/');
    Ok(if rel.is_empty() { mnt } else { mnt.join(rel) })
}

fn controllers(dir: &Path, file: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

fn writable(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: access(2) on a valid C string.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Finds the delegated cgroup of this process; `ours` are the processes
/// that may be moved out of it (the helper and the daemon). Errors: why
/// there is none (one sentence, for `warden doctor` and refusals).
pub(crate) fn detect(ours: &[libc::pid_t]) -> Result<Delegation, String> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let cg = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    detect_at(&own_cgroup(&mi, &cg)?, ours)
}

/// [`detect`] for a given cgroup directory.
pub(crate) fn detect_at(base: &Path, ours: &[libc::pid_t]) -> Result<Delegation, String> {
    let avail = controllers(base, "cgroup.controllers");
    let missing: Vec<&str> = ["memory", "pids"]
        .into_iter()
        .filter(|c| !avail.iter().any(|a| a == c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{}: controllers [{}] lack {} (on a hybrid host they belong to cgroup v1)",
            base.display(),
            avail.join(" "),
            missing.join(", ")
        ));
    }
    if !writable(base) {
        return Err(format!("{}: not writable by the daemon", base.display()));
    }
    let enabled = controllers(base, "cgroup.subtree_control");
    let ready = ["memory", "pids"]
        .iter()
        .all(|c| enabled.iter().any(|e| e == c));
    if !ready {
        // "No internal processes": the controllers can only be enabled for
        // children once every process left `base`; only ours may be moved.
        let others = std::fs::read_to_string(base.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<libc::pid_t>().ok())
            .filter(|p| !ours.contains(p))
            .count();
        if others > 0 {
            return Err(format!(
                "{}: {others} other process(es) share the daemon's cgroup; run the daemon \
                 in a cgroup of its own (systemd: Delegate=yes)",
                base.display()
            ));
        }
    }
    Ok(Delegation {
        base: base.to_path_buf(),
    })
}

fn write(p: &Path, v: &str) -> Result<(), String> {
    std::fs::write(p, v).map_err(|e| format!("write {v:?} to {}: {e}", p.display()))
}

impl Delegation {
    /// Makes the base a parent of leaves (see the module docs): moves
    /// `pids` (the helper, the daemon) into `base/warden-daemon` and enables
    /// the memory and pids controllers for children. Idempotent.
    pub(crate) fn prepare(&self, pids: &[libc::pid_t]) -> Result<(), String> {
        let enabled = controllers(&self.base, "cgroup.subtree_control");
        if ["memory", "pids"]
            .iter()
            .all(|c| enabled.iter().any(|e| e == c))
        {
            return Ok(());
        }
        let leaf = self.base.join("warden-daemon");
        match std::fs::create_dir(&leaf) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("mkdir {}: {e}", leaf.display())),
        }
        for pid in pids {
            write(&leaf.join("cgroup.procs"), &pid.to_string())?;
        }
        write(&self.base.join("cgroup.subtree_control"), "+memory +pids").map_err(|e| {
            format!("{e} (another process still in the cgroup keeps it from delegating)")
        })
    }

    /// Creates the cgroup of one command with `limits` applied (0 = no
    /// limit on that resource).
    pub(crate) fn create(&self, name: &str, limits: &Limits) -> Result<PathBuf, String> {
        let dir = self.base.join(name);
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let r = (|| {
            if limits.cgroup_memory_max_bytes > 0 {
                write(
                    &dir.join("memory.max"),
                    &limits.cgroup_memory_max_bytes.to_string(),
                )?;
                // Without swap accounting the file is absent: nothing to cap.
                if dir.join("memory.swap.max").exists() {
                    write(&dir.join("memory.swap.max"), "0")?;
                }
                write(&dir.join("memory.oom.group"), "1")?;
            }
            if limits.cgroup_pids_max > 0 {
                write(&dir.join("pids.max"), &limits.cgroup_pids_max.to_string())?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(dir)
    }
}

/// Moves `pid` into the cgroup `dir`.
pub(crate) fn enter(dir: &Path, pid: libc::pid_t) -> Result<(), String> {
    write(&dir.join("cgroup.procs"), &pid.to_string())
}

/// The `key N` value of a flat-keyed cgroup file.
fn flat_key(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// Reads the events of a command's cgroup.
pub(crate) fn events(dir: &Path) -> Events {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    Events {
        oom_kills: flat_key(&read("memory.events"), "oom_kill"),
        pids_max: flat_key(&read("pids.events"), "max"),
    }
}

/// Kills whatever is left in `dir` and removes it. `false` when it is still
/// busy (processes on their way out): call again later.
pub(crate) fn remove(dir: &Path) -> bool {
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw\n41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    #[test]
    fn own_cgroup_from_proc_text() {
        assert_eq!(
            own_cgroup(MI, "4:memory:/x\n0::/user.slice/warden.service\n").unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified/user.slice/warden.service")
        );
        assert_eq!(
            own_cgroup(MI, "0::/\n").unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified")
        );
        assert!(own_cgroup(MI, "4:memory:/x\n").unwrap_err().contains("v2"));
        assert!(own_cgroup("", "0::/\n")
            .unwrap_err()
            .contains("not mounted"));
        assert!(own_cgroup(MI, "0::/../other\n").is_err());
    }

    /// A directory standing in for cgroupfs (plain files): what the helper
    /// writes, in which files.
    #[test]
    fn delegation_on_a_fake_cgroupfs() {
        let t = tempfile::tempdir().unwrap();
        let b = t.path();
        std::fs::write(b.join("cgroup.controllers"), "cpu hugetlb\n").unwrap();
        let e = detect_at(b, &[]).unwrap_err();
        assert!(e.contains("memory, pids") && e.contains("hybrid"), "{e}");
        std::fs::write(b.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        std::fs::write(b.join("cgroup.subtree_control"), "").unwrap();
        std::fs::write(b.join("cgroup.procs"), "41\n42\n43\n").unwrap();
        let e = detect_at(b, &[41, 42]).unwrap_err();
        assert!(e.contains("1 other process"), "{e}");
        std::fs::write(b.join("cgroup.procs"), "41\n42\n").unwrap();
        let d = detect_at(b, &[41, 42]).unwrap();
        d.prepare(&[41, 42]).unwrap();
        assert_eq!(
            std::fs::read_to_string(b.join("cgroup.subtree_control")).unwrap(),
            "+memory +pids"
        );
        // Plain files keep the last write only; cgroupfs appends moves.
        assert_eq!(
            std::fs::read_to_string(b.join("warden-daemon/cgroup.procs")).unwrap(),
            "42"
        );
        let limits = Limits {
            cgroup_memory_max_bytes: 64 << 20,
            cgroup_pids_max: 32,
            ..Limits::default()
        };
        let dir = d.create("warden-cmd-1", &limits).unwrap();
        let r = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(r("memory.max"), (64u64 << 20).to_string());
        assert_eq!(r("memory.oom.group"), "1");
        assert_eq!(r("pids.max"), "32");
        enter(&dir, 7).unwrap();
        assert_eq!(r("cgroup.procs"), "7");
        std::fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n",
        )
        .unwrap();
        std::fs::write(dir.join("pids.events"), "max 17\n").unwrap();
        assert_eq!(
            events(&dir),
            Events {
                oom_kills: 2,
                pids_max: 17
            }
        );
        // A second command's cgroup with the same name is refused.
        assert!(d.create("warden-cmd-1", &limits).is_err());
    }
}
