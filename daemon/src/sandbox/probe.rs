//! Capability probe and escape battery behind `warden doctor`.
//!
//! [`probe_kernel`] checks each mechanism on its own, in short-lived forked
//! children that make raw syscalls only (safe from a multithreaded caller):
//! user and other namespaces, seccomp, Landlock ABI and errata, idmapped
//! mounts, cgroup v2 delegation, overlayfs in a user namespace.
//! [`probe_spawn`] runs `true` through the real sandbox. [`run_attacks`] runs
//! a built-in escape battery inside the live sandbox: each attack executes
//! the calling binary's hidden probe mode ([`attack_probe`]) as the confined
//! command and reports whether it was blocked.

use serde::Serialize;
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{landlock_rules, mounts, Enforcement, Profile, SandboxSettings, SpawnRequest, Spawner};

/// One mechanism.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable name (`user_namespaces`, `landlock`, ...).
    pub name: String,
    pub ok: bool,
    /// Whether the configured policy needs it (the daemon refuses to start
    /// without it).
    pub required: bool,
    pub detail: String,
}

/// Everything `warden doctor` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
    /// Highest Landlock ABI of the kernel (0: none).
    pub landlock_abi: i64,
    /// The ABI the ruleset is pinned to.
    pub landlock_pinned_abi: i64,
    /// Bit mask of fixed Landlock errata.
    pub landlock_errata: u32,
    /// The probe runs as root (the daemon would use idmapped mounts).
    pub root: bool,
}

impl Report {
    /// Required checks that failed.
    pub fn missing(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| c.required && !c.ok).collect()
    }
}

fn check(name: &str, ok: bool, required: bool, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        ok,
        required,
        detail: detail.into(),
    }
}

/// Runs `f` in a forked child and returns its exit code (-1 when it died
/// otherwise). `f` must only make raw syscalls: the caller may have threads.
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only runs `f` (raw syscalls) and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return -1;
    }
    if pid == 0 {
        let c = f();
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(c) }
    }
    let mut st = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        -1
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(255)
}

fn errstr(code: i32) -> String {
    if code < 0 {
        "probe child died".into()
    } else {
        std::io::Error::from_raw_os_error(code).to_string()
    }
}

fn unshare_probe(flags: libc::c_int) -> i32 {
    // SAFETY: unshare in a fresh child.
    in_child(|| {
        if unsafe { libc::unshare(flags) } == 0 {
            0
        } else {
            errno()
        }
    })
}

