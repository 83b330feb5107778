//! What runs after the clone: the namespace's init (pid 1), which finishes
//! the namespaces and the mount tree, and the command process (pid 2), which
//! applies rlimits, `no_new_privs`, Landlock and seccomp, then `execve`s.
//!
//! Both run in a fresh copy of the single-threaded helper, so allocating is
//! safe. Failures are reported on the setup pipe as `E stage \0 message`;
//! success of the set-up as `L <enforcement>`; a successful `execve` closes
//! the pipe (`O_CLOEXEC`).

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use seccompiler::BpfProgram;

use super::landlock_rules;
use super::mounts;
use super::plan::{Cmd, Plan, SANDBOX_ID};
use super::Enforcement;

/// Fds the child needs, by role.
pub(crate) struct ChildIo {
    pub sync_rd: OwnedFd,
    pub setup_wr: OwnedFd,
    pub exit_wr: OwnedFd,
    /// `None`: the command's stdin is `/dev/null`.
    pub stdin: Option<OwnedFd>,
    /// `None` only for a warm sandbox, which gets them with its command.
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    /// A warm sandbox's end of its control socket (`SOCK_SEQPACKET`): the
    /// init reports `R` once the sandbox is built, then waits for its
    /// command ([`encode_command`]) with the stdio fds (`SCM_RIGHTS`).
    pub ctl: Option<OwnedFd>,
    /// The read end of the command's gate: the command, fully confined,
    /// reports `G` on the setup pipe and waits for one byte here before it
    /// `execve`s (EOF: it exits without executing anything). `None`: it
    /// executes at once.
    pub gate: Option<OwnedFd>,
}

/// Set-up stage a warm sandbox reports when its tree no longer matches the
/// host ([`pinned_mounts`]): the helper then builds a sandbox on request.
pub(crate) const STALE: &str = "stale";

/// The mount id (statx(2) `STATX_MNT_ID`) of `p` itself (`O_PATH |
/// O_NOFOLLOW`), or `None` when it cannot be opened.
fn mnt_id(p: &std::path::Path) -> Option<u64> {
    let c = CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: valid C string; a fresh fd or -1.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: fresh fd, owned here.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: zeroed statx buffer filled by the kernel.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, empty path with AT_EMPTY_PATH, valid buffer.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    (r == 0 && stx.stx_mask & libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id)
}

/// The mounts of this sandbox that sit on host objects the host can delete:
/// credential masks and protected paths with their anchored ancestors, as
/// (path, mount id). Deleting such an object on the host detaches the mounts
/// on it in every namespace, so the same list read again differs.
fn pinned_mounts(plan: &Plan) -> Vec<(std::path::PathBuf, Option<u64>)> {
    let mut out = Vec::new();
    for op in &plan.ops {
        if let mounts::Op::Mask { dst, .. } = op {
            out.push((dst.clone(), mnt_id(dst)));
        }
    }
    for rel in &plan.protect {
        let full = plan.workspace.join(rel);
        if mnt_id(&full).is_none() {
            // Absent: stays absent (the plan's fingerprint covers creation).
            continue;
        }
        for a in rel.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            let p = plan.workspace.join(a);
            out.push((p.clone(), mnt_id(&p)));
        }
    }
    out
}

/// Largest command message a warm sandbox takes, bytes (larger commands get
/// a sandbox built for them).
pub(crate) const WARM_MSG_MAX: usize = 64 * 1024;

