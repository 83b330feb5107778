//! Confinement of every command: namespaces, mounts, rlimits, Landlock,
//! seccomp, applied by a single-threaded spawn helper (DESIGN.md, "Commands
//! are spawned by a single-threaded helper process").
//!
//! API contract used by the rest of the daemon:
//! - [`Spawner::start`] is called once in `main`, before the tokio runtime or
//!   any other thread exists.
//! - [`Spawner::spawn`] runs one command under a [`Profile`] and returns a
//!   [`Child`] whose [`Child::wait`] yields an [`ExitInfo`]; [`Child::kill`]
//!   ends every process the command started.
//!
//! This module decides nothing about policy: the caller picks the profile.
//!
//! # The spawn helper
//!
//! `unshare(CLONE_NEWUSER)` fails in a multithreaded process and allocating
//! after `fork` in one can deadlock, so no command is ever forked from the
//! daemon's tokio threads. [`Spawner::start`] creates a Unix socketpair and
//! starts the helper on the other end:
//! - from a single-threaded process (the daemon's `main`, before the runtime;
//!   a `harness = false` test) it simply `fork`s;
//! - from a multithreaded process (a libtest harness, a CLI that already runs
//!   tokio) it re-executes a helper binary: `$WARDEN_SPAWN_HELPER_EXE`, else
//!   `wardend` next to the current executable (or one directory up, for test
//!   binaries in `target/*/deps`). That binary must call
//!   [`Spawner::start`] or [`helper_entry`] first thing in `main`; it then
//!   sees `WARDEN_SPAWN_HELPER_FD` and becomes the helper.
//!
//! Requests (JSON) and the command's stdout/stderr fds (`SCM_RIGHTS`) travel
//! over the socket. The helper dies with the daemon (`PR_SET_PDEATHSIG` and
//! EOF on the socket) and kills every command it started when it goes.
//!
//! # Order of set-up for one command
//!
//! 1. The helper opens every bind source `O_PATH` with its own credentials,
//!    and (when root) clones the workspace mount with an idmap.
//! 2. `clone(CLONE_NEWUSER | NEWNS | NEWPID | NEWIPC | NEWUTS | NEWCGROUP
//!    [| NEWNET])`: the child is pid 1 (init) of a new pid namespace.
//! 3. The helper (the parent) writes `setgroups=deny`, `uid_map` and
//!    `gid_map`: sandbox id 1000 -> the daemon's uid (ordinary user) or an
//!    unprivileged host uid ([`helper::DEFAULT_ROOT_HOST_UID`], root).
//! 4. Init: hostname, `lo` up in the private network namespace, mount tree on
//!    a fresh tmpfs root, `pivot_root`, protected paths, read-only root.
//! 5. Init forks the command (pid 2): `setsid` (no controlling terminal),
//!    stdio, rlimits, capabilities dropped, `no_new_privs`, Landlock, seccomp
//!    last, `execve`. Init reaps and, when the command exits, reports its
//!    status and exits, which kills everything left in the pid namespace
//!    (daemonized and `setsid` grandchildren included). [`Child::kill`]
//!    SIGKILLs init, with the same effect.
//!
//! # Filesystem view
//!
//! Read-only: `/usr`, `/bin`, `/sbin`, `/lib*`, `/etc` (with generated
//! `passwd`/`group` naming the sandbox user), `/opt`, the toolchains under the
//! host's home ([`plan::TOOLCHAINS`]) and the policy's `read_only_paths`;
//! credential files inside any of them ([`plan::CREDENTIALS`]) are masked.
//! Private tmpfs: `/tmp`, `/var/tmp`, `/dev/shm`, `$HOME` (same path as the
//! host's). A minimal `/dev` (null, zero, full, random, urandom; no tty), a
//! fresh `/proc`, no `/sys`, nothing of `/home`, `/root`, `/run`,
//! `$XDG_RUNTIME_DIR` or the daemon's state dir. The workspace is read-only in
//! `safe-read`, read-write otherwise, with [`settings::DEFAULT_PROTECTED`]
//! and the policy's `protected_paths` bound read-only.
//!
//! # seccomp deny list
//!
//! Installed last (after Landlock). Written as four filters (an arch/x32
//! guard, then one seccompiler program per answer: `EPERM`, `ENOSYS`,
//! `EAFNOSUPPORT`) and installed as one program that gives the same answer
//! for every syscall (`seccomp::merge`; a unit test compares both with a BPF
//! interpreter): a short dispatcher allows, after a binary search, every
//! native syscall number no rule names, so the kernel's per-syscall action
//! cache is cheap to build at each spawn.
//!
//! | syscall(s) | answer | why |
//! |---|---|---|
//! | any syscall of a foreign architecture (i386 `int 0x80`) | kill | the filters below are written for native numbers; a second ABI would bypass them |
//! | x32 numbers (`nr & 0x40000000`) | `EPERM` | same bypass through the x32 ABI; seccompiler has no x32 guard |
//! | `ptrace`, `process_vm_readv`, `process_vm_writev` | `EPERM` | reading/writing other processes' memory (the daemon's, the init's) |
//! | `bpf`, `perf_event_open` | `EPERM` | large kernel attack surface, kernel memory/side-channel leaks |
//! | `kexec_load`, `kexec_file_load`, `init_module`, `finit_module`, `delete_module` | `EPERM` | replacing or extending the kernel |
//! | `keyctl`, `add_key`, `request_key` | `EPERM` | kernel keyrings are not namespaced: other users' keys, a history of CVEs |
//! | `mount`, `umount2`, `pivot_root`, `open_tree`, `open_tree_attr`, `move_mount`, `fsopen`, `fsconfig`, `fsmount`, `fspick`, `mount_setattr` | `EPERM` | undoing the mount tree (unmounting a read-only bind, remounting rw) |
//! | `unshare`, `clone` with a namespace flag; `setns` | `EPERM` | a new user namespace regains every capability inside it: the root of most container escapes |
//! | `clone3` | `ENOSYS` | its flags live in memory where seccomp cannot see them; `ENOSYS` makes libc fall back to `clone`, whose flags are checked (`EPERM` would break `pthread_create`) |
//! | `io_uring_setup`, `io_uring_enter`, `io_uring_register` | `ENOSYS` | io_uring performs file and network operations that seccomp never sees; many kernel CVEs; runtimes fall back on `ENOSYS` |
//! | `open_by_handle_at` | `EPERM` | opens files by handle, bypassing path checks (the "shocker" container escape) |
//! | `userfaultfd` | `EPERM` | stalls kernel threads at will: the standard exploitation primitive for kernel races |
//! | `reboot`, `swapon`, `swapoff`, `acct`, `quotactl`, `quotactl_fd` | `EPERM` | host-wide administration |
//! | `ioctl(TIOCSTI)`, `ioctl(TIOCLINUX)` (command compared as 32 bits, as the kernel does) | `EPERM` | typing into a terminal's input queue: commands run in the user's shell after we exit |
//! | `socket` with a family other than `AF_UNIX`, `AF_INET`, `AF_INET6` | `EAFNOSUPPORT` | netlink, packet, vsock, bluetooth, ... are kernel surface no build needs |
//! | `socket` of type `SOCK_RAW` / `SOCK_PACKET`, protocol MPTCP or SCTP | `EAFNOSUPPORT` | raw packets; MPTCP and SCTP are not covered by Landlock's TCP rules and have had namespace-crossing bugs |
//!
//! # Landlock
//!
//! See [`landlock_rules`]: ABI pinned to 6, all filesystem rights handled,
//! abstract Unix sockets and signals scoped; enforcement (full, partial, none)
//! is recorded on every [`Child`]. A policy with `require_full_landlock`
//! refuses to run otherwise.

