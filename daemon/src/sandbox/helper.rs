//! The spawn helper: a single-threaded process that receives spawn requests
//! over a Unix socketpair, clones each command into new namespaces, reaps
//! them and reports their exit. It dies with the daemon (`PR_SET_PDEATHSIG`
//! and EOF on the socket), and every command's init dies with it.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use seccompiler::BpfProgram;

use super::child::{self, ChildIo};
use super::mounts;
use super::plan::{HostFacts, Plan, SANDBOX_ID};
use super::protocol::{self, FromHelper, ToHelper, WireError, WireRequest};

/// Host uid/gid commands run as when the daemon is root (overridable with
/// `WARDEN_SANDBOX_HOST_UID` in the daemon's environment).
pub const DEFAULT_ROOT_HOST_UID: u32 = 2_000_000_000;

static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
static mut T0: Option<std::time::Instant> = None;
/// The helper's standard error, duplicated at start (`F_DUPFD_CLOEXEC`).
const TRACE_FD: i32 = 1023;

/// With `WARDEN_SPAWN_TRACE=1` in the daemon's environment, prints the time
/// of each set-up phase (µs since the request arrived; in a sandbox's own
/// processes, since the request their helper served before they were
/// cloned), `CLOCK_MONOTONIC` in µs (comparable across processes), and the
/// CPU time of the printing process so far (µs; a fresh clone starts at
/// zero) on standard error.
pub(crate) fn trace(what: &str) {
    if *TRACE.get_or_init(|| std::env::var_os("WARDEN_SPAWN_TRACE").is_some()) {
        // SAFETY: single-threaded process; T0 is only written in try_spawn.
        let t0 = unsafe { T0 };
        if let Some(t0) = t0 {
            // fd 2 of the helper, saved before any dup2 in the command.
            // CPU time of this process so far (a forked child starts at
            // zero), immune to the scheduling noise of a loaded machine.
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime into a local timespec.
            unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
            let cpu = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
            // SAFETY: as above.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            let mono = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
            let line = format!(
                "spawn-trace {:>8} us  mono {mono:>14} us  cpu {cpu:>6} us  {what}\n",
                t0.elapsed().as_micros(),
            );
            // SAFETY: write(2) of a local buffer.
            unsafe { libc::write(TRACE_FD, line.as_ptr().cast(), line.len()) };
        }
    }
}

/// [`trace`] for the daemon's side of a spawn (its own standard error;
/// `CLOCK_MONOTONIC` only).
pub(crate) fn trace_daemon(what: &str) {
    if *TRACE.get_or_init(|| std::env::var_os("WARDEN_SPAWN_TRACE").is_some()) {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime into a local timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let mono = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
        eprintln!("spawn-trace daemon    mono {mono:>14} us  {what}");
    }
}

/// `WARDEN_SANDBOX_WARM=0` in the daemon's environment turns off warm
/// sandboxes (built ahead of the next command; [`Helper::prebuild`]).
pub const WARM_ENV: &str = "WARDEN_SANDBOX_WARM";

/// How long the set-up of one command may take before it is killed, ms.
const SETUP_TIMEOUT_MS: i32 = 30_000;

struct Running {
    id: u64,
    exit_rd: OwnedFd,
    started: bool,
    /// The command's own cgroup, when the policy set cgroup limits.
    cgroup: Option<PathBuf>,
    /// The exit pipe was read (EOF or the command's status): `Exited` went
    /// out when a status came, before the init was reaped.
    exit_read: bool,
}

/// A sandbox built ahead of its command ([`Helper::prebuild`]).
struct Warm {
    /// [`Plan::fingerprint`] of the plan it was built from.
    key: String,
    /// Its init.
    pid: libc::pid_t,
    /// The helper's end of its control socket.
    ctl: OwnedFd,
    setup_rd: OwnedFd,
    exit_rd: OwnedFd,
    cgroup: Option<PathBuf>,
}

/// A cloned init, building its sandbox.
struct Launched {
    pid: libc::pid_t,
    setup_rd: OwnedFd,
    exit_rd: OwnedFd,
}