/// The command part of a plan for a warm sandbox, as one control message:
/// a `u32` of flags ([`CMD_STDIN`], [`CMD_GATE`]: which fds follow stdout
/// and stderr), then seven lists — argv, env, executable candidates, cwd,
/// and the fallback's argv, env and candidates (empty without one) — each
/// as a `u32` count then per item a `u32` length and the bytes (native
/// endian: both ends are this binary).
pub(crate) fn encode_command(plan: &Plan, flags: u32) -> Vec<u8> {
    let mut out = flags.to_ne_bytes().to_vec();
    let cwd = [plan.cwd.as_os_str().as_bytes()];
    fn bytes(l: &[CString]) -> Vec<&[u8]> {
        l.iter().map(|c| c.as_bytes()).collect()
    }
    let none = Vec::new();
    let fb = plan.fallback.as_ref();
    let lists: [Vec<&[u8]>; 7] = [
        bytes(&plan.cmd.argv),
        bytes(&plan.cmd.env),
        bytes(&plan.cmd.exe),
        cwd.to_vec(),
        fb.map(|f| bytes(&f.argv)).unwrap_or_else(|| none.clone()),
        fb.map(|f| bytes(&f.env)).unwrap_or_else(|| none.clone()),
        fb.map(|f| bytes(&f.exe)).unwrap_or(none),
    ];
    for l in &lists {
        out.extend_from_slice(&(l.len() as u32).to_ne_bytes());
        for item in l {
            out.extend_from_slice(&(item.len() as u32).to_ne_bytes());
            out.extend_from_slice(item);
        }
    }
    out
}

/// [`encode_command`] flag: a stdin fd follows stdout and stderr.
pub(crate) const CMD_STDIN: u32 = 1;
/// [`encode_command`] flag: a gate fd comes last ([`ChildIo::gate`]).
pub(crate) const CMD_GATE: u32 = 2;

/// The command of a warm sandbox.
struct WarmCommand {
    cmd: Cmd,
    fallback: Option<Cmd>,
    cwd: std::path::PathBuf,
    flags: u32,
}

fn decode_command(mut b: &[u8]) -> Option<WarmCommand> {
    fn u32_at(b: &mut &[u8]) -> Option<usize> {
        let (h, t) = b.split_first_chunk::<4>()?;
        *b = t;
        Some(u32::from_ne_bytes(*h) as usize)
    }
    let flags = u32_at(&mut b)? as u32;
    let mut lists: Vec<Vec<Vec<u8>>> = Vec::with_capacity(7);
    for _ in 0..7 {
        let n = u32_at(&mut b)?;
        let mut l = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            let len = u32_at(&mut b)?;
            if len > b.len() {
                return None;
            }
            let (item, t) = b.split_at(len);
            l.push(item.to_vec());
            b = t;
        }
        lists.push(l);
    }
    let cs = |l: Vec<Vec<u8>>| {
        l.into_iter()
            .map(CString::new)
            .collect::<Result<Vec<_>, _>>()
            .ok()
    };
    let mut it = lists.into_iter();
    let (argv, env, exe) = (cs(it.next()?)?, cs(it.next()?)?, cs(it.next()?)?);
    let cwd = it.next()?.pop()?;
    let (fargv, fenv, fexe) = (cs(it.next()?)?, cs(it.next()?)?, cs(it.next()?)?);
    if argv.is_empty() {
        return None;
    }
    let fallback = (!fargv.is_empty()).then_some(Cmd {
        argv: fargv,
        env: fenv,
        exe: fexe,
    });
    Some(WarmCommand {
        cmd: Cmd { argv, env, exe },
        fallback,
        cwd: std::ffi::OsString::from_vec(cwd).into(),
        flags,
    })
}

