//! Turns one [`WireRequest`] into a [`Plan`]: every path checked, every
//! source opened (`O_PATH`), the environment and Landlock rules computed —
//! all in the helper, before the clone, so the child only executes.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::landlock_rules::Rules;
use super::mounts::Op;
use super::protocol::{WireError, WireRequest};
use super::settings::Limits;
use super::Profile;

/// The uid and gid the command has inside its user namespace.
pub const SANDBOX_ID: u32 = 1000;
/// Name of the sandbox user in the generated `/etc/passwd`.
pub const SANDBOX_USER: &str = "warden";

/// System directories bound read-only (or recreated as symlinks when the
/// host has a merged `/usr`).
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Toolchain locations under the host's home, bound read-only when present.
pub const TOOLCHAINS: &[&str] = &[
    ".cargo/bin",
    ".cargo/registry",
    ".cargo/git",
    ".rustup",
    ".pyenv",
    ".nvm",
    ".local/bin",
    "go",
];

/// Credential files that are masked wherever a bound tree would expose them.
pub const CREDENTIALS: &[&str] = &[
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".git-credentials",
    ".ssh",
    ".aws",
    ".gnupg",
    ".docker/config.json",
    ".config/gh",
    ".kube",
];

/// Names that hold registry tokens at the top of a cargo home
/// (`$CARGO_HOME/credentials[.toml]`, cargo book "Credentials"): masked at
/// the top of every bound tree, since a cargo home may live anywhere.
const BARE_CREDENTIALS: &[&str] = &["credentials", "credentials.toml"];

/// The credential files and directories to mask: every existing path, in
/// every bound tree `B` (toolchains, `/opt`, the policy's `read_only_paths`),
/// that is `B/c` for a [`CREDENTIALS`] entry `c`, or the tail of `c` when `B`
/// itself ends with the head of `c` (`B = /x/.cargo` masks
/// `B/credentials.toml`; `B = /x/.config` masks `B/gh`), or a
/// [`BARE_CREDENTIALS`] name at the top of `B` or of `cargo_home`. A
/// credential that is a symlink is masked at its target when the target lies
/// in a bound tree (a dangling link exposes nothing). Returns
/// `(path, is_file)`, deduplicated, only paths inside some bound tree.
///
/// Only `stat`s fixed candidates (no directory walk): a credential file at
/// another depth of a bound tree is not found — bind narrower trees.
pub(crate) fn credential_masks(
    home: &Path,
    bound: &[PathBuf],
    cargo_home: Option<&Path>,
) -> Vec<(PathBuf, bool)> {
    let mut cands: Vec<PathBuf> = Vec::new();
    for c in CREDENTIALS {
        cands.push(home.join(c));
    }
    if let Some(ch) = cargo_home {
        cands.extend(BARE_CREDENTIALS.iter().map(|n| ch.join(n)));
    }
    for b in bound {
        cands.extend(BARE_CREDENTIALS.iter().map(|n| b.join(n)));
        for c in CREDENTIALS {
            let parts: Vec<_> = Path::new(c).components().collect();
            for k in 0..parts.len() {
                let head: PathBuf = parts[..k].iter().collect();
                if k == 0 || b.ends_with(&head) {
                    let tail: PathBuf = parts[k..].iter().collect();
                    cands.push(b.join(tail));
                }
            }
        }
    }
    let inside = |p: &Path| bound.iter().any(|b| p.starts_with(b) && p != b);
    let mut out: Vec<(PathBuf, bool)> = Vec::new();
    for p in cands {
        if !inside(&p) {
            continue;
        }
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let (dst, meta) = if m.file_type().is_symlink() {
            match std::fs::canonicalize(&p).and_then(|t| Ok((std::fs::metadata(&t)?, t))) {
                Ok((tm, t)) if inside(&t) => (t, tm),
                _ => continue, // dangling or pointing out of the view
            }
        } else {
            (p, m)
        };
        if !out.iter().any(|(d, _)| *d == dst) {
            out.push((dst, !meta.is_dir()));
        }
    }
    out
}

/// Environment variables pointed into [`crate::sandbox::SpawnRequest::cache_dir`]
/// (variable, subdirectory): pip, npm, yarn, Go, and every XDG-cache user.
pub const CACHE_ENV: &[(&str, &str)] = &[
    ("PIP_CACHE_DIR", "pip"),
    ("npm_config_cache", "npm"),
    ("YARN_CACHE_FOLDER", "yarn"),
    ("GOPATH", "go"),
    ("GOMODCACHE", "go/pkg/mod"),
    ("GOCACHE", "go-build"),
    ("XDG_CACHE_HOME", "xdg"),
];