mod cgroup;
mod child;
mod helper;
mod landlock_rules;
mod mounts;
pub mod plan;
pub mod probe;
mod protocol;
mod seccomp;
pub mod settings;

pub use helper::DEFAULT_ROOT_HOST_UID;
pub use landlock_rules::{kernel_abi as landlock_kernel_abi, ABI_CAP_ENV, LANDLOCK_ABI};
pub use seccomp::denied_syscalls;
pub use settings::{Limits, SandboxSettings, DEFAULT_PROTECTED};

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::policy::Tier;
use protocol::{FromHelper, ToHelper, WireError, WireRequest};

/// Environment variable naming the fd of the helper socket in a re-executed
/// helper.
pub const HELPER_FD_ENV: &str = "WARDEN_SPAWN_HELPER_FD";
const HELPER_PPID_ENV: &str = "WARDEN_SPAWN_HELPER_PPID";
/// Environment variable naming the binary to re-execute as helper.
pub const HELPER_EXE_ENV: &str = "WARDEN_SPAWN_HELPER_EXE";

/// Errors of setting up or spawning a sandboxed command.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The spawn helper could not be started or has died.
    #[error("spawn helper: {0}")]
    Helper(String),
    /// A kernel mechanism the profile needs is missing or failed.
    #[error("sandbox set-up failed at {stage}: {message}")]
    Setup { stage: String, message: String },
    /// The request or the policy cannot be honoured safely (bad paths,
    /// full Landlock required but unavailable, non-idmappable workspace).
    #[error("refused: {0}")]
    Refused(String),
    #[error("spawn failed: {0}")]
    Io(#[from] std::io::Error),
}