/// A warm sandbox's command process's wait: reports ready on `ctl`, then
/// waits for the command and its fds (stdout, stderr, then stdin and the
/// gate as its flags say). `None` when the helper dropped this sandbox or
/// is gone (`ctl` closed), or sent something malformed.
fn await_command(ctl: &OwnedFd) -> Option<(WarmCommand, Vec<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, send, ControlMessageOwned, MsgFlags};
    send(ctl.as_raw_fd(), b"R", MsgFlags::MSG_NOSIGNAL).ok()?;
    // A helper that drops this sandbox or dies closes its end: recvmsg
    // then returns 0 bytes (its init goes with the helper anyway).
    let mut p = libc::pollfd {
        fd: ctl.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    while unsafe { libc::poll(&mut p, 1, -1) } < 0 {}
    let mut buf = vec![0u8; WARM_MSG_MAX];
    let mut cbuf = nix::cmsg_space!([RawFd; 4]);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<()>(
        ctl.as_raw_fd(),
        &mut iov,
        Some(&mut cbuf),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .ok()?;
    let mut got = Vec::new();
    for c in msg.cmsgs().ok()? {
        if let ControlMessageOwned::ScmRights(rs) = c {
            // SAFETY: the kernel just installed these fds for us.
            got.extend(
                rs.into_iter()
                    .map(|r| unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(r) }),
            );
        }
    }
    let n = msg.bytes;
    if n == 0
        || msg
            .flags
            .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC)
    {
        return None;
    }
    let c = decode_command(&buf[..n])?;
    let want = 2 + usize::from(c.flags & CMD_STDIN != 0) + usize::from(c.flags & CMD_GATE != 0);
    (got.len() == want).then_some((c, got))
}

fn report(fd: RawFd, rec: &[u8]) {
    let mut f = std::mem::ManuallyDrop::new(unsafe {
        // SAFETY: fd stays owned by the caller; ManuallyDrop avoids closing it.
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd)
    });
    let _ = f.write_all(rec);
}

fn fail(fd: RawFd, stage: &str, msg: &str) -> ! {
    let mut rec = Vec::with_capacity(stage.len() + msg.len() + 2);
    rec.push(b'E');
    rec.extend_from_slice(stage.as_bytes());
    rec.push(0);
    rec.extend_from_slice(msg.as_bytes());
    report(fd, &rec);
    // SAFETY: _exit is always safe.
    unsafe { libc::_exit(126) }
}

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Brings `lo` up in the new network namespace (netdevice(7), SIOCSIFFLAGS).
fn loopback_up() -> Result<(), String> {
    // SAFETY: plain socket/ioctl calls on a zeroed, NUL-terminated ifreq.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(os_err("socket"));
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            let e = os_err("SIOCGIFFLAGS lo");
            libc::close(s);
            return Err(e);
        }
        ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(s, libc::SIOCSIFFLAGS, &ifr) < 0 {
            let e = os_err("SIOCSIFFLAGS lo");
            libc::close(s);
            return Err(e);
        }
        libc::close(s);
    }
    Ok(())
}

/// The highest capability number of the running kernel
/// (`/proc/sys/kernel/cap_last_cap`, capabilities(7)); read once in the
/// helper, so each command's processes inherit the value instead of
/// reading procfs twice per spawn. 63 when unreadable (drop them all).
pub(crate) fn cap_last() -> libc::c_ulong {
    static LAST: std::sync::OnceLock<libc::c_ulong> = std::sync::OnceLock::new();
    *LAST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse::<libc::c_ulong>().ok())
            .unwrap_or(63)
    })
}

