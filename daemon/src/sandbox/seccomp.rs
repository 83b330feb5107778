//! The seccomp-bpf filters installed last, right before `execve`
//! (seccomp(2), kernel `Documentation/userspace-api/seccomp_filter.rst`).
//!
//! Four stacked filters (the kernel applies the most restrictive result):
//! 1. an architecture and x32 guard (hand-written BPF: seccompiler has none),
//! 2. a deny list answering `EPERM`,
//! 3. `ENOSYS` for `clone3` and io_uring, so libc and runtimes fall back,
//! 4. `EAFNOSUPPORT` for socket families and kinds outside the allow list.
//!
//! The full list with the reason for every entry is in the module docs of
//! [`super`] ("seccomp deny list").

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000;

/// Bit set in every x32 syscall number (`__X32_SYSCALL_BIT`).
pub(crate) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Namespace-creating `clone`/`unshare` flags.
pub(crate) const NS_FLAGS: [u64; 8] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME (unshare only; in clone() this bit is CSIGNAL)
];

/// Syscalls denied outright with `EPERM`.
const DENY: &[(&str, libc::c_long)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("open_tree_attr", 467),
    ("setns", libc::SYS_setns),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", 443),
];

/// Syscalls answered with `ENOSYS` so callers take their fallback path.
const NOSYS: &[(&str, libc::c_long)] = &[
    ("clone3", libc::SYS_clone3),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
];

/// Names of every syscall the filters touch (for `warden doctor`).
pub fn denied_syscalls() -> Vec<&'static str> {
    let mut v: Vec<&str> = DENY.iter().chain(NOSYS).map(|(n, _)| *n).collect();
    v.extend([
        "clone (namespace flags)",
        "unshare (namespace flags)",
        "ioctl (TIOCSTI, TIOCLINUX)",
        "socket (families, raw, packet, MPTCP, SCTP)",
    ]);
    v
}

fn cond(arg: u8, len: Len, op: Op, val: u64) -> Result<SeccompRule, String> {
    let c = Cond::new(arg, len, op, val).map_err(|e| e.to_string())?;
    SeccompRule::new(vec![c]).map_err(|e| e.to_string())
}

/// The x32 / foreign-architecture guard. Foreign architecture: kill the
/// process (no legitimate command switches ABI inside the sandbox); x32
/// numbers on the native arch: `EPERM`.
fn arch_guard() -> BpfProgram {
    const LD_W_ABS: u16 = 0x00 | 0x00 | 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let st = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jmp = |code, k, jt, jf| sock_filter { code, jt, jf, k };
    let _ = X32_SYSCALL_BIT;
    vec![
        st(LD_W_ABS, 4),              // seccomp_data.arch
        jmp(JEQ_K, AUDIT_ARCH, 1, 0), // native: go on
        st(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        st(LD_W_ABS, 0),                   // seccomp_data.nr
        jmp(JGE_K, X32_SYSCALL_BIT, 0, 1), // x32 bit set?
        st(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        st(RET_K, libc::SECCOMP_RET_ALLOW),
    ]
}

fn build(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, String> {
    let f = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        ARCH,
    )
    .map_err(|e| e.to_string())?;
    f.try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// Compiles all filters. Done in the helper once; the programs are plain data.
pub(crate) fn compile() -> Result<Vec<BpfProgram>, String> {
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in DENY {
        deny.insert(*nr, vec![]);
    }
    // clone(flags, ...) and unshare(flags): any namespace flag.
    let ns_rules = |arg| -> Result<Vec<SeccompRule>, String> {
        NS_FLAGS
            .iter()
            .filter(|f| arg == 1 || **f != 0x80)
            .map(|f| cond(0, Len::Qword, Op::MaskedEq(*f), *f))
            .collect()
    };
    deny.insert(libc::SYS_clone, ns_rules(0)?);
    deny.insert(libc::SYS_unshare, ns_rules(1)?);
    // ioctl(fd, cmd): the kernel compares cmd as 32 bits, so do we.
    deny.insert(
        libc::SYS_ioctl,
        vec![
            cond(1, Len::Dword, Op::Eq, libc::TIOCSTI as u64)?,
            cond(1, Len::Dword, Op::Eq, libc::TIOCLINUX as u64)?,
        ],
    );

    let mut nosys: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in NOSYS {
        nosys.insert(*nr, vec![]);
    }

    // socket(domain, type, protocol): allow only AF_UNIX, AF_INET, AF_INET6;
    // never raw or packet sockets, MPTCP or SCTP.
    let fam = |lo: u64, hi: u64| -> Result<SeccompRule, String> {
        SeccompRule::new(vec![
            Cond::new(0, Len::Dword, Op::Ge, lo).map_err(|e| e.to_string())?,
            Cond::new(0, Len::Dword, Op::Le, hi).map_err(|e| e.to_string())?,
        ])
        .map_err(|e| e.to_string())
    };
    let socket_rules = vec![
        cond(0, Len::Dword, Op::Eq, 0)?,                     // AF_UNSPEC
        fam(3, 9)?,                                          // AX25 .. X25 (between INET and INET6)
        cond(0, Len::Dword, Op::Gt, libc::AF_INET6 as u64)?, // NETLINK, PACKET, ...
        cond(1, Len::Dword, Op::MaskedEq(0xf), libc::SOCK_RAW as u64)?,
        cond(1, Len::Dword, Op::MaskedEq(0xf), 10 /* SOCK_PACKET */)?,
        cond(2, Len::Dword, Op::Eq, libc::IPPROTO_MPTCP as u64)?,
        cond(2, Len::Dword, Op::Eq, libc::IPPROTO_SCTP as u64)?,
    ];
    let mut sock: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    sock.insert(libc::SYS_socket, socket_rules);

    Ok(vec![
        arch_guard(),
        build(deny, libc::EPERM)?,
        build(nosys, libc::ENOSYS)?,
        build(sock, libc::EAFNOSUPPORT)?,
    ])
}

/// Installs the compiled filters in the calling thread (needs
/// `no_new_privs`). Errors name the filter index.
pub(crate) fn install(filters: &[BpfProgram]) -> Result<(), String> {
    for (i, f) in filters.iter().enumerate() {
        seccompiler::apply_filter(f).map_err(|e| format!("filter {i}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile() {
        let f = compile().unwrap();
        assert_eq!(f.len(), 4);
        assert!(f.iter().all(|p| !p.is_empty() && p.len() < 4096));
    }

    #[test]
    fn arch_guard_checks_arch_then_x32_bit() {
        let g = arch_guard();
        assert_eq!(g[1].k, AUDIT_ARCH);
        assert_eq!(g[4].k, X32_SYSCALL_BIT);
        assert_eq!(g[5].k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    }
}