/// Checks every kernel mechanism the sandbox uses. `settings` decides which
/// are required (full Landlock only when the policy asks for it).
pub fn probe_kernel(settings: &SandboxSettings) -> Report {
    let mut checks = Vec::new();
    // SAFETY: geteuid never fails.
    let root = unsafe { libc::geteuid() } == 0;

    let c = unshare_probe(libc::CLONE_NEWUSER);
    checks.push(check(
        "user_namespaces",
        c == 0,
        true,
        if c == 0 {
            "unshare(CLONE_NEWUSER) works".to_string()
        } else {
            format!("unshare(CLONE_NEWUSER): {}", errstr(c))
        },
    ));
    let all = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    let c = unshare_probe(all);
    checks.push(check(
        "namespaces",
        c == 0,
        true,
        if c == 0 {
            "user, mount, pid, network, ipc, uts, cgroup".to_string()
        } else {
            format!("unshare(all namespaces): {}", errstr(c))
        },
    ));

    // seccomp: install the real filters and see ptrace refused.
    let seccomp = match super::seccomp::compile() {
        Err(e) => check(
            "seccomp",
            false,
            true,
            format!("filters do not compile: {e}"),
        ),
        Ok(filters) => {
            let c = in_child(|| {
                // SAFETY: prctl in a fresh child.
                if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
                    return 100;
                }
                for f in &filters {
                    if seccompiler::apply_filter(f).is_err() {
                        return 101;
                    }
                }
                // SAFETY: a syscall the filter must refuse.
                let r = unsafe { libc::syscall(libc::SYS_ptrace, 16, 1, 0, 0) };
                if r == -1 && errno() == libc::EPERM {
                    0
                } else {
                    102
                }
            });
            check(
                "seccomp",
                c == 0,
                true,
                match c {
                    0 => format!("{} filters installed, ptrace refused", filters.len()),
                    100 => "PR_SET_NO_NEW_PRIVS failed".into(),
                    101 => "seccomp(2) filter install failed".into(),
                    _ => "filter installed but ptrace was not refused".into(),
                },
            )
        }
    };
    checks.push(seccomp);

    let abi = match landlock_rules::abi_cap_from_env() {
        Some(cap) => landlock_rules::kernel_abi().min(cap),
        None => landlock_rules::kernel_abi(),
    };
    let pinned = landlock_rules::LANDLOCK_ABI as i64;
    let errata = landlock_rules::kernel_errata();
    checks.push(check(
        "landlock",
        abi >= pinned,
        settings.require_full_landlock,
        if abi == 0 {
            "Landlock unavailable: commands run without it (enforcement none)".to_string()
        } else if abi < pinned {
            format!("kernel ABI {abi} < pinned ABI {pinned}: partial enforcement")
        } else {
            format!("kernel ABI {abi}, ruleset pinned to ABI {pinned}: full enforcement; errata fixed: {errata:#x}")
        },
    ));

    // Idmapped mounts: needed when the daemon runs as root.
    let idmap = probe_idmap();
    checks.push(check(
        "idmapped_mounts",
        idmap.is_ok(),
        root,
        match &idmap {
            Ok(()) => "open_tree + mount_setattr(MOUNT_ATTR_IDMAP) on the state/temp filesystem"
                .to_string(),
            Err(e) if !root => format!("not needed (daemon not root): {e}"),
            Err(e) => e.clone(),
        },
    ));

    // As a daemon started here would find it (alone in its cgroup).
    // SAFETY: getpid never fails.
    let cg = super::cgroup::detect(&[unsafe { libc::getpid() }]);
    checks.push(check(
        "cgroup_v2_delegation",
        cg.is_ok(),
        settings.wants_cgroup(),
        match cg {
            Ok(d) => format!(
                "{}: writable, memory and pids controllers available: cgroup limits are applied",
                d.base.display()
            ),
            Err(e) if settings.wants_cgroup() => {
                format!("{e}; the policy sets cgroup limits, so its commands are refused")
            }
            Err(e) => format!("{e} (not needed: the policy sets no cgroup limits)"),
        },
    ));

    let ov = probe_overlay();
    checks.push(check(
        "overlayfs_in_userns",
        ov.is_ok(),
        false,
        match ov {
            Ok(()) => "overlay mounts in a user namespace".to_string(),
            Err(e) => e,
        },
    ));

    Report {
        checks,
        landlock_abi: abi,
        landlock_pinned_abi: pinned,
        landlock_errata: errata,
        root,
    }
}

fn probe_idmap() -> Result<(), String> {
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root".into());
    }
    let dir = std::env::temp_dir();
    let userns = super::helper::make_userns("0 2000000000 1\n", "0 2000000000 1\n")
        .map_err(|e| format!("user namespace: {e}"))?;
    mounts::idmapped_clone(&dir, &userns, true)
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", dir.display()))
}

fn probe_overlay() -> Result<(), String> {
    let tmp = std::env::temp_dir().join(format!("warden-doctor-ovl-{}", std::process::id()));
    let dirs = ["lower", "upper", "work", "merged"].map(|d| tmp.join(d));
    for d in &dirs {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    // Everything the child needs is prepared here: it only makes syscalls.
    // SAFETY: getters never fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let uid_map = format!("0 {uid} 1\n");
    let gid_map = format!("0 {gid} 1\n");
    let opts = CString::new(format!(
        "lowerdir={},upperdir={},workdir={}",
        dirs[0].display(),
        dirs[1].display(),
        dirs[2].display()
    ))
    .unwrap_or_default();
    let merged = CString::new(dirs[3].as_os_str().as_encoded_bytes()).unwrap_or_default();
    let write = |path: &std::ffi::CStr, data: &[u8]| -> bool {
        // SAFETY: open/write/close with valid buffers.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return false;
            }
            let ok = libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize;
            libc::close(fd);
            ok
        }
    };
    let c = in_child(|| {
        // SAFETY: unshare and mount in a fresh child.
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return 1;
            }
        }
        if !write(c"/proc/self/setgroups", b"deny")
            || !write(c"/proc/self/uid_map", uid_map.as_bytes())
            || !write(c"/proc/self/gid_map", gid_map.as_bytes())
        {
            return 2;
        }
        // SAFETY: as above.
        unsafe {
            if libc::mount(
                c"overlay".as_ptr(),
                merged.as_ptr(),
                c"overlay".as_ptr(),
                0,
                opts.as_ptr().cast(),
            ) != 0
            {
                return 3;
            }
        }
        0
    });
    let _ = std::fs::remove_dir_all(&tmp);
    match c {
        0 => Ok(()),
        1 => Err("unshare(CLONE_NEWUSER | CLONE_NEWNS) failed".into()),
        2 => Err("writing the uid/gid map failed".into()),
        3 => Err("mount -t overlay in a user namespace refused".into()),
        _ => Err("probe child died".into()),
    }
}