impl From<WireError> for SandboxError {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Setup { stage, message } => SandboxError::Setup { stage, message },
            WireError::Refused(m) => SandboxError::Refused(m),
        }
    }
}

/// The sandbox profile a command runs under (DESIGN.md, "Tiers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Workspace read-only, private network namespace (loopback only).
    SafeRead,
    /// Workspace read-write, private network namespace (loopback only).
    Write,
    /// Write plus the host's network.
    Network,
    /// Network plus a per-session layer over package caches.
    Install,
}

impl Profile {
    /// The profile of a tier; `None` for destructive (never runs).
    pub fn for_tier(tier: Tier) -> Option<Profile> {
        match tier {
            Tier::SafeRead => Some(Profile::SafeRead),
            Tier::Write => Some(Profile::Write),
            Tier::Network => Some(Profile::Network),
            Tier::Install => Some(Profile::Install),
            Tier::Destructive => None,
        }
    }

    /// `safe-read`, `write`, `network`, `install`.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::SafeRead => "safe-read",
            Profile::Write => "write",
            Profile::Network => "network",
            Profile::Install => "install",
        }
    }
}

/// How completely Landlock was enforced for one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    Full,
    Partial,
    None,
}

impl Enforcement {
    /// `full`, `partial`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Full => "full",
            Enforcement::Partial => "partial",
            Enforcement::None => "none",
        }
    }
}

/// One command to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpawnRequest {
    /// Program and arguments; `argv[0]` is resolved through `PATH` in `env`.
    pub argv: Vec<String>,
    /// The complete environment (already scrubbed by the caller); the
    /// sandbox removes `PATH` entries it cannot see and sets `HOME`,
    /// `CARGO_HOME` and `RUSTUP_HOME` when absent.
    pub env: Vec<(String, String)>,
    /// Absolute, canonical workspace root.
    pub workspace: PathBuf,
    /// Absolute working directory (inside the workspace).
    pub cwd: PathBuf,
    pub profile: Profile,
    pub settings: SandboxSettings,
    /// A host directory bound read-write at its own path for package caches
    /// (install profile only: the per-session cache layer). `PIP_CACHE_DIR`,
    /// `npm_config_cache`, `YARN_CACHE_FOLDER`, `GOPATH`, `GOMODCACHE`,
    /// `GOCACHE` and `XDG_CACHE_HOME` point into it ([`plan::CACHE_ENV`]).
    /// Refused for other profiles and for a path that is not a directory or
    /// overlaps the workspace, a hidden path or a system tree.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Executed instead when no candidate for `argv[0]` can be executed
    /// (every execve(2) failed), in the same sandbox: `bash -c -- CMD`
    /// behind a command the daemon runs without a shell, so bash reports
    /// (or runs, for a script without `#!`) what it cannot start. `None`:
    /// the failure is the spawn's error (stage `execve`).
    #[serde(default)]
    pub fallback: Option<Fallback>,
}