/// Drops every capability: bounding set, ambient set, then
/// effective/permitted/inheritable (capabilities(7)).
fn drop_caps() -> Result<(), String> {
    // SAFETY: prctl/capset with valid arguments.
    unsafe {
        let last = cap_last();
        for c in 0..=last {
            if libc::prctl(libc::PR_CAPBSET_DROP, c, 0, 0, 0) != 0
                && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
            {
                return Err(os_err("PR_CAPBSET_DROP"));
            }
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        #[repr(C)]
        struct Hdr {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        struct Data {
            eff: u32,
            prm: u32,
            inh: u32,
        }
        let hdr = Hdr {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let data = [
            Data {
                eff: 0,
                prm: 0,
                inh: 0,
            },
            Data {
                eff: 0,
                prm: 0,
                inh: 0,
            },
        ];
        if libc::syscall(libc::SYS_capset, &hdr as *const Hdr, data.as_ptr()) != 0 {
            return Err(os_err("capset"));
        }
    }
    Ok(())
}

/// The namespace's init. Never returns.
pub(crate) fn init_main(
    plan: &mut Plan,
    mut io: ChildIo,
    root_mode: bool,
    filters: &[BpfProgram],
) -> ! {
    let setup = io.setup_wr.as_raw_fd();
    // Wait until the helper wrote our uid/gid maps.
    let mut b = [0u8; 1];
    // SAFETY: read into a 1-byte buffer.
    let n = unsafe { libc::read(io.sync_rd.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
    if n != 1 {
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(125) }
    }
    drop(io.sync_rd);
    super::helper::trace("child: go");
    let srcs = match mounts::open_sources(&plan.ops) {
        Ok(s) => s,
        Err((stage, m)) => fail(setup, stage, &m),
    };
    if root_mode {
        // kuid 0 is unmapped here: become the mapped sandbox id. Capabilities
        // in this namespace stay (no 0 -> non-0 transition inside it).
        // SAFETY: plain id syscalls.
        let ok = unsafe {
            libc::setresgid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) == 0
                && libc::setresuid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) == 0
        };
        if !ok {
            fail(setup, "userns", &os_err("setresuid"));
        }
    }
    // Die with the helper. Set only now: a change of effective uid/gid
    // (the setres*id above) clears the parent-death signal (prctl(2),
    // PR_SET_PDEATHSIG). A helper that died before this call sent no
    // signal; it closed its end of the exit pipe first (exit_files runs
    // before exit_notify), so check that end once now, and keep watching
    // it while the command runs (see `wait_command`).
    // SAFETY: prctl with constant arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    if helper_gone(io.exit_wr.as_raw_fd()) {
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(0) }
    }
    if let Err(e) = nix::unistd::sethostname("warden") {
        fail(setup, "uts", &format!("sethostname: {e}"));
    }
    if plan.private_net {
        if let Err(e) = loopback_up() {
            fail(setup, "network", &e);
        }
    }
    super::helper::trace("child: lo up");
    if let Err((stage, m)) = mounts::build(&plan.ops, &srcs, 16 << 20) {
        fail(setup, stage, &m);
    }
    super::helper::trace("child: mounts + pivot");
    if let Err((stage, m)) = mounts::protect(&plan.workspace, &plan.protect) {
        fail(setup, stage, &m);
    }
    if let Err((stage, m)) = mounts::seal_root() {
        fail(setup, stage, &m);
    }
    drop(srcs);

    super::helper::trace("child: sealed");
    // The command process. In a warm sandbox (built ahead of its command)
    // it is forked and confined now, and waits for the command itself.
    let ctl = io.ctl.take();
    if ctl.is_none() && (io.stdout.is_none() || io.stderr.is_none()) {
        fail(setup, "stdio", "no stdout/stderr for the command");
    }
    // SAFETY: the process is single-threaded; the child only runs our code
    // until execve.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        fail(setup, "fork", &os_err("fork"));
    }
    if pid == 0 {
        drop(io.exit_wr);
        match (ctl, io.stdout, io.stderr) {
            (Some(ctl), ..) => warm_command_main(plan, io.setup_wr, ctl, filters),
            (None, Some(stdout), Some(stderr)) => {
                let stdio = (io.stdin, stdout, stderr);
                command_main(plan, io.setup_wr, stdio, io.gate, filters)
            }
            // Checked before the fork.
            _ => fail(setup, "stdio", "no stdout/stderr for the command"),
        }
    }
    drop((ctl, io.setup_wr, io.gate, io.stdin, io.stdout, io.stderr));
    // Init keeps nothing of the daemon's stdio (a terminal, a log).
    // SAFETY: dup2 onto our own standard fds.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            libc::close(null);
        }
    }
    // Nothing left for init to do but wait: no privileges, not dumpable.
    let _ = drop_caps();
    // SAFETY: prctl with constant arguments.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
    }
    wait_command(pid, io.exit_wr.as_raw_fd())
}