/// `p` is absolute without `..` and a directory (`follow`: through a
/// symlink; else a symlink is refused). Errors: `Refused` naming `what`.
fn abs_dir(p: &Path, what: &str, follow: bool) -> Result<std::fs::Metadata, WireError> {
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(refused(format!("{what} {} is not absolute", p.display())));
    }
    let m = if follow {
        std::fs::metadata(p)
    } else {
        std::fs::symlink_metadata(p)
    }
    .map_err(|e| refused(format!("{what} {}: {e}", p.display())))?;
    if !m.is_dir() {
        return Err(refused(format!(
            "{what} {} is not a directory",
            p.display()
        )));
    }
    Ok(m)
}

/// Checks a request's cache dir: install profile only, an absolute real
/// directory (not a symlink) outside the workspace, the hidden paths and the
/// system trees. When the helper is root, hands the directory itself (not
/// its contents) to the sandbox's host uid so the command can write it.
fn cache_bind(
    c: &Path,
    profile: Profile,
    ws: &Path,
    hidden: &[PathBuf],
    host: &HostFacts,
) -> Result<(), WireError> {
    if profile != Profile::Install {
        return Err(refused(format!(
            "a package-cache dir is for the install profile only, not {}",
            profile.as_str()
        )));
    }
    let m = abs_dir(c, "cache dir", false)?;
    if overlaps(c, ws)
        || hidden.iter().any(|h| overlaps(c, h))
        || SYSTEM.iter().any(|s| overlaps(c, Path::new(s)))
    {
        return Err(refused(format!(
            "cache dir {} overlaps the workspace, a hidden path or a system tree",
            c.display()
        )));
    }
    if host.root {
        use std::os::unix::fs::MetadataExt;
        if m.uid() != host.host_uid {
            std::os::unix::fs::lchown(c, Some(host.host_uid), Some(host.host_gid))
                .map_err(|e| setup("cache", format!("chown {}: {e}", c.display())))?;
        }
    }
    Ok(())
}

/// Device nodes bound into the minimal `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// Facts about the helper fixed at start.
#[derive(Debug, Clone)]
pub(crate) struct HostFacts {
    /// The helper runs as root (idmapped workspace, unprivileged host uid).
    pub root: bool,
    /// Host uid/gid the sandbox id maps to.
    pub host_uid: u32,
    pub host_gid: u32,
    /// The host's home directory (toolchains live there).
    pub home: PathBuf,
    /// The helper's own `CARGO_HOME`, when set (its `credentials*` are
    /// masked wherever a bound tree exposes them).
    pub cargo_home: Option<PathBuf>,
    /// [`super::landlock_rules::ABI_CAP_ENV`] of the helper's environment.
    pub landlock_abi_cap: Option<i64>,
}

/// A program to execute: argv, the complete environment (`KEY=value`) and
/// the candidate executables for `argv[0]`, in `PATH` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cmd {
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
    pub exe: Vec<CString>,
}

/// Everything the child needs.
pub(crate) struct Plan {
    pub cmd: Cmd,
    /// Executed when no candidate of `cmd` can be ([`super::Fallback`]).
    pub fallback: Option<Cmd>,
    pub cwd: PathBuf,
    pub workspace: PathBuf,
    pub private_net: bool,
    pub ops: Vec<Op>,
    pub protect: Vec<PathBuf>,
    pub rules: Rules,
    pub require_full_landlock: bool,
    pub limits: Limits,
    /// Workspace owner on disk (for the idmapped mount).
    pub ws_owner: (u32, u32),
    pub ws_readonly: bool,
}

fn setup(stage: &str, message: impl Into<String>) -> WireError {
    WireError::Setup {
        stage: stage.into(),
        message: message.into(),
    }
}

fn refused(m: impl Into<String>) -> WireError {
    WireError::Refused(m.into())
}

fn open_path(p: &Path) -> std::io::Result<OwnedFd> {
    let c = CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: valid C string; O_PATH open returns a new fd or -1.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        // SAFETY: fresh fd.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

/// What resolving a command's environment and executable depends on.
struct CmdContext<'a> {
    /// Whether a host path is visible inside the sandbox.
    is_visible: &'a dyn Fn(&Path) -> bool,
    home: &'a Path,
    cwd: &'a Path,
    cache_dir: Option<&'a Path>,
}