struct Helper {
    sock: UnixStream,
    host: HostFacts,
    filters: Vec<BpfProgram>,
    children: HashMap<libc::pid_t, Running>,
    by_id: HashMap<u64, libc::pid_t>,
    /// (disk uid, disk gid) -> user namespace fd mapping them to the host id.
    idmaps: HashMap<(u32, u32), OwnedFd>,
    /// The delegated cgroup v2 subtree, or why there is none (detected at
    /// start, prepared on first use).
    cgroup: Result<super::cgroup::Delegation, String>,
    /// Cgroups of ended commands still busy (processes on their way out).
    stale_cgroups: Vec<PathBuf>,
    /// The sandbox built ahead for the next command, if any.
    warm: Option<Warm>,
    /// The last request served, which the next warm sandbox is built for.
    last: Option<WireRequest>,
    /// Warm sandboxes are built (`WARDEN_SANDBOX_WARM` is not `0`).
    warm_enabled: bool,
    /// Counter naming warm sandboxes' cgroups.
    warm_seq: u64,
    /// The daemon's sandboxes lock ([`ToHelper::Hold`]): inherited by every
    /// init (never by a command past execve: it is close-on-exec), so the
    /// lock is free only once every sandbox of this helper is gone.
    hold: Option<OwnedFd>,
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fds.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn setup_err(stage: &str, e: impl std::fmt::Display) -> WireError {
    WireError::Setup {
        stage: stage.into(),
        message: e.to_string(),
    }
}

/// Closes every fd except 0-2 and `keep`.
fn close_others(keep: RawFd) {
    // SAFETY: close_range on ranges that exclude `keep`.
    unsafe {
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, (keep - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
    }
}

/// Entry point of the helper process. Never returns.
pub(crate) fn run(sock: UnixStream, parent: libc::pid_t) -> ! {
    // SAFETY: process-wide set-up of a process that has exactly one thread.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent {
            libc::_exit(0);
        }
        libc::prctl(libc::PR_SET_NAME, c"warden-spawn".as_ptr());
        libc::setsid();
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    close_others(sock.as_raw_fd());
    wipe_cmdline();
    if std::env::var_os("WARDEN_SPAWN_TRACE").is_some() {
        // SAFETY: duplicating our own stderr to a fixed, close-on-exec slot.
        unsafe {
            libc::dup3(2, TRACE_FD, libc::O_CLOEXEC);
        }
    }
    // SAFETY: geteuid never fails.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        // Supplementary groups of root (gid 0, disk, ...) must not reach
        // any command.
        // SAFETY: empty group list.
        unsafe { libc::setgroups(0, std::ptr::null()) };
    }
    let (host_uid, host_gid) = if root {
        let id = std::env::var("WARDEN_SANDBOX_HOST_UID")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|v| *v != 0)
            .unwrap_or(DEFAULT_ROOT_HOST_UID);
        (id, id)
    } else {
        // SAFETY: getters never fail.
        unsafe { (libc::getuid(), libc::getgid()) }
    };
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from(if root { "/root" } else { "/" }));
    // Per-spawn constants, computed once and inherited by every clone.
    child::cap_last();
    let filters = match super::seccomp::compile() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("warden-spawn: seccomp filters: {e}");
            // SAFETY: _exit is always safe.
            unsafe { libc::_exit(1) }
        }
    };
    let mut h = Helper {
        sock,
        host: HostFacts {
            root,
            host_uid,
            host_gid,
            home,
            cargo_home: std::env::var_os("CARGO_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute()),
            landlock_abi_cap: super::landlock_rules::abi_cap_from_env(),
        },
        filters,
        children: HashMap::new(),
        by_id: HashMap::new(),
        idmaps: HashMap::new(),
        cgroup: delegate(parent),
        stale_cgroups: Vec::new(),
        warm: None,
        last: None,
        warm_enabled: std::env::var_os(WARM_ENV).is_none_or(|v| v != "0"),
        warm_seq: 0,
        hold: None,
    };
    h.serve()
}

/// Blocks SIGCHLD and returns a non-blocking signalfd(2) for it (-1 on
/// failure). Only for a single-threaded process (the helper, an init).
pub(crate) fn sigchld_fd() -> RawFd {
    // SAFETY: signal mask manipulation in a single-threaded process.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
    }
}