/// True when the helper's read end of the exit pipe `exit_wr` is closed
/// (the helper exited): poll(2) reports `POLLERR` on a pipe's write end
/// once no reader is left. Does not wait.
fn helper_gone(exit_wr: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd: exit_wr,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Init's last job: reap until the command (`pid`) exits, then kill and
/// reap everything left in the pid namespace, write the command's wait
/// status on `exit_wr` (the helper reports the command ended as soon as it
/// reads it) and exit, which ends the namespaces. Exits at once when the
/// helper is gone, so no command outlives the daemon even if the
/// parent-death signal was missed. SIGCHLD (blocked since the helper's start) interrupts the
/// poll through a signalfd.
fn wait_command(pid: libc::pid_t, exit_wr: RawFd) -> ! {
    let sfd = super::helper::sigchld_fd();
    loop {
        loop {
            let mut status = 0;
            // SAFETY: non-blocking waitpid on any child.
            let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if r == pid {
                super::helper::trace("init: command reaped");
                // Nothing of the command may outlive its report: kill what
                // it left (kill(2): -1 is every process of this pid
                // namespace but init) and reap it all, then report. The
                // helper answers at once; the namespaces are torn down
                // after, off the caller's path.
                // SAFETY: plain kill/waitpid/write/_exit calls.
                unsafe {
                    libc::kill(-1, libc::SIGKILL);
                    let mut st = 0;
                    while libc::waitpid(-1, &mut st, 0) > 0
                        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
                    {
                    }
                    let bytes = status.to_le_bytes();
                    libc::write(exit_wr, bytes.as_ptr().cast(), 4);
                    libc::_exit(0)
                }
            }
            if r == 0 {
                break;
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                // SAFETY: _exit is always safe.
                unsafe { libc::_exit(0) }
            }
        }
        let mut fds = [
            libc::pollfd {
                fd: exit_wr,
                events: 0,
                revents: 0,
            },
            libc::pollfd {
                fd: sfd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Without a signalfd, wake up now and then to reap.
        let timeout = if sfd < 0 { 50 } else { -1 };
        // SAFETY: valid pollfd array (a negative fd is ignored by poll).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if n > 0 && fds[0].revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            // The helper (so the daemon) is gone: end the namespace.
            // SAFETY: _exit is always safe.
            unsafe { libc::_exit(0) }
        }
        if sfd >= 0 && fds[1].revents != 0 {
            let mut buf = [0u8; 128];
            // SAFETY: draining the signalfd into a stack buffer.
            while unsafe { libc::read(sfd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
        }
    }
}

fn set_limit(res: libc::__rlimit_resource_t, v: u64) -> Result<(), String> {
    let l = libc::rlimit {
        rlim_cur: v,
        rlim_max: v,
    };
    // SAFETY: valid rlimit struct.
    if unsafe { libc::setrlimit(res, &l) } != 0 {
        return Err(os_err("setrlimit"));
    }
    Ok(())
}

/// The command process of a sandbox built on request. Never returns.
fn command_main(
    plan: &Plan,
    setup_wr: OwnedFd,
    (stdin, stdout, stderr): (Option<OwnedFd>, OwnedFd, OwnedFd),
    gate: Option<OwnedFd>,
    filters: &[BpfProgram],
) -> ! {
    let setup = setup_wr.as_raw_fd();
    super::helper::trace("cmd: forked");
    let null = confine(plan, setup, filters);
    attach(plan, setup, (stdin.or(null), stdout, stderr));
    execute(plan, setup_wr, gate)
}

/// The command process of a warm sandbox, forked and confined while the
/// sandbox waits: it then waits for the command on `ctl`, checks that the
/// host objects its mounts pin are still the same ones (see
/// [`pinned_mounts`]; read before and after the wait with the same
/// privileges), and goes on as a command built on request. Never returns.
fn warm_command_main(
    plan: &mut Plan,
    setup_wr: OwnedFd,
    ctl: OwnedFd,
    filters: &[BpfProgram],
) -> ! {
    let setup = setup_wr.as_raw_fd();
    super::helper::trace("cmd: forked (warm)");
    let null = confine(plan, setup, filters);
    let pinned = pinned_mounts(plan);
    let Some((c, mut fds)) = await_command(&ctl) else {
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(0) }
    };
    drop(ctl);
    // The host deleting a pinned object since (even recreating it with the
    // same inode number) detached our mount on it: then this sandbox no
    // longer protects what a fresh one would. The helper builds one on
    // request instead.
    if pinned_mounts(plan) != pinned {
        fail(
            setup,
            STALE,
            "a protected path or mask changed since the sandbox was built",
        );
    }
    (plan.cmd, plan.fallback, plan.cwd) = (c.cmd, c.fallback, c.cwd);
    let gate = (c.flags & CMD_GATE != 0).then(|| fds.pop()).flatten();
    let stdin = (c.flags & CMD_STDIN != 0).then(|| fds.pop()).flatten();
    let (Some(stderr), Some(stdout)) = (fds.pop(), fds.pop()) else {
        fail(setup, "stdio", "no stdout/stderr for the command")
    };
    super::helper::trace("cmd: warm command");
    attach(plan, setup, (stdin.or(null), stdout, stderr));
    execute(plan, setup_wr, gate)
}

/// Confines this process as the command's: a new session, default signal
/// dispositions and an empty mask, rlimits, no core dumps, umask 022, every
/// capability dropped, `no_new_privs`, Landlock (refused when the policy
/// requires full enforcement and the kernel gives less; the enforcement is
/// reported on `setup` as `L`), seccomp last. Returns `/dev/null` opened
/// for the command's stdin (before Landlock), or `None` when it cannot be.
/// Failures are reported on `setup` and end the process.
fn confine(plan: &Plan, setup: RawFd, filters: &[BpfProgram]) -> Option<OwnedFd> {
    // SAFETY: these calls only touch this process's own state.
    unsafe {
        if libc::setsid() < 0 {
            fail(setup, "setsid", &os_err("setsid"));
        }
        // Default signal dispositions and an empty mask for the command.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        for s in 1..32 {
            if s != libc::SIGKILL && s != libc::SIGSTOP {
                libc::signal(s, libc::SIG_DFL);
            }
        }
    }
    // SAFETY: open(2) of a constant path; a fresh fd or -1.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // SAFETY: a fresh fd owned here.
    let null =
        (null >= 0).then(|| unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(null) });
    let l = &plan.limits;
    let limits: [(libc::__rlimit_resource_t, u64); 5] = [
        (libc::RLIMIT_NPROC, l.nproc),
        (libc::RLIMIT_NOFILE, l.nofile),
        (libc::RLIMIT_FSIZE, l.fsize_bytes),
        (libc::RLIMIT_CPU, l.cpu_seconds),
        (libc::RLIMIT_DATA, l.data_bytes),
    ];
    for (r, v) in limits {
        if let Err(e) = set_limit(r, v) {
            fail(setup, "rlimits", &e);
        }
    }
    // No core dumps of sandboxed processes.
    let _ = set_limit(libc::RLIMIT_CORE, 0);
    // SAFETY: umask only changes this process's file mode mask.
    unsafe { libc::umask(0o022) };
    super::helper::trace("cmd: session, signals, rlimits");
    if let Err(e) = drop_caps() {
        fail(setup, "capabilities", &e);
    }
    super::helper::trace("cmd: caps dropped");
    // SAFETY: prctl with constant arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        fail(setup, "no_new_privs", &os_err("PR_SET_NO_NEW_PRIVS"));
    }
    let enforcement = match landlock_rules::restrict(&plan.rules) {
        Ok(e) => e,
        Err(e) => fail(setup, "landlock", &e),
    };
    if plan.require_full_landlock && enforcement != Enforcement::Full {
        fail(
            setup,
            "refused",
            &format!(
                "policy requires full Landlock enforcement, this kernel gives {}",
                enforcement.as_str()
            ),
        );
    }
    super::helper::trace("cmd: landlock");
    if let Err(e) = super::seccomp::install(filters) {
        fail(setup, "seccomp", &e);
    }
    super::helper::trace("cmd: seccomp");
    report(setup, &[b'L', enforcement as u8]);
    null
}