/// Runs `true` through the real sandbox in a scratch workspace. The check
/// is required: without it nothing can run.
pub async fn probe_spawn(spawner: &Spawner, settings: &SandboxSettings) -> Check {
    match spawner.self_test(settings).await {
        Ok(landlock) => check(
            "sandbox_spawn",
            true,
            true,
            format!("`true` ran confined (Landlock {})", landlock.as_str()),
        ),
        Err(e) => check("sandbox_spawn", false, true, e.to_string()),
    }
}

fn scratch_dir(prefix: &str) -> Result<PathBuf, String> {
    let d = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        crate::new_id()
    ));
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    d.canonicalize().map_err(|e| e.to_string())
}

/// Runs one request; returns (exit code, Landlock status, stdout+stderr).
async fn run_confined(
    spawner: &Spawner,
    req: SpawnRequest,
    timeout: Duration,
) -> Result<(Option<i32>, Enforcement, String), String> {
    let (or, ow) = nix::unistd::pipe().map_err(|e| e.to_string())?;
    let mut child = spawner
        .spawn(req, ow.try_clone().map_err(|e| e.to_string())?, ow)
        .await
        .map_err(|e| e.to_string())?;
    let reader = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut s = Vec::new();
        let _ = std::fs::File::from(or).take(1 << 16).read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let kh = child.kill_handle();
    let exit = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(r) => r.map_err(|e| e.to_string())?,
        Err(_) => {
            kh.kill();
            child.wait().await.map_err(|e| e.to_string())?
        }
    };
    let out = reader.await.unwrap_or_default();
    Ok((exit.code, child.landlock, out))
}

/// One attack of the battery and its outcome.
#[derive(Debug, Clone, Serialize)]
pub struct AttackResult {
    pub name: String,
    /// What it stands for.
    pub about: String,
    pub blocked: bool,
    pub detail: String,
}

/// The battery: (probe name, profile, what it stands for).
pub const ATTACKS: &[(&str, &str)] = &[
    (
        "write-outside",
        "write a host file outside the workspace (bound read-only)",
    ),
    ("read-home", "read a file in the daemon user's home"),
    (
        "proc-root",
        "reach the host through /proc/1/root and /proc/self/root",
    ),
    ("host-pid", "signal a host process (the doctor itself)"),
    ("ptrace", "ptrace the namespace's init"),
    (
        "unshare-user",
        "unshare(CLONE_NEWUSER): regain capabilities",
    ),
    ("mount", "mount(2) a tmpfs over a read-only path"),
    ("io-uring", "io_uring_setup: syscalls seccomp cannot see"),
    ("x32", "an x32-ABI syscall number (seccomp bypass)"),
    ("tiocsti", "TIOCSTI terminal injection (upper bits set)"),
    ("netlink", "open a netlink socket"),
    (
        "loopback",
        "connect to a host loopback TCP listener from the write tier",
    ),
    ("abstract-socket", "connect to a host abstract Unix socket"),
    ("fd-leak", "use an fd inherited from the daemon"),
    ("git-hook", "plant .git/hooks/pre-commit"),
    (
        "safe-read-write",
        "write the workspace in the safe-read tier",
    ),
    ("shadow", "read /etc/shadow"),
];