/// The program a sandbox executes when the request's own cannot be
/// ([`SpawnRequest::fallback`]): argv (`argv[0]` resolved through `PATH` in
/// `env`, as for the request) and its complete environment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Fallback {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit status when it exited.
    pub code: Option<i32>,
    /// Signal number when it was killed by one.
    pub signal: Option<i32>,
    /// Processes the OOM killer took for the cgroup memory limit
    /// (`memory.events` `oom_kill`; 0 without cgroup limits).
    pub cgroup_oom_kills: u64,
    /// Forks refused by the cgroup pids limit (`pids.events` `max`; 0
    /// without cgroup limits).
    pub cgroup_pids_max_hits: u64,
}

type StartedTx = tokio::sync::oneshot::Sender<Result<(u32, Enforcement), SandboxError>>;
type ExitedTx = tokio::sync::oneshot::Sender<ExitInfo>;

#[derive(Default)]
struct Table {
    /// Why the helper is gone, once it is.
    dead: Option<String>,
    started: HashMap<u64, StartedTx>,
    exited: HashMap<u64, ExitedTx>,
}

struct Inner {
    sock: UnixStream,
    write: Mutex<()>,
    table: Mutex<Table>,
    next_id: AtomicU64,
    helper_pid: i32,
    hidden: Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner")
            .field("helper_pid", &self.helper_pid)
            .finish()
    }
}