impl CmdContext<'_> {
    /// The environment (the caller's, `PATH` restricted to directories the
    /// sandbox shows, `HOME`, `CARGO_HOME`, `RUSTUP_HOME` set when absent,
    /// package caches pointed into the cache dir) and the candidates for
    /// `argv[0]` (execvp(3) semantics, without the shell fallback).
    /// Errors: `Refused` for NUL bytes or a bad variable name.
    fn resolve(&self, argv: &[String], env: &[(String, String)]) -> Result<Cmd, WireError> {
        let home = self.home;
        let argv = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| refused("command contains a NUL byte"))?;
        let mut env: Vec<(String, String)> = env.to_vec();
        let get = |env: &Vec<(String, String)>, k: &str| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        let set = |env: &mut Vec<(String, String)>, k: &str, v: String| {
            env.retain(|(n, _)| n != k);
            env.push((k.to_string(), v));
        };
        let path = get(&env, "PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        let kept: Vec<&str> = path
            .split(':')
            .filter(|d| {
                !d.is_empty() && Path::new(d).is_absolute() && (self.is_visible)(Path::new(d))
            })
            .collect();
        set(&mut env, "PATH", kept.join(":"));
        if get(&env, "HOME").is_none() {
            set(&mut env, "HOME", home.display().to_string());
        }
        if home.join(".cargo/bin").is_dir() && get(&env, "CARGO_HOME").is_none() {
            set(
                &mut env,
                "CARGO_HOME",
                home.join(".cargo").display().to_string(),
            );
        }
        if let Some(c) = self.cache_dir {
            // Package managers' caches in the session's cache dir, never
            // the host's (which the sandbox does not show anyway).
            for (k, sub) in CACHE_ENV {
                set(&mut env, k, c.join(sub).display().to_string());
            }
        }
        if home.join(".rustup").is_dir() && get(&env, "RUSTUP_HOME").is_none() {
            set(
                &mut env,
                "RUSTUP_HOME",
                home.join(".rustup").display().to_string(),
            );
        }
        let env = env
            .iter()
            .map(|(k, v)| {
                if k.is_empty() || k.contains('=') {
                    return Err(refused(format!("bad environment variable name {k:?}")));
                }
                CString::new(format!("{k}={v}"))
                    .map_err(|_| refused(format!("environment variable {k} contains a NUL byte")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let a0 = argv[0].to_string_lossy();
        let exe: Vec<CString> = if a0.contains('/') {
            let p = if Path::new(a0.as_ref()).is_absolute() {
                PathBuf::from(a0.as_ref())
            } else {
                self.cwd.join(a0.as_ref())
            };
            vec![CString::new(p.as_os_str().as_bytes()).map_err(|_| refused("NUL in command"))?]
        } else {
            kept.iter()
                .filter_map(|d| CString::new(format!("{d}/{a0}")).ok())
                .collect()
        };
        Ok(Cmd { argv, env, exe })
    }
}

impl Plan {
    /// Checks `req` and prepares it. Errors: `Refused` for input that must
    /// not run (bad paths, hidden paths), `Setup` for host trouble.
    pub(crate) fn new(wire: &WireRequest, host: &HostFacts) -> Result<Plan, WireError> {
        let req = &wire.spawn;
        let hidden = &wire.hidden;
        req.settings
            .validate()
            .map_err(|e| refused(e.to_string()))?;
        if req.argv.is_empty() || req.argv[0].is_empty() {
            return Err(refused("empty command"));
        }
        let ws = &req.workspace;
        let meta = abs_dir(ws, "workspace", true)?;
        if ws == Path::new("/") || SYSTEM.iter().any(|s| ws == Path::new(s)) {
            return Err(refused(format!(
                "workspace {} is a system directory",
                ws.display()
            )));
        }
        for h in hidden {
            if overlaps(ws, h) {
                return Err(refused(format!(
                    "workspace {} overlaps hidden path {}",
                    ws.display(),
                    h.display()
                )));
            }
        }
        if !req.cwd.is_absolute() || !req.cwd.starts_with(ws) {
            return Err(refused(format!(
                "cwd {} is not inside the workspace {}",
                req.cwd.display(),
                ws.display()
            )));
        }
        use std::os::unix::fs::MetadataExt;
        let ws_owner = (meta.uid(), meta.gid());
        let ws_readonly = req.profile == Profile::SafeRead;
        let tmpfs = req.settings.limits.tmpfs_bytes;
        let home = host.home.clone();

        let mut ops: Vec<Op> = Vec::new();
        let mut visible: Vec<PathBuf> = Vec::new();
        let mut rules = Rules {
            abi_cap: host.landlock_abi_cap,
            ..Rules::default()
        };
        let mut bound_sources: Vec<PathBuf> = Vec::new();

        let mut bind_ro = |p: &Path,
                           ops: &mut Vec<Op>,
                           visible: &mut Vec<PathBuf>,
                           rules: &mut Rules|
         -> Result<(), WireError> {
            for h in hidden {
                if p.starts_with(h) {
                    return Err(refused(format!(
                        "read-only path {} lies inside hidden path {}",
                        p.display(),
                        h.display()
                    )));
                }
            }
            let m = match std::fs::symlink_metadata(p) {
                Ok(m) => m,
                Err(_) => return Ok(()), // absent: skipped
            };
            if m.file_type().is_symlink() && SYSTEM.iter().any(|s| Path::new(s) == p) {
                let target = std::fs::read_link(p).map_err(|e| setup("plan", e.to_string()))?;
                ops.push(Op::Symlink {
                    target,
                    dst: p.to_path_buf(),
                });
                visible.push(p.to_path_buf());
                return Ok(());
            }
            if open_path(p).is_err() {
                return Ok(()); // unreadable for us: not visible
            }
            let file = !std::fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false);
            ops.push(Op::Bind {
                src: p.to_path_buf(),
                dst: p.to_path_buf(),
                file,
                readonly: true,
                device: false,
            });
            visible.push(p.to_path_buf());
            rules.read.push(p.to_path_buf());
            bound_sources.push(p.to_path_buf());
            // A hidden path inside the bound tree (a state dir under /opt)
            // is covered by an empty read-only mount.
            for h in hidden {
                if h.starts_with(p) && h != p {
                    if let Ok(hm) = std::fs::symlink_metadata(h) {
                        ops.push(Op::Mask {
                            dst: h.clone(),
                            file: !hm.is_dir(),
                        });
                    }
                }
            }
            Ok(())
        };

        for s in SYSTEM {
            bind_ro(Path::new(s), &mut ops, &mut visible, &mut rules)?;
        }
        for t in TOOLCHAINS {
            bind_ro(&home.join(t), &mut ops, &mut visible, &mut rules)?;
        }
        for p in &req.settings.read_only_paths {
            bind_ro(p, &mut ops, &mut visible, &mut rules)?;
        }
        drop(bind_ro);

        // Tiers with the host's network need its resolver configuration: on
        // systemd-resolved hosts /etc/resolv.conf links into /run, which is
        // otherwise invisible. Bind that one file, read-only, at its path.
        if !matches!(req.profile, Profile::SafeRead | Profile::Write) {
            let rc = Path::new("/etc/resolv.conf");
            let is_link = std::fs::symlink_metadata(rc)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false);
            if let (true, Ok(target)) = (is_link, std::fs::canonicalize(rc)) {
                if target.is_file() && !visible.iter().any(|v| target.starts_with(v)) {
                    ops.push(Op::Bind {
                        src: target.clone(),
                        dst: target.clone(),
                        file: true,
                        readonly: true,
                        device: false,
                    });
                    rules.read.push(target);
                }
            }
        }

        // Private scratch space and home.
        for (d, mode) in [("/tmp", 0o1777), ("/var/tmp", 0o1777), ("/dev/shm", 0o1777)] {
            ops.push(Op::Tmpfs {
                dst: d.into(),
                mode,
                size: tmpfs,
            });
            visible.push(d.into());
            rules.write.push(d.into());
        }
        if home != Path::new("/") && !home.as_os_str().is_empty() {
            ops.push(Op::Tmpfs {
                dst: home.clone(),
                mode: 0o700,
                size: tmpfs,
            });
            visible.push(home.clone());
            rules.write.push(home.clone());
        }
        // Minimal /dev.
        ops.push(Op::Tmpfs {
            dst: "/dev".into(),
            mode: 0o755,
            size: 1 << 16,
        });
        for d in DEVICES {
            let p = Path::new("/dev").join(d);
            if open_path(&p).is_ok() {
                ops.push(Op::Bind {
                    src: p.clone(),
                    dst: p.clone(),
                    file: true,
                    readonly: false,
                    device: true,
                });
            }
        }
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            ops.push(Op::Symlink {
                target: target.into(),
                dst: Path::new("/dev").join(name),
            });
        }
        rules.devices.push("/dev".into());
        visible.push("/dev".into());

        // Credential files inside anything bound stay hidden.
        // System trees but /opt hold no per-user credentials: fewer stats.
        bound_sources
            .retain(|b| b == Path::new("/opt") || !SYSTEM.iter().any(|s| b == Path::new(s)));
        for (dst, file) in credential_masks(&home, &bound_sources, host.cargo_home.as_deref()) {
            ops.push(Op::Mask { dst, file });
        }

        // The workspace: attached by the child (idmapped when root) or bound.
        if host.root {
            // Placeholder; the helper replaces it with an Attach of the
            // idmapped detached mount.
        } else {
            open_path(ws).map_err(|e| setup("plan", format!("open workspace: {e}")))?;
            ops.push(Op::Bind {
                src: ws.clone(),
                dst: ws.clone(),
                file: false,
                readonly: ws_readonly,
                device: false,
            });
        }
        visible.push(ws.clone());
        if ws_readonly {
            rules.read.push(ws.clone());
        } else {
            rules.write.push(ws.clone());
        }
        if let Some(c) = &req.cache_dir {
            cache_bind(c, req.profile, ws, hidden, host)?;
            ops.push(Op::Bind {
                src: c.clone(),
                dst: c.clone(),
                file: false,
                readonly: false,
                device: false,
            });
            visible.push(c.clone());
            rules.write.push(c.clone());
        }

        // passwd / group with the sandbox user.
        let home_s = home.display().to_string();
        ops.push(Op::File {
            dst: "/etc/passwd".into(),
            content: format!(
                "root:x:0:0:root:/root:/bin/sh\n{SANDBOX_USER}:x:{SANDBOX_ID}:{SANDBOX_ID}:Warden sandbox:{home_s}:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        });
        ops.push(Op::File {
            dst: "/etc/group".into(),
            content: format!("root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_ID}:\nnogroup:x:65534:\n"),
        });
        ops.push(Op::Proc {
            dst: "/proc".into(),
        });
        rules.read.push("/proc".into());

        // Parents before children; stable, so equal depths keep their order.
        ops.sort_by_key(|o| (matches!(o, Op::Proc { .. }), depth(o.dst())));

        // Environment: the caller's, PATH restricted to what is visible,
        // toolchain homes set.
        let is_visible = |p: &Path| visible.iter().any(|v| p.starts_with(v));
        let ctx = CmdContext {
            is_visible: &is_visible,
            home: &home,
            cwd: &req.cwd,
            cache_dir: req.cache_dir.as_deref(),
        };
        let cmd = ctx.resolve(&req.argv, &req.env)?;
        let fallback = match &req.fallback {
            Some(f) if f.argv.is_empty() || f.argv[0].is_empty() => {
                return Err(refused("empty fallback command"))
            }
            Some(f) => Some(ctx.resolve(&f.argv, &f.env)?),
            None => None,
        };

        let protect = if ws_readonly {
            Vec::new()
        } else {
            req.settings.protected_in(ws)
        };

        Ok(Plan {
            cmd,
            fallback,
            cwd: req.cwd.clone(),
            workspace: ws.clone(),
            private_net: matches!(req.profile, Profile::SafeRead | Profile::Write),
            ops,
            protect,
            rules,
            require_full_landlock: req.settings.require_full_landlock,
            limits: req.settings.limits.clone(),
            ws_owner,
            ws_readonly,
        })
    }

    /// Inserts the attach of an idmapped workspace mount (root helper).
    /// What a sandbox built from this plan depends on, apart from the
    /// command itself (argv, env, executable candidates, cwd): every mount
    /// op, protected path, Landlock rule and limit, and the identity
    /// (device, inode, type; lstat(2)) of every host object the mount tree
    /// pins: bind sources, masked files, the workspace, and each protected
    /// path with its ancestors. Two plans with equal fingerprints build the
    /// same sandbox, so a warm one built earlier ([`super::helper`]) may
    /// serve the later: a credential file created since, a protected path
    /// created, removed or swapped for another inode all change it.
    pub(crate) fn fingerprint(&self) -> String {
        use std::fmt::Write;
        use std::os::unix::fs::MetadataExt;
        let mut f = String::new();
        let id = |f: &mut String, p: &Path| match std::fs::symlink_metadata(p) {
            Ok(m) => {
                let _ = write!(
                    f,
                    "|{}:{}:{}:{}",
                    p.display(),
                    m.dev(),
                    m.ino(),
                    m.mode() & 0o170000
                );
            }
            Err(e) => {
                let _ = write!(f, "|{}:{:?}", p.display(), e.kind());
            }
        };
        for op in &self.ops {
            match op {
                // The idmapped workspace mount, attached (root helper only)
                // after the plan is compared: its identity is the
                // workspace's, below.
                Op::Attach { .. } => continue,
                Op::Bind { src, .. } => {
                    let _ = write!(f, "{op:?}");
                    id(&mut f, src);
                }
                Op::Mask { dst, .. } => {
                    let _ = write!(f, "{op:?}");
                    id(&mut f, dst);
                }
                _ => {
                    let _ = write!(f, "{op:?}");
                }
            }
            f.push('\n');
        }
        id(&mut f, &self.workspace);
        for rel in &self.protect {
            for a in rel.ancestors() {
                if !a.as_os_str().is_empty() {
                    id(&mut f, &self.workspace.join(a));
                }
            }
        }
        let _ = write!(
            f,
            "\n{:?} {:?} {:?} {} {} {:?} {:?}",
            self.workspace,
            self.protect,
            self.rules,
            self.private_net,
            self.require_full_landlock,
            self.limits,
            (self.ws_owner, self.ws_readonly)
        );
        f
    }

    pub(crate) fn attach_workspace(&mut self, mnt: OwnedFd) {
        let d = depth(&self.workspace);
        let pos = self
            .ops
            .iter()
            .position(|o| matches!(o, Op::Proc { .. }) || depth(o.dst()) > d)
            .unwrap_or(self.ops.len());
        self.ops.insert(
            pos,
            Op::Attach {
                mnt,
                dst: self.workspace.clone(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::SandboxSettings;

    fn req(ws: &Path, profile: Profile) -> WireRequest {
        WireRequest {
            spawn: crate::sandbox::SpawnRequest {
                argv: vec!["true".into()],
                env: vec![(
                    "PATH".into(),
                    format!("/usr/bin:/nonexistent/bin:relative:{}/bin", ws.display()),
                )],
                workspace: ws.to_path_buf(),
                cwd: ws.to_path_buf(),
                profile,
                settings: SandboxSettings::default(),
                cache_dir: None,
                fallback: None,
            },
            hidden: vec!["/run".into()],
            gate: false,
        }
    }

    fn host(home: &Path) -> HostFacts {
        HostFacts {
            root: false,
            host_uid: 1234,
            host_gid: 1234,
            home: home.to_path_buf(),
            cargo_home: None,
            landlock_abi_cap: None,
        }
    }

    #[test]
    fn path_keeps_only_visible_dirs_and_ops_go_parents_first() {
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let plan = Plan::new(&req(&ws_path, Profile::Write), &host(home.path())).unwrap();
        let path = plan
            .cmd
            .env
            .iter()
            .find_map(|e| e.to_str().ok()?.strip_prefix("PATH=").map(String::from))
            .unwrap();
        assert_eq!(path, format!("/usr/bin:{}/bin", ws_path.display()));
        assert!(plan
            .cmd
            .env
            .iter()
            .any(|e| e.to_str().unwrap() == format!("HOME={}", home.path().display())));
        // Every op's parent mount comes before it.
        for (i, op) in plan.ops.iter().enumerate() {
            for later in &plan.ops[i + 1..] {
                assert!(
                    !(op.dst().starts_with(later.dst()) && op.dst() != later.dst()),
                    "{} is mounted before its parent {}",
                    op.dst().display(),
                    later.dst().display()
                );
            }
        }
        assert!(plan.private_net && !plan.ws_readonly);
        assert_eq!(plan.protect.len(), crate::sandbox::DEFAULT_PROTECTED.len());
    }

    #[test]
    fn safe_read_is_read_only_and_network_shares_the_host_net() {
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let p = ws.path().canonicalize().unwrap();
        let sr = Plan::new(&req(&p, Profile::SafeRead), &host(home.path())).unwrap();
        assert!(sr.ws_readonly && sr.private_net && sr.protect.is_empty());
        assert!(sr.rules.read.contains(&p) && !sr.rules.write.contains(&p));
        let net = Plan::new(&req(&p, Profile::Network), &host(home.path())).unwrap();
        assert!(!net.private_net && net.rules.write.contains(&p));
    }

    #[test]
    fn hidden_and_bad_paths_are_refused() {
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let p = ws.path().canonicalize().unwrap();
        let mut r = req(&p, Profile::Write);
        r.hidden.push(p.join("state"));
        assert!(matches!(
            Plan::new(&r, &host(home.path())),
            Err(WireError::Refused(_))
        ));
        let mut r = req(&p, Profile::Write);
        r.spawn.settings.read_only_paths = vec!["/run/user".into()];
        assert!(matches!(
            Plan::new(&r, &host(home.path())),
            Err(WireError::Refused(_))
        ));
        let mut r = req(&p, Profile::Write);
        r.spawn.env.push(("A=B".into(), "c".into()));
        assert!(matches!(
            Plan::new(&r, &host(home.path())),
            Err(WireError::Refused(_))
        ));
    }

    #[test]
    fn credentials_in_any_bound_tree_are_masked() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path();
        let home = t.join("home");
        let w = |p: &str, c: &str| {
            let p = t.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, c).unwrap();
        };
        w("home/.cargo/credentials.toml", "c");
        w("home/.cargo/config.toml", "ok");
        w("home/.pyenv/.netrc", "c");
        w("home/.npmrc", "c"); // under no bound tree: the home tmpfs hides it
        w("cfg/.config/gh/hosts.yml", "c");
        w("sdk/.docker/config.json", "c");
        w("sdk/.pypirc", "c");
        w("sdk/deep/.npmrc", "c"); // another depth: not a candidate
        w("cargohome/credentials", "c");
        w("envcargo/credentials.toml", "c");
        w("real/secret", "c");
        std::os::unix::fs::symlink(t.join("real/secret"), t.join("sdk/.netrc")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", t.join("sdk/.git-credentials")).unwrap();
        let bound: Vec<PathBuf> = [
            "home/.cargo",
            "home/.pyenv",
            "cfg/.config",
            "sdk",
            "cargohome",
            "real",
            "envcargo",
        ]
        .iter()
        .map(|b| t.join(b))
        .collect();
        let got = credential_masks(&home, &bound, Some(&t.join("envcargo")));
        let mut names: Vec<String> = got
            .iter()
            .map(|(p, _)| p.strip_prefix(t).unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "cargohome/credentials",
                "cfg/.config/gh",
                "envcargo/credentials.toml",
                "home/.cargo/credentials.toml",
                "home/.pyenv/.netrc",
                "real/secret",
                "sdk/.docker/config.json",
                "sdk/.pypirc",
            ]
        );
        let gh = got.iter().find(|(p, _)| p.ends_with("gh")).unwrap();
        assert!(!gh.1, "a credential directory is masked as a directory");
    }

    #[test]
    fn cache_dir_is_install_only_and_outside_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let p = ws.path().canonicalize().unwrap();
        let c = cache.path().canonicalize().unwrap();
        let mut r = req(&p, Profile::Install);
        r.spawn.cache_dir = Some(c.clone());
        let plan = Plan::new(&r, &host(home.path())).unwrap();
        assert!(plan.rules.write.contains(&c));
        assert!(plan
            .cmd
            .env
            .iter()
            .any(|e| e.to_str().unwrap() == format!("PIP_CACHE_DIR={}/pip", c.display())));
        for (profile, dir) in [
            (Profile::Write, c.clone()),
            (Profile::Network, c.clone()),
            (Profile::Install, p.join("sub")),
            (Profile::Install, PathBuf::from("/usr")),
            (Profile::Install, c.join("missing")),
        ] {
            std::fs::create_dir_all(p.join("sub")).unwrap();
            let mut r = req(&p, profile);
            r.spawn.cache_dir = Some(dir.clone());
            assert!(
                matches!(
                    Plan::new(&r, &host(home.path())),
                    Err(WireError::Refused(_))
                ),
                "{profile:?} {} accepted",
                dir.display()
            );
        }
    }
}