/// Runs the battery inside the live sandbox. `exe` is a binary whose
/// `doctor --probe NAME [--arg ARG]` mode calls [`attack_probe`]; it is bound
/// read-only into each sandbox at its own path.
pub async fn run_attacks(spawner: &Spawner, exe: &Path) -> Vec<AttackResult> {
    let mut out = Vec::new();
    let host = match scratch_dir("warden-doctor-host") {
        Ok(d) => d,
        Err(e) => {
            return vec![AttackResult {
                name: "setup".into(),
                about: "prepare host markers".into(),
                blocked: false,
                detail: e,
            }]
        }
    };
    let marker = host.join("marker");
    let _ = std::fs::write(&marker, "host");
    let home_secret = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
        .join(format!(".warden-doctor-secret-{}", std::process::id()));
    let _ = std::fs::write(&home_secret, "secret");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").ok();
    let port = listener
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port())
        .unwrap_or(1);
    let abs_name = format!("warden-doctor-{}", std::process::id());
    let _abs = {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abs_name.as_bytes())
            .and_then(|a| std::os::unix::net::UnixListener::bind_addr(&a))
            .ok()
    };
    // An fd the command must not inherit (deliberately without CLOEXEC).
    let leak = std::fs::OpenOptions::new().append(true).open(&marker).ok();
    if let Some(f) = &leak {
        // SAFETY: clearing FD_CLOEXEC on our own fd.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFD, 0) };
    }
    let leak_fd = leak.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
    let me = std::process::id();

    for (name, about) in ATTACKS {
        let ws = match scratch_dir("warden-doctor-ws") {
            Ok(d) => d,
            Err(e) => {
                out.push(AttackResult {
                    name: name.to_string(),
                    about: about.to_string(),
                    blocked: false,
                    detail: e,
                });
                continue;
            }
        };
        let mut profile = Profile::Write;
        let arg = match *name {
            "write-outside" | "proc-root" => marker.display().to_string(),
            "read-home" => home_secret.display().to_string(),
            "host-pid" => me.to_string(),
            "loopback" => port.to_string(),
            "abstract-socket" => abs_name.clone(),
            "fd-leak" => leak_fd.to_string(),
            "git-hook" => {
                let _ = std::fs::create_dir_all(ws.join(".git/hooks"));
                String::new()
            }
            "safe-read-write" => {
                profile = Profile::SafeRead;
                String::new()
            }
            _ => String::new(),
        };
        let mut settings = SandboxSettings::default();
        settings.read_only_paths = vec![exe.to_path_buf(), host.clone()];
        let req = SpawnRequest {
            argv: vec![
                exe.display().to_string(),
                "doctor".into(),
                "--probe".into(),
                name.to_string(),
                "--arg".into(),
                arg,
            ],
            env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
            workspace: ws.clone(),
            cwd: ws.clone(),
            profile,
            settings,
            cache_dir: None,
            fallback: None,
        };
        let r = run_confined(spawner, req, Duration::from_secs(30)).await;
        let marker_ok = std::fs::read_to_string(&marker).ok().as_deref() == Some("host");
        let hook_ok = !ws.join(".git/hooks/pre-commit").exists();
        let (blocked, detail) = match r {
            Ok((Some(0), _, o)) if marker_ok && hook_ok => (true, o.trim().to_string()),
            Ok((_, _, o)) if !marker_ok || !hook_ok => {
                (false, format!("host marker changed; {}", o.trim()))
            }
            Ok((code, _, o)) => (false, format!("exit {code:?}: {}", o.trim())),
            Err(e) => (false, format!("could not run: {e}")),
        };
        out.push(AttackResult {
            name: name.to_string(),
            about: about.to_string(),
            blocked,
            detail,
        });
        let _ = std::fs::remove_dir_all(&ws);
    }
    drop(leak);
    let _ = std::fs::remove_file(&home_secret);
    let _ = std::fs::remove_dir_all(&host);
    out
}