impl Helper {
    fn serve(&mut self) -> ! {
        // SIGCHLD through a signalfd, so one poll(2) waits for both.
        let sfd = sigchld_fd();
        if sfd < 0 {
            // SAFETY: _exit is always safe.
            unsafe { libc::_exit(1) }
        }
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut early: Vec<libc::pid_t> = Vec::new();
        loop {
            fds.clear();
            early.clear();
            for fd in [self.sock.as_raw_fd(), sfd] {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            // A running command's status comes on its exit pipe before its
            // init is reaped (see `report_exit`).
            for (pid, r) in &self.children {
                if r.started && !r.exit_read && r.cgroup.is_none() {
                    early.push(*pid);
                    fds.push(libc::pollfd {
                        fd: r.exit_rd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    });
                }
            }
            if !self.stale_cgroups.is_empty() {
                self.stale_cgroups.retain(|d| !super::cgroup::remove(d));
            }
            // Idle with nothing running: build the next sandbox ahead.
            let prebuild = self.warm_enabled
                && self.warm.is_none()
                && self.last.is_some()
                && self.children.is_empty();
            let wait = if prebuild {
                0
            } else if self.stale_cgroups.is_empty() {
                -1
            } else {
                100
            };
            // SAFETY: valid pollfd array of fds.len() entries.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
            if n < 0 {
                continue;
            }
            if n == 0 && prebuild {
                self.prebuild();
                continue;
            }
            if fds[1].revents != 0 {
                let mut buf = [0u8; 128];
                // SAFETY: draining the signalfd into a stack buffer.
                while unsafe { libc::read(sfd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
                self.reap();
            }
            for (i, pid) in early.iter().enumerate() {
                if fds[2 + i].revents != 0 {
                    self.report_exit(*pid);
                }
            }
            if fds[0].revents != 0 {
                match protocol::recv::<ToHelper>(&self.sock) {
                    Ok(Some((ToHelper::Spawn { id, req }, fds))) => self.spawn(id, *req, fds),
                    Ok(Some((ToHelper::Kill { id }, _))) => self.kill(id),
                    Ok(Some((ToHelper::Hold, fds))) => {
                        if let Some(fd) = fds.into_iter().next() {
                            self.hold = Some(fd);
                        }
                    }
                    Ok(None) | Err(_) => self.shutdown(),
                }
            }
        }
    }

    /// The daemon is gone: every command goes with it.
    fn shutdown(&mut self) -> ! {
        self.kill_all()
    }

    /// Kills every sandbox (the warm one too: its init, whose death ends
    /// its pid namespace) and exits.
    fn kill_all(&self) -> ! {
        if let Some(w) = &self.warm {
            // SAFETY: our own child.
            unsafe { libc::kill(w.pid, libc::SIGKILL) };
        }
        for pid in self.children.keys() {
            // SAFETY: signalling our own children.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(0) }
    }

    fn kill(&mut self, id: u64) {
        if let Some(pid) = self.by_id.get(&id) {
            // The init dies; the kernel then kills its whole pid namespace.
            // SAFETY: our own, not yet reaped, child.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
    }

    fn send(&self, msg: &FromHelper) {
        if protocol::send(&self.sock, msg, &[]).is_err() {
            // The daemon is unreachable: nothing to serve.
            self.kill_all()
        }
    }

    /// Reads the exit pipe of `pid` (readable: the status or EOF). With the
    /// command's status, its init has killed and reaped everything else in
    /// the pid namespace ([`child::init_main`]): nothing of the command
    /// runs any more, so `Exited` goes out now rather than after the
    /// namespaces' teardown. EOF (the init was killed) is left to `reap`.
    fn report_exit(&mut self, pid: libc::pid_t) {
        let Some(rec) = self.children.get_mut(&pid) else {
            return;
        };
        rec.exit_read = true;
        let mut b = [0u8; 4];
        // SAFETY: read into a stack buffer from a pipe poll found readable.
        let n = unsafe { libc::read(rec.exit_rd.as_raw_fd(), b.as_mut_ptr().cast(), 4) };
        if n != 4 {
            return;
        }
        let id = rec.id;
        trace("exit reported");
        self.send(&exited(id, i32::from_le_bytes(b), Default::default()));
        // Reaped later; its id is done (a kill now finds nothing to kill).
        if let Some(rec) = self.children.get_mut(&pid) {
            rec.started = false;
        }
        self.by_id.remove(&id);
    }

    fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: non-blocking waitpid on any child.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            trace("reaped");
            // A warm sandbox's init that died idle: forget it (its pid may be
            // reused now, so it must never be signalled again).
            if self.warm.as_ref().is_some_and(|w| w.pid == pid) {
                if let Some(d) = self.warm.take().and_then(|w| w.cgroup) {
                    self.stale_cgroups.push(d);
                }
                continue;
            }
            let Some(rec) = self.children.remove(&pid) else {
                continue;
            };
            self.by_id.remove(&rec.id);
            let events = match &rec.cgroup {
                Some(dir) => {
                    let ev = super::cgroup::events(dir);
                    if !super::cgroup::remove(dir) {
                        self.stale_cgroups.push(dir.clone());
                    }
                    ev
                }
                None => super::cgroup::Events::default(),
            };
            if !rec.started {
                continue;
            }
            // The init writes the command's wait status before exiting; no
            // status means the init itself was killed (kill / timeout).
            let mut b = [0u8; 4];
            let mut f = std::fs::File::from(rec.exit_rd);
            let cmd_status = match (rec.exit_read, f.read(&mut b)) {
                (false, Ok(4)) => i32::from_le_bytes(b),
                _ => status,
            };
            self.send(&exited(rec.id, cmd_status, events));
        }
    }

    fn spawn(&mut self, id: u64, req: WireRequest, mut fds: Vec<OwnedFd>) {
        let msg = match self.try_spawn(id, &req, &mut fds) {
            Ok((pid, landlock)) => FromHelper::Started {
                id,
                pid: pid as u32,
                landlock,
            },
            Err(error) => FromHelper::Failed { id, error },
        };
        self.send(&msg);
    }

    fn try_spawn(
        &mut self,
        id: u64,
        req: &WireRequest,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<(libc::pid_t, super::Enforcement), WireError> {
        let base = 2 + usize::from(req.gate);
        if fds.len() != base && fds.len() != base + 1 {
            return Err(setup_err(
                "protocol",
                "expected stdout and stderr fds (then optionally stdin, then the gate)",
            ));
        }
        let gate = if req.gate { fds.pop() } else { None };
        let stdin = if fds.len() == 3 { fds.pop() } else { None };
        let stderr = fds.pop().unwrap();
        let stdout = fds.pop().unwrap();
        if self.host.root {
            // Pipes made by a root daemon are root's, mode 0600: reopening
            // them through /dev/stdout (/proc/self/fd/1) would fail for the
            // unprivileged sandbox uid. Hand pipes and sockets to it.
            for fd in [Some(&stdout), Some(&stderr), stdin.as_ref()]
                .into_iter()
                .flatten()
            {
                // SAFETY: fstat/fchown on a valid fd.
                unsafe {
                    let mut st: libc::stat = std::mem::zeroed();
                    if libc::fstat(fd.as_raw_fd(), &mut st) == 0 {
                        let kind = st.st_mode & libc::S_IFMT;
                        if (kind == libc::S_IFIFO || kind == libc::S_IFSOCK) && st.st_uid == 0 {
                            libc::fchown(fd.as_raw_fd(), self.host.host_uid, self.host.host_gid);
                        }
                    }
                }
            }
        }
        // SAFETY: single-threaded process.
        unsafe { T0 = Some(std::time::Instant::now()) };
        let mut plan = Plan::new(req, &self.host)?;
        trace("plan");
        if let Some(w) = self.warm.take() {
            if self.warm_fits(&w, &plan) {
                let fds = (stdin.as_ref(), &stdout, &stderr, gate.as_ref());
                if let Some(r) = self.use_warm(id, w, &plan, fds) {
                    if r.is_ok() {
                        self.last = Some(req.clone());
                    }
                    return r;
                }
            } else {
                self.discard(w);
            }
        }
        if self.host.root {
            let mnt = self.idmapped_workspace(&plan)?;
            plan.attach_workspace(mnt);
        }
        trace("idmap");
        let cgroup = self.command_cgroup(id, &plan.limits)?;
        let l = match self.launch(
            &mut plan,
            (stdin, Some(stdout), Some(stderr), gate),
            None,
            &cgroup,
        ) {
            Ok(l) => l,
            Err(e) => {
                if let Some(d) = cgroup {
                    self.stale_cgroups.push(d);
                }
                return Err(e);
            }
        };
        drop(plan);
        self.children.insert(
            l.pid,
            Running {
                id,
                exit_rd: l.exit_rd,
                started: false,
                cgroup,
                exit_read: false,
            },
        );
        self.by_id.insert(id, l.pid);
        let r = self.finish_setup(l.pid, &l.setup_rd, req.gate);
        if r.is_ok() {
            self.last = Some(req.clone());
        }
        r
    }

    /// Clones the sandbox's init with its namespaces for `plan`, writes its
    /// uid/gid maps, puts it into `cgroup` and lets it build the sandbox.
    /// `fds` (stdin, stdout, stderr, gate) go to the command; `ctl` makes
    /// it a warm sandbox that waits for its command instead (see
    /// [`child::ChildIo::ctl`]).
    fn launch(
        &mut self,
        plan: &mut Plan,
        fds: CommandFds,
        ctl: Option<OwnedFd>,
        cgroup: &Option<PathBuf>,
    ) -> Result<Launched, WireError> {
        let (stdin, stdout, stderr, gate) = fds;
        let (sync_rd, sync_wr) = pipe().map_err(|e| setup_err("pipe", e))?;
        let (setup_rd, setup_wr) = pipe().map_err(|e| setup_err("pipe", e))?;
        let (exit_rd, exit_wr) = pipe().map_err(|e| setup_err("pipe", e))?;
        let mut flags = libc::CLONE_NEWUSER
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWCGROUP;
        if plan.private_net {
            flags |= libc::CLONE_NEWNET;
        }
        // clone(2) without a new stack behaves like fork(2); this process has
        // one thread, so the child may allocate.
        // SAFETY: raw clone with fork semantics (x86_64/aarch64 argument
        // order: flags, stack, parent_tid, child_tid, tls).
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                (flags | libc::SIGCHLD) as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        } as libc::pid_t;
        trace("clone");
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            return Err(setup_err("namespaces", format!("clone: {e}")));
        }
        if pid == 0 {
            drop(sync_wr);
            drop(setup_rd);
            drop(exit_rd);
            // Helper-only fds must not reach the command.
            // SAFETY: closing fds this child does not use.
            unsafe {
                libc::close(self.sock.as_raw_fd());
            }
            for r in self.children.values() {
                // SAFETY: as above.
                unsafe { libc::close(r.exit_rd.as_raw_fd()) };
            }
            for f in self.idmaps.values() {
                // SAFETY: as above.
                unsafe { libc::close(f.as_raw_fd()) };
            }
            let io = ChildIo {
                sync_rd,
                setup_wr,
                exit_wr,
                stdin,
                stdout,
                stderr,
                ctl,
                gate,
            };
            child::init_main(plan, io, self.host.root, &self.filters);
        }
        drop(sync_rd);
        drop(setup_wr);
        drop(exit_wr);
        drop((stdin, stdout, stderr, ctl, gate));
        let fail = |e: WireError| {
            // SAFETY: our own child; reaped later by reap().
            unsafe { libc::kill(pid, libc::SIGKILL) };
            e
        };
        let maps = [
            ("setgroups", "deny".to_string()),
            (
                "uid_map",
                format!("{SANDBOX_ID} {} 1\n", self.host.host_uid),
            ),
            (
                "gid_map",
                format!("{SANDBOX_ID} {} 1\n", self.host.host_gid),
            ),
        ];
        for (file, content) in maps {
            if let Err(e) = std::fs::write(format!("/proc/{pid}/{file}"), content) {
                return Err(fail(setup_err("userns", format!("write {file}: {e}"))));
            }
        }
        // Into its cgroup while it still waits: every process of the command
        // starts inside.
        if let Some(d) = cgroup {
            if let Err(e) = super::cgroup::enter(d, pid) {
                return Err(fail(setup_err("cgroup", e)));
            }
        }
        // SAFETY: one byte from a stack buffer.
        if unsafe { libc::write(sync_wr.as_raw_fd(), b"g".as_ptr().cast(), 1) } != 1 {
            return Err(fail(setup_err("userns", "child vanished")));
        }
        drop(sync_wr);
        trace("maps written");
        Ok(Launched {
            pid,
            setup_rd,
            exit_rd,
        })
    }

    /// Waits for the set-up report of child `pid`: EOF on `setup_rd` once
    /// the command's `execve` succeeded or the set-up failed, or, for a
    /// `gated` command, its `G` (confined, waiting at the gate).
    fn finish_setup(
        &mut self,
        pid: libc::pid_t,
        setup_rd: &OwnedFd,
        gated: bool,
    ) -> Result<(libc::pid_t, super::Enforcement), WireError> {
        let fail = |e: WireError| {
            // SAFETY: our own child; reaped later by reap().
            unsafe { libc::kill(pid, libc::SIGKILL) };
            e
        };
        let buf = match read_setup(setup_rd, SETUP_TIMEOUT_MS, gated) {
            Ok(b) => b,
            Err(e) => return Err(fail(setup_err("setup", e))),
        };
        trace("setup done (execve or gate)");
        if gated && !child::at_gate(&buf) && child::parse_setup(&buf).is_ok() {
            // Only our code runs before the gate: a command past it
            // without having stopped there is a broken child.
            return Err(fail(setup_err(
                "setup",
                "the command did not stop at its gate",
            )));
        }
        match child::parse_setup(&buf) {
            Ok(e) => {
                if let Some(r) = self.children.get_mut(&pid) {
                    r.started = true;
                }
                Ok((pid, e))
            }
            Err((stage, message)) => {
                let err = if stage == "refused" {
                    WireError::Refused(message)
                } else {
                    WireError::Setup { stage, message }
                };
                Err(fail(err))
            }
        }
    }

    /// Whether warm sandbox `w` was built for what `plan` would build: same
    /// fingerprint ([`Plan::fingerprint`], taken now, so host objects
    /// changed since the warm one was built are seen).
    fn warm_fits(&self, w: &Warm, plan: &Plan) -> bool {
        w.key == plan.fingerprint()
    }

    /// Hands the command of `plan` and its stdio to warm sandbox `w` and
    /// waits for its set-up report, as for a sandbox built on request.
    /// `None` when `w` is gone, stale, or the command is larger than one
    /// control message (then a sandbox is built for the request).
    fn use_warm(
        &mut self,
        id: u64,
        w: Warm,
        plan: &Plan,
        (stdin, stdout, stderr, gate): (Option<&OwnedFd>, &OwnedFd, &OwnedFd, Option<&OwnedFd>),
    ) -> Option<Result<(libc::pid_t, super::Enforcement), WireError>> {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        let mut flags = 0;
        let mut fds = vec![stdout.as_raw_fd(), stderr.as_raw_fd()];
        if let Some(i) = stdin {
            fds.push(i.as_raw_fd());
            flags |= child::CMD_STDIN;
        }
        if let Some(g) = gate {
            fds.push(g.as_raw_fd());
            flags |= child::CMD_GATE;
        }
        let msg = child::encode_command(plan, flags);
        if msg.len() > child::WARM_MSG_MAX {
            self.discard(w);
            return None;
        }
        let iov = [std::io::IoSlice::new(&msg)];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        if sendmsg::<()>(w.ctl.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None).is_err() {
            self.discard(w);
            return None;
        }
        trace("warm sandbox used");
        self.children.insert(
            w.pid,
            Running {
                id,
                exit_rd: w.exit_rd,
                started: false,
                cgroup: w.cgroup,
                exit_read: false,
            },
        );
        self.by_id.insert(id, w.pid);
        let r = self.finish_setup(w.pid, &w.setup_rd, gate.is_some());
        if let Err(WireError::Setup { stage, .. }) = &r {
            if stage == child::STALE {
                // The host changed what its tree pins: build one on request.
                trace("warm sandbox stale");
                self.by_id.remove(&id);
                if let Some(d) = self.children.remove(&w.pid).and_then(|rec| rec.cgroup) {
                    self.stale_cgroups.push(d);
                }
                return None;
            }
        }
        Some(r)
    }

    /// Drops a warm sandbox: its init dies (SIGKILL; reaped by `reap`, which
    /// ignores pids it does not track) and its cgroup goes once empty.
    fn discard(&mut self, w: Warm) {
        // SAFETY: our own, not yet reaped, child.
        unsafe { libc::kill(w.pid, libc::SIGKILL) };
        if let Some(d) = w.cgroup {
            self.stale_cgroups.push(d);
        }
    }

    /// Builds the next sandbox ahead of its command, for the request last
    /// served (agent loops run command after command in one workspace and
    /// profile): namespaces, `lo`, the mount tree, everything but the
    /// command process, which gets its rlimits, Landlock and seccomp as
    /// always when the command comes. Used only if the next request would
    /// build the same sandbox ([`Helper::warm_fits`]); otherwise dropped.
    /// Only while no command runs, so no sandboxed process can change the
    /// host objects the tree pins in between. A failure stops pre-building
    /// until a request is served again.
    fn prebuild(&mut self) {
        let Some(req) = self.last.take() else {
            return;
        };
        let Ok(mut plan) = Plan::new(&req, &self.host) else {
            return;
        };
        if self.host.root {
            match self.idmapped_workspace(&plan) {
                Ok(mnt) => plan.attach_workspace(mnt),
                Err(_) => return,
            }
        }
        let key = plan.fingerprint();
        self.warm_seq += 1;
        let Ok(cgroup) = self.command_cgroup(u64::MAX - self.warm_seq, &plan.limits) else {
            return;
        };
        let pair = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        );
        let Ok((ctl, ctl_child)) = pair else {
            return;
        };
        let l = match self.launch(
            &mut plan,
            (None, None, None, None),
            Some(ctl_child),
            &cgroup,
        ) {
            Ok(l) => l,
            Err(_) => {
                if let Some(d) = cgroup {
                    self.stale_cgroups.push(d);
                }
                return;
            }
        };
        let w = Warm {
            key,
            pid: l.pid,
            ctl,
            setup_rd: l.setup_rd,
            exit_rd: l.exit_rd,
            cgroup,
        };
        // Ready (`R`) once built; EOF when the set-up failed.
        let mut p = libc::pollfd {
            fd: w.ctl.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let mut b = [0u8; 1];
        // SAFETY: one valid pollfd; a 1-byte read into a stack buffer.
        let ready = unsafe {
            libc::poll(&mut p, 1, SETUP_TIMEOUT_MS) == 1
                && libc::recv(
                    w.ctl.as_raw_fd(),
                    b.as_mut_ptr().cast(),
                    1,
                    libc::MSG_DONTWAIT,
                ) == 1
        } && b[0] == b'R';
        trace("warm sandbox built");
        if ready {
            self.warm = Some(w);
            self.last = Some(req);
        } else {
            self.discard(w);
        }
    }

    /// The cgroup of command `id` with the policy's cgroup limits, or `None`
    /// when it sets none. Refused when there is no delegated cgroup v2
    /// subtree (never run weaker than the policy asks).
    fn command_cgroup(
        &mut self,
        id: u64,
        limits: &super::settings::Limits,
    ) -> Result<Option<PathBuf>, WireError> {
        if limits.cgroup_memory_max_bytes == 0 && limits.cgroup_pids_max == 0 {
            return Ok(None);
        }
        let d = self.cgroup.as_ref().map_err(|why| {
            WireError::Refused(format!(
                "the policy sets cgroup limits (sandbox.limits.cgroup_memory_max_bytes / \
                 cgroup_pids_max) but the daemon has no delegated cgroup v2 subtree: {why}; \
                 see `warden doctor`"
            ))
        })?;
        // SAFETY: getpid never fails.
        let name = format!("warden-cmd-{}-{id}", unsafe { libc::getpid() });
        d.create(&name, limits)
            .map(Some)
            .map_err(|e| setup_err("cgroup", e))
    }

    /// A detached clone of the workspace mount, idmapped so that the
    /// workspace owner's ids on disk appear as the sandbox's host ids
    /// (mount_setattr(2), `MOUNT_ATTR_IDMAP`).
    fn idmapped_workspace(&mut self, plan: &Plan) -> Result<OwnedFd, WireError> {
        let (uid, gid) = plan.ws_owner;
        let userns = match self.idmaps.get(&(uid, gid)) {
            Some(fd) => fd.try_clone().map_err(|e| setup_err("idmap", e))?,
            None => {
                let fd = make_userns(
                    &format!("{uid} {} 1\n", self.host.host_uid),
                    &format!("{gid} {} 1\n", self.host.host_gid),
                )
                .map_err(|e| setup_err("idmap", format!("user namespace for the idmap: {e}")))?;
                let c = fd.try_clone().map_err(|e| setup_err("idmap", e))?;
                self.idmaps.insert((uid, gid), fd);
                c
            }
        };
        mounts::idmapped_clone(&plan.workspace, &userns, plan.ws_readonly).map_err(|e| {
            WireError::Refused(format!(
                "workspace {} cannot be idmapped ({e}); a root daemon needs an idmappable workspace",
                plan.workspace.display()
            ))
        })
    }
}

/// Detects a delegated cgroup v2 subtree and, when there is one, makes it
/// ready for per-command cgroups before any command runs (moves the helper
/// and the daemon into a leaf: see `cgroup.rs`).
fn delegate(daemon: libc::pid_t) -> Result<super::cgroup::Delegation, String> {
    // SAFETY: getpid never fails.
    let ours = [unsafe { libc::getpid() }, daemon];
    let d = super::cgroup::detect(&ours)?;
    d.prepare(&ours)
        .map_err(|e| format!("delegating {} failed: {e}", d.base.display()))?;
    Ok(d)
}

/// The `Exited` message for command `id` with wait status `status`.
fn exited(id: u64, status: i32, events: super::cgroup::Events) -> FromHelper {
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, Some(libc::SIGKILL))
    };
    FromHelper::Exited {
        id,
        code,
        signal,
        cgroup_oom_kills: events.oom_kills,
        cgroup_pids_max: events.pids_max,
    }
}