/// Gives the command its stdio (`stdin`: `None` when `/dev/null` could not
/// be opened) and working directory, and marks every other fd
/// close-on-exec (the setup pipe too). Failures are reported on `setup`
/// and end the process.
fn attach(plan: &Plan, setup: RawFd, (stdin, stdout, stderr): (Option<OwnedFd>, OwnedFd, OwnedFd)) {
    // SAFETY: dup2 onto this process's own standard fds.
    unsafe {
        let input = stdin.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
        if input < 0
            || libc::dup2(input, 0) < 0
            || libc::dup2(stdout.as_raw_fd(), 1) < 0
            || libc::dup2(stderr.as_raw_fd(), 2) < 0
        {
            fail(setup, "stdio", &os_err("stdio"));
        }
    }
    drop((stdin, stdout, stderr));
    if let Err(e) = std::env::set_current_dir(&plan.cwd) {
        fail(setup, "cwd", &format!("chdir {}: {e}", plan.cwd.display()));
    }
    // SAFETY: close_range(2) with the CLOEXEC flag only sets flags.
    unsafe {
        // Everything but 0-2 closes on execve (the setup pipe too).
        if libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            4u32, /* CLOSE_RANGE_CLOEXEC */
        ) != 0
        {
            fail(setup, "fds", &os_err("close_range"));
        }
    }
    super::helper::trace("cmd: stdio, cwd, fds");
}