/// The hidden probe mode, run as the confined command: attempts attack
/// `name` and prints what happened. Exit code: 0 blocked, 1 escaped,
/// 2 unknown probe.
pub fn attack_probe(name: &str, arg: &str) -> i32 {
    let blocked = |what: String| {
        println!("blocked: {what}");
        0
    };
    let escaped = |what: String| {
        println!("ESCAPED: {what}");
        1
    };
    let err = || std::io::Error::last_os_error();
    let sys = |r: libc::c_long, what: &str| {
        if r == -1 {
            blocked(format!("{what}: {}", err()))
        } else {
            escaped(format!("{what} returned {r}"))
        }
    };
    match name {
        "write-outside" => match std::fs::OpenOptions::new().append(true).open(arg) {
            Ok(_) => escaped(format!("opened {arg} for writing")),
            Err(e) => blocked(format!("{arg}: {e}")),
        },
        "read-home" => match std::fs::read(arg) {
            Ok(_) => escaped(format!("read {arg}")),
            Err(e) => blocked(format!("{arg}: {e}")),
        },
        "proc-root" => {
            for p in [format!("/proc/1/root{arg}"), "/proc/1/root/".to_string()] {
                if std::fs::read_dir(&p).is_ok() || std::fs::read(&p).is_ok() {
                    return escaped(format!("read {p}"));
                }
            }
            blocked("/proc/1/root unreadable".into())
        }
        "host-pid" => {
            let pid: i32 = arg.parse().unwrap_or(0);
            // SAFETY: kill(2) with signal 0 only probes.
            sys(
                unsafe { libc::kill(pid, 0) } as libc::c_long,
                "kill(host pid, 0)",
            )
        }
        // SAFETY (all raw syscalls below): arguments are plain integers or
        // pointers to local buffers; each call is expected to be refused.
        "ptrace" => sys(
            unsafe { libc::syscall(libc::SYS_ptrace, 16, 1, 0, 0) },
            "ptrace(ATTACH, 1)",
        ),
        "unshare-user" => sys(
            unsafe { libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER) },
            "unshare(CLONE_NEWUSER)",
        ),
        "mount" => sys(
            unsafe {
                libc::mount(
                    c"none".as_ptr(),
                    c"/usr".as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                ) as libc::c_long
            },
            "mount tmpfs on /usr",
        ),
        "io-uring" => {
            let mut params = [0u8; 120];
            sys(
                unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) },
                "io_uring_setup",
            )
        }
        "x32" => sys(
            unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) },
            "x32 getpid",
        ),
        "tiocsti" => {
            let c = b'x';
            sys(
                unsafe { libc::syscall(libc::SYS_ioctl, 0, 0x1_0000_5412u64, &c as *const u8) },
                "ioctl(TIOCSTI | 1<<32)",
            )
        }
        "netlink" => sys(
            unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 0) as libc::c_long },
            "socket(AF_NETLINK)",
        ),
        "loopback" => match std::net::TcpStream::connect_timeout(
            &format!("127.0.0.1:{arg}")
                .parse()
                .unwrap_or_else(|_| "127.0.0.1:1".parse().unwrap()),
            Duration::from_secs(3),
        ) {
            Ok(_) => escaped(format!("connected to host 127.0.0.1:{arg}")),
            Err(e) => blocked(format!("127.0.0.1:{arg}: {e}")),
        },
        "abstract-socket" => {
            use std::os::linux::net::SocketAddrExt;
            let r = std::os::unix::net::SocketAddr::from_abstract_name(arg.as_bytes())
                .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a));
            match r {
                Ok(_) => escaped(format!("connected to @{arg}")),
                Err(e) => blocked(format!("@{arg}: {e}")),
            }
        }
        "fd-leak" => {
            let mut open = Vec::new();
            for fd in 3..1024 {
                // SAFETY: F_GETFD only queries.
                if unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
                    open.push(fd);
                }
            }
            if open.is_empty() {
                blocked(format!("no fd beyond 0-2 (daemon's fd was {arg})"))
            } else {
                escaped(format!("fds {open:?} inherited"))
            }
        }
        "git-hook" => match std::fs::write(".git/hooks/pre-commit", "#!/bin/sh\necho pwned\n") {
            Ok(()) => escaped("wrote .git/hooks/pre-commit".into()),
            Err(e) => blocked(format!(".git/hooks/pre-commit: {e}")),
        },
        "safe-read-write" => match std::fs::write("planted", "x") {
            Ok(()) => escaped("wrote the safe-read workspace".into()),
            Err(e) => blocked(format!("workspace: {e}")),
        },
        "shadow" => match std::fs::read("/etc/shadow") {
            Ok(_) => escaped("read /etc/shadow".into()),
            Err(e) => blocked(format!("/etc/shadow: {e}")),
        },
        _ => {
            eprintln!("unknown probe {name:?}");
            2
        }
    }
}