/// The fds a command gets: stdin (`None`: `/dev/null`), stdout, stderr
/// (`None` only for a warm sandbox, which gets them with its command), and
/// its gate ([`child::ChildIo::gate`]).
type CommandFds = (
    Option<OwnedFd>,
    Option<OwnedFd>,
    Option<OwnedFd>,
    Option<OwnedFd>,
);

/// Reads the setup pipe `fd` until EOF, or (`gated`) until the command
/// reported that it waits at its gate ([`child::at_gate`]), or until
/// `timeout_ms` passes.
fn read_setup(fd: &OwnedFd, timeout_ms: i32, gated: bool) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms as u64);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!(
                "sandbox set-up did not finish within {timeout_ms} ms"
            ));
        }
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(format!("poll: {}", std::io::Error::last_os_error()));
        }
        if n == 0 {
            continue;
        }
        let mut buf = [0u8; 4096];
        // SAFETY: read into a stack buffer.
        let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(format!("read: {}", std::io::Error::last_os_error()));
        }
        if r == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..r as usize]);
        if gated && child::at_gate(&out) {
            return Ok(out);
        }
        if out.len() > 1 << 16 {
            return Err("sandbox set-up report too long".into());
        }
    }
}

/// A user namespace with the given maps, held open by fd (user_namespaces(7)).
/// A short-lived child creates it and exits once the fd is open.
pub(crate) fn make_userns(uid_map: &str, gid_map: &str) -> std::io::Result<OwnedFd> {
    let (rd, wr) = pipe()?;
    // SAFETY: fork-like clone in a single-threaded process; the child only
    // blocks on a read and exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    } as libc::pid_t;
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        drop(wr);
        let mut b = [0u8; 1];
        // SAFETY: blocking read until the parent closes the pipe.
        unsafe {
            libc::read(rd.as_raw_fd(), b.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    drop(rd);
    let res = (|| {
        std::fs::write(format!("/proc/{pid}/uid_map"), uid_map)?;
        std::fs::write(format!("/proc/{pid}/setgroups"), "deny")?;
        std::fs::write(format!("/proc/{pid}/gid_map"), gid_map)?;
        let f = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
        Ok(OwnedFd::from(f))
    })();
    drop(wr);
    let mut st = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    res
}

/// Overwrites this process's argument area with `warden-spawn`, so
/// `/proc/1/cmdline` of every sandbox (a copy of the helper) shows nothing of
/// the daemon's command line (socket, state dir). proc(5): `arg_start` and
/// `arg_end` are fields 48 and 49 of `/proc/self/stat`.
fn wipe_cmdline() {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    let Some(close) = stat.rfind(')') else {
        return;
    };
    // Fields after "pid (comm)" start at field 3.
    let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let (Some(a), Some(b)) = (f.get(48 - 3), f.get(49 - 3)) else {
        return;
    };
    let (Ok(start), Ok(end)) = (a.parse::<usize>(), b.parse::<usize>()) else {
        return;
    };
    let name = b"warden-spawn\0";
    if start == 0 || end <= start || end - start < name.len() {
        return;
    }
    // SAFETY: [arg_start, arg_end) is this process's own, writable argument
    // area on the initial stack; nothing in the helper reads argv after this.
    unsafe {
        std::ptr::write_bytes(start as *mut u8, 0, end - start);
        std::ptr::copy_nonoverlapping(name.as_ptr(), start as *mut u8, name.len());
    }
}