impl Drop for Inner {
    /// The last handle is gone: the helper sees EOF, kills every command it
    /// still runs and exits; the reader thread ends.
    fn drop(&mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}

impl Inner {
    fn send(
        &self,
        msg: &ToHelper,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<(), SandboxError> {
        let _g = self.write.lock().unwrap_or_else(|p| p.into_inner());
        protocol::send(&self.sock, msg, fds)
            .map_err(|e| SandboxError::Helper(format!("sending to the spawn helper: {e}")))
    }

    fn kill(&self, id: u64) {
        let _ = self.send(&ToHelper::Kill { id }, &[]);
    }
}

/// Handle on the spawn helper. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Spawner {
    inner: Arc<Inner>,
}

/// Becomes the spawn helper when this process was started as one
/// (`WARDEN_SPAWN_HELPER_FD` set), and never returns then; otherwise returns
/// at once. Binaries that may be re-executed as helper call this (or
/// [`Spawner::start`]) first thing in `main`.
pub fn helper_entry() {
    let Ok(v) = std::env::var(HELPER_FD_ENV) else {
        return;
    };
    let Ok(fd) = v.parse::<i32>() else {
        eprintln!("warden: {HELPER_FD_ENV}={v:?} is not an fd number");
        std::process::exit(125);
    };
    let ppid = std::env::var(HELPER_PPID_ENV)
        .ok()
        .and_then(|p| p.parse().ok())
        // SAFETY: getppid never fails.
        .unwrap_or_else(|| unsafe { libc::getppid() });
    // SAFETY: the parent passed us this fd number for exactly this purpose.
    let sock = unsafe { UnixStream::from_raw_fd(fd) };
    helper::run(sock, ppid)
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(usize::MAX)
}

/// The binary re-executed as helper from a multithreaded process.
fn find_helper_exe() -> Result<PathBuf, SandboxError> {
    if let Some(p) = std::env::var_os(HELPER_EXE_ENV) {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe()?;
    let mut dir = me.parent();
    for _ in 0..2 {
        if let Some(d) = dir {
            let c = d.join("wardend");
            if c.is_file() {
                return Ok(c);
            }
            dir = d.parent();
        }
    }
    Err(SandboxError::Helper(format!(
        "this process has several threads and no helper binary was found \
         (set {HELPER_EXE_ENV} or put wardend next to {})",
        me.display()
    )))
}

impl Spawner {
    /// Starts the spawn helper (see the module docs).
    ///
    /// Call it first thing in `main`: in a process started as helper it
    /// never returns. From a single-threaded process it forks; from a
    /// multithreaded one it re-executes [`Spawner::start_exec`] with the
    /// helper binary found as described in the module docs.
    ///
    /// Errors: [`SandboxError::Helper`] when the helper cannot be started.
    pub fn start() -> Result<Spawner, SandboxError> {
        helper_entry();
        if thread_count() == 1 {
            let (ours, theirs) = UnixStream::pair()?;
            // SAFETY: getpid never fails.
            let me = unsafe { libc::getpid() };
            // SAFETY: single-threaded process; the child runs helper::run,
            // which never returns.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(SandboxError::Helper(format!(
                    "fork: {}",
                    std::io::Error::last_os_error()
                )));
            }
            if pid == 0 {
                drop(ours);
                helper::run(theirs, me);
            }
            drop(theirs);
            return Ok(Spawner::from_parts(ours, pid));
        }
        Spawner::start_exec(&find_helper_exe()?)
    }

    /// Starts the helper by executing `exe` (which must call
    /// [`helper_entry`] or [`Spawner::start`] first in `main`). Safe from a
    /// multithreaded process.
    pub fn start_exec(exe: &Path) -> Result<Spawner, SandboxError> {
        use std::os::unix::process::CommandExt;
        let (ours, theirs) = UnixStream::pair()?;
        let fd = theirs.as_raw_fd();
        let mut cmd = std::process::Command::new(exe);
        cmd.env(HELPER_FD_ENV, "3")
            // SAFETY: getpid never fails.
            .env(HELPER_PPID_ENV, unsafe { libc::getpid() }.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork
        // and exec.
        unsafe {
            cmd.pre_exec(move || {
                if fd == 3 {
                    if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            SandboxError::Helper(format!("starting {} as spawn helper: {e}", exe.display()))
        })?;
        drop(theirs);
        Ok(Spawner::from_parts(ours, child.id() as i32))
    }

    fn from_parts(sock: UnixStream, helper_pid: i32) -> Spawner {
        let rx = sock.try_clone().expect("dup of the helper socket");
        let mut hidden = Vec::new();
        for k in ["WARDEN_STATE_DIR", "XDG_RUNTIME_DIR"] {
            if let Some(v) = std::env::var_os(k) {
                hidden.push(PathBuf::from(v));
            }
        }
        if let Some(s) = std::env::var_os("XDG_STATE_HOME") {
            hidden.push(PathBuf::from(s).join("warden"));
        }
        if let Some(h) = std::env::var_os("HOME") {
            hidden.push(PathBuf::from(h).join(".local/state/warden"));
        }
        hidden.push("/var/lib/warden".into());
        hidden.push("/run".into());
        let inner = Arc::new(Inner {
            sock,
            write: Mutex::new(()),
            table: Mutex::new(Table::default()),
            next_id: AtomicU64::new(1),
            helper_pid,
            hidden: Mutex::new(hidden),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("warden-spawn-rx".into())
            .spawn(move || reader(rx, weak, helper_pid))
            .expect("spawn reader thread");
        Spawner { inner }
    }

    /// Hands the helper `lock`, an open file description holding a lock
    /// (flock(2)) that must stay held while any sandbox of this helper
    /// lives: the helper keeps it, and every sandbox's init it clones from
    /// now on inherits it (commands never do: it is close-on-exec and they
    /// execve). A daemon restarted after a crash takes the same lock and so
    /// waits until the old sandboxes are gone.
    ///
    /// Errors: [`SandboxError::Helper`] when the helper is gone.
    pub fn hold(&self, lock: OwnedFd) -> Result<(), SandboxError> {
        self.inner.send(&ToHelper::Hold, &[lock.as_fd()])
    }

    /// Pid of the helper process.
    pub fn helper_pid(&self) -> u32 {
        self.inner.helper_pid as u32
    }

    /// Adds a host path no command may ever see or bind (the daemon's state
    /// dir; `/run`, `$XDG_RUNTIME_DIR` and the default state dirs are hidden
    /// already). A workspace or read-only path overlapping it is refused.
    pub fn hide(&self, path: impl Into<PathBuf>) {
        let mut h = self.inner.hidden.lock().unwrap_or_else(|p| p.into_inner());
        h.push(path.into());
    }

    /// The hidden path that `p` (absolute, canonical) contains or lies
    /// inside, if any: a workspace there would be refused by every spawn.
    pub fn hidden_overlap(&self, p: &Path) -> Option<PathBuf> {
        let h = self.inner.hidden.lock().unwrap_or_else(|p| p.into_inner());
        h.iter()
            .find(|h| {
                let h = std::fs::canonicalize(h).unwrap_or_else(|_| h.to_path_buf());
                p.starts_with(&h) || h.starts_with(p)
            })
            .cloned()
    }

    /// Spawns `req` with stdin on `/dev/null` and stdout/stderr on the given
    /// fds (the write ends of pipes the caller reads), and returns once the
    /// sandbox is set up and `execve` is under way.
    ///
    /// Errors: [`SandboxError::Refused`] for bad input (empty command, NUL
    /// bytes, a workspace or cwd that is not an absolute directory inside the
    /// workspace, settings out of range) and for policies this kernel cannot
    /// honour; [`SandboxError::Setup`] naming the stage that failed
    /// (`namespaces`, `userns`, `mount`, `landlock`, `seccomp`, `execve`,
    /// ...); [`SandboxError::Helper`] when the helper is gone.
    pub async fn spawn(
        &self,
        req: SpawnRequest,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> Result<Child, SandboxError> {
        self.spawn_io(req, None, stdout, stderr, false).await
    }

    /// Like [`Spawner::spawn`], but returns once the command is fully
    /// confined (namespaces, mount tree, rlimits, Landlock, seccomp) and
    /// waits at its gate, before `execve`: nothing of the command itself
    /// has run. [`Child::open_gate`] lets it execute; dropping or killing
    /// the child instead ends it unexecuted. The caller overlaps the set-up
    /// with work that must finish before the command runs (its
    /// pre-checkpoint, the durable `exec_start` record).
    ///
    /// A failure to execute the program after the gate (no fallback, or
    /// the fallback failed too) is written to the command's stderr as
    /// `warden: PROGRAM: ...` and ends it with status 127 (not found) or
    /// 126, as a shell reports it.
    ///
    /// Errors: as [`Spawner::spawn`], except stage `execve`.
    pub async fn spawn_gated(
        &self,
        req: SpawnRequest,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> Result<Child, SandboxError> {
        self.spawn_io(req, None, stdout, stderr, true).await
    }

    /// Like [`Spawner::spawn`], but the command's stdin is `stdin` (the read
    /// end of a pipe or a socket the caller writes) instead of `/dev/null`:
    /// for long-lived servers spoken to over stdio (MCP stdio transport).
    ///
    /// Errors: as [`Spawner::spawn`].
    pub async fn spawn_with_stdin(
        &self,
        req: SpawnRequest,
        stdin: OwnedFd,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> Result<Child, SandboxError> {
        self.spawn_io(req, Some(stdin), stdout, stderr, false).await
    }

    async fn spawn_io(
        &self,
        req: SpawnRequest,
        stdin: Option<OwnedFd>,
        stdout: OwnedFd,
        stderr: OwnedFd,
        gated: bool,
    ) -> Result<Child, SandboxError> {
        req.settings.validate()?;
        let (gate_rd, gate_wr) = if gated {
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| SandboxError::Helper(format!("gate pipe: {e}")))?;
            (Some(r), Some(w))
        } else {
            (None, None)
        };
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (stx, srx) = tokio::sync::oneshot::channel();
        let (etx, erx) = tokio::sync::oneshot::channel();
        {
            let mut t = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(why) = &t.dead {
                return Err(SandboxError::Helper(why.clone()));
            }
            t.started.insert(id, stx);
            t.exited.insert(id, etx);
        }
        let hidden = self
            .inner
            .hidden
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let wire = WireRequest {
            spawn: req,
            hidden,
            gate: gated,
        };
        // If this future is dropped before the helper answers, the command
        // must not run unattended.
        let mut guard = CancelGuard {
            inner: &self.inner,
            id,
            armed: true,
        };
        let mut fds = vec![stdout.as_fd(), stderr.as_fd()];
        if let Some(i) = &stdin {
            fds.push(i.as_fd());
        }
        if let Some(g) = &gate_rd {
            fds.push(g.as_fd());
        }
        let sent = self.inner.send(
            &ToHelper::Spawn {
                id,
                req: Box::new(wire),
            },
            &fds,
        );
        drop(fds);
        drop(gate_rd);
        drop(stdin);
        drop(stdout);
        drop(stderr);
        if let Err(e) = sent {
            guard.armed = false;
            self.forget(id);
            return Err(e);
        }
        let r = srx.await;
        guard.armed = false;
        match r {
            Ok(Ok((pid, landlock))) => Ok(Child {
                pid,
                landlock,
                id,
                inner: self.inner.clone(),
                exit: Some(erx),
                done: None,
                gate: gate_wr,
            }),
            Ok(Err(e)) => {
                self.forget(id);
                Err(e)
            }
            Err(_) => Err(SandboxError::Helper(self.death())),
        }
    }

    /// Runs `true` confined under `settings` in a scratch workspace: a
    /// start-up self-test (the daemon should refuse to start when it fails).
    /// Returns the Landlock enforcement obtained.
    ///
    /// Errors: whatever [`Spawner::spawn`] returns, or
    /// [`SandboxError::Setup`] (stage `self-test`) when `true` did not exit 0.
    pub async fn self_test(&self, settings: &SandboxSettings) -> Result<Enforcement, SandboxError> {
        let ws = std::env::temp_dir().join(format!("warden-selftest-{}", crate::new_id()));
        std::fs::create_dir_all(&ws)?;
        let ws = ws.canonicalize()?;
        let req = SpawnRequest {
            argv: vec!["true".into()],
            env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
            workspace: ws.clone(),
            cwd: ws.clone(),
            profile: Profile::Write,
            settings: settings.clone(),
            cache_dir: None,
            fallback: None,
        };
        let r = async {
            let (_r1, w1) = nix::unistd::pipe().map_err(std::io::Error::from)?;
            let (_r2, w2) = nix::unistd::pipe().map_err(std::io::Error::from)?;
            let mut child = self.spawn(req, w1, w2).await?;
            let exit = child.wait().await?;
            if exit.code != Some(0) {
                return Err(SandboxError::Setup {
                    stage: "self-test".into(),
                    message: format!("`true` ended with {exit:?}"),
                });
            }
            Ok(child.landlock)
        }
        .await;
        let _ = std::fs::remove_dir_all(&ws);
        r
    }

    fn forget(&self, id: u64) {
        let mut t = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
        t.started.remove(&id);
        t.exited.remove(&id);
    }

    fn death(&self) -> String {
        let t = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
        t.dead
            .clone()
            .unwrap_or_else(|| "the spawn helper went away".into())
    }
}

struct CancelGuard<'a> {
    inner: &'a Arc<Inner>,
    id: u64,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.kill(self.id);
        }
    }
}

/// The daemon side's reader: dispatches helper messages to waiting spawns.
fn reader(sock: UnixStream, inner: std::sync::Weak<Inner>, helper_pid: i32) {
    let why = loop {
        let msg = match protocol::recv::<FromHelper>(&sock) {
            Ok(Some((m, _))) => m,
            Ok(None) => break "the spawn helper exited".to_string(),
            Err(e) => break format!("reading from the spawn helper: {e}"),
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let mut t = inner.table.lock().unwrap_or_else(|p| p.into_inner());
        match msg {
            FromHelper::Started { id, pid, landlock } => {
                if let Some(tx) = t.started.remove(&id) {
                    let _ = tx.send(Ok((pid, landlock)));
                }
            }
            FromHelper::Failed { id, error } => {
                t.exited.remove(&id);
                if let Some(tx) = t.started.remove(&id) {
                    let _ = tx.send(Err(error.into()));
                }
            }
            FromHelper::Exited {
                id,
                code,
                signal,
                cgroup_oom_kills,
                cgroup_pids_max,
            } => {
                helper::trace_daemon("exited received");
                if let Some(tx) = t.exited.remove(&id) {
                    let _ = tx.send(ExitInfo {
                        code,
                        signal,
                        cgroup_oom_kills,
                        cgroup_pids_max_hits: cgroup_pids_max,
                    });
                }
            }
        }
    };
    if let Some(inner) = inner.upgrade() {
        let mut t = inner.table.lock().unwrap_or_else(|p| p.into_inner());
        t.dead = Some(why);
        t.started.clear();
        t.exited.clear();
    }
    // Reap the helper if it is our child (fork or re-exec).
    let mut st = 0;
    // SAFETY: waitpid on a specific pid.
    unsafe { libc::waitpid(helper_pid, &mut st, 0) };
}

/// A running sandboxed command. Dropping it before it ended kills it.
pub struct Child {
    /// Pid of the command's pid-namespace init, in the daemon's pid namespace.
    pub pid: u32,
    /// Landlock enforcement status of this execution.
    pub landlock: Enforcement,
    id: u64,
    inner: Arc<Inner>,
    exit: Option<tokio::sync::oneshot::Receiver<ExitInfo>>,
    done: Option<ExitInfo>,
    /// The write end of the command's gate ([`Spawner::spawn_gated`]).
    gate: Option<OwnedFd>,
}

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Child")
            .field("pid", &self.pid)
            .field("landlock", &self.landlock)
            .finish()
    }
}

impl Child {
    /// Waits for the command to end. When the command's own process exits,
    /// every process it left behind in its pid namespace is killed.
    ///
    /// Errors: [`SandboxError::Helper`] when the helper died meanwhile.
    pub async fn wait(&mut self) -> Result<ExitInfo, SandboxError> {
        if let Some(d) = self.done {
            return Ok(d);
        }
        let Some(rx) = self.exit.as_mut() else {
            return Err(SandboxError::Helper("no exit channel".into()));
        };
        match rx.await {
            Ok(info) => {
                self.done = Some(info);
                self.exit = None;
                Ok(info)
            }
            Err(_) => Err(SandboxError::Helper(
                "the spawn helper went away before the command ended".into(),
            )),
        }
    }

    /// Lets a command from [`Spawner::spawn_gated`] execute (no-op for one
    /// that already runs).
    ///
    /// Errors: [`SandboxError::Helper`] when the command is gone (killed,
    /// or the helper died): it did not execute.
    pub fn open_gate(&mut self) -> Result<(), SandboxError> {
        let Some(g) = self.gate.take() else {
            return Ok(());
        };
        // SAFETY: a 1-byte write from a static buffer to our own pipe.
        let n = unsafe { libc::write(g.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        helper::trace_daemon("gate opened");
        if n != 1 {
            return Err(SandboxError::Helper(format!(
                "opening the command's gate: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    /// Kills every process the command started. Idempotent.
    pub fn kill(&self) {
        self.kill_handle().kill()
    }

    /// A handle that can kill the command from elsewhere (timeouts, daemon
    /// shutdown, a client that went away).
    pub fn kill_handle(&self) -> KillHandle {
        KillHandle {
            inner: self.inner.clone(),
            id: self.id,
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.done.is_none() {
            self.inner.kill(self.id);
        }
    }
}

/// Kills one command's processes; cheap to clone, safe to call after the
/// command ended.
#[derive(Debug, Clone)]
pub struct KillHandle {
    inner: Arc<Inner>,
    id: u64,
}

impl KillHandle {
    /// Kills every process the command started (SIGKILL to the init of its
    /// pid namespace). Idempotent.
    pub fn kill(&self) {
        self.inner.kill(self.id);
    }
}