/// Executes the command: at once, or (with a `gate`) once the gate opens,
/// after reporting `G` on the setup pipe. Never returns.
fn execute(plan: &Plan, setup_wr: OwnedFd, gate: Option<OwnedFd>) -> ! {
    let setup = setup_wr.as_raw_fd();
    let Some(gate) = gate else {
        let e = exec_all(plan);
        fail(setup, "execve", &e)
    };
    // Confined and ready: wait at the gate. The helper has its answer (it
    // stops reading at `G`), so nothing more goes on the setup pipe.
    report(setup, b"G");
    drop(setup_wr);
    let mut b = [0u8; 1];
    loop {
        // SAFETY: read into a 1-byte stack buffer.
        let n = unsafe { libc::read(gate.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        if n == 1 {
            break;
        }
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        // The daemon dropped the gate: the step does not run.
        // SAFETY: _exit is always safe.
        unsafe { libc::_exit(125) }
    }
    drop(gate);
    super::helper::trace("cmd: through the gate");
    let e = exec_all(plan);
    // Past the gate the command's own stderr is the place to say why, as
    // a shell would (126: cannot execute, 127: not found).
    let line = format!("warden: {e}\n");
    // SAFETY: write(2) of a local buffer to the command's stderr; _exit.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::_exit(if e.ends_with("command not found") {
            127
        } else {
            126
        })
    }
}

/// Executes `plan`'s command, trying each candidate in `PATH` order, then
/// its fallback's. Returns only when nothing could be executed, with what
/// to report (`PROGRAM: command not found` or the execve(2) error).
fn exec_all(plan: &Plan) -> String {
    let first = exec_candidates(&plan.cmd);
    match &plan.fallback {
        Some(f) => match exec_candidates(f) {
            e if e.ends_with("command not found") => first,
            e => format!("{first} (fallback {e})"),
        },
        None => first,
    }
}

/// Tries `cmd`'s candidates in order, as bash's `PATH` search does: a
/// candidate that is not an executable regular file (absent: `ENOENT`,
/// `ENOTDIR`) moves on to the next; the first that is one is the program,
/// whatever execve(2) then says (`ENOEXEC`: a script without `#!`; `ENOENT`
/// from a missing `#!` interpreter or loader; `EACCES`, `ETXTBSY`), never a
/// later one. Returns the error to report when nothing was executed.
fn exec_candidates(cmd: &Cmd) -> String {
    let mut argv: Vec<*const libc::c_char> = cmd.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = cmd.env.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    // The error of the program found, or of the last candidate that exists.
    let mut last: Option<(i32, bool)> = None;
    for exe in &cmd.exe {
        // SAFETY: NUL-terminated arrays of valid C strings.
        unsafe { libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if e == libc::ENOEXEC || runnable_file(exe) {
            last = Some((e, true));
            break;
        }
        if e != libc::ENOENT && e != libc::ENOTDIR {
            last = Some((e, false));
        }
    }
    let a0 = cmd.argv[0].to_string_lossy();
    match last {
        None => format!("{a0}: command not found"),
        Some((libc::ENOENT, true)) => {
            format!("{a0}: cannot execute: its #! interpreter or ELF loader was not found")
        }
        Some((e, _)) => format!("{a0}: {}", std::io::Error::from_raw_os_error(e)),
    }
}

/// Whether `exe` is a regular file this process may execute (access(2)
/// `X_OK`): what bash's `PATH` search picks.
fn runnable_file(exe: &CString) -> bool {
    // SAFETY: stat/access on a NUL-terminated path into a local buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::stat(exe.as_ptr(), &mut st) == 0
            && st.st_mode & libc::S_IFMT == libc::S_IFREG
            && libc::access(exe.as_ptr(), libc::X_OK) == 0
    }
}

/// Whether the setup pipe's records `buf` say the command is confined and
/// waits at its gate: `L <enforcement>` then `G` (nothing can follow).
pub(crate) fn at_gate(buf: &[u8]) -> bool {
    matches!(buf, [b'L', _, b'G'])
}

/// Decodes `L`/`E` records read from the setup pipe (a trailing `G` is
/// [`at_gate`]'s).
pub(crate) fn parse_setup(buf: &[u8]) -> Result<Enforcement, (String, String)> {
    if let Some(rest) = buf.iter().position(|b| *b == b'E').map(|i| &buf[i + 1..]) {
        let (stage, msg) = match rest.iter().position(|b| *b == 0) {
            Some(z) => (&rest[..z], &rest[z + 1..]),
            None => (rest, &[][..]),
        };
        return Err((
            String::from_utf8_lossy(stage).into_owned(),
            String::from_utf8_lossy(msg).into_owned(),
        ));
    }
    match buf {
        [b'L', e, ..] => Ok(match *e {
            x if x == Enforcement::Full as u8 => Enforcement::Full,
            x if x == Enforcement::Partial as u8 => Enforcement::Partial,
            _ => Enforcement::None,
        }),
        _ => Err((
            "setup".into(),
            "sandbox set-up ended without a report".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_records_decode() {
        assert_eq!(
            parse_setup(&[b'L', Enforcement::Full as u8]),
            Ok(Enforcement::Full)
        );
        assert_eq!(
            parse_setup(&[b'L', Enforcement::Partial as u8]),
            Ok(Enforcement::Partial)
        );
        let e = parse_setup(b"Emount\0bind /usr: EINVAL").unwrap_err();
        assert_eq!(e, ("mount".to_string(), "bind /usr: EINVAL".to_string()));
        // A failure after the Landlock report wins over the report.
        let mut b = vec![b'L', 0];
        b.extend_from_slice(b"Eseccomp\0filter 1: EINVAL");
        assert_eq!(parse_setup(&b).unwrap_err().0, "seccomp");
        // Nothing at all (the child died before reporting) is an error.
        assert!(parse_setup(b"").is_err());
        // Waiting at the gate: confined, with the enforcement reported.
        let g = [b'L', Enforcement::Partial as u8, b'G'];
        assert!(at_gate(&g));
        assert_eq!(parse_setup(&g), Ok(Enforcement::Partial));
        assert!(!at_gate(&g[..2]));
        assert!(!at_gate(b"Eexecve\0G"));
    }
}
