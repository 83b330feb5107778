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

/// Compiles the four stacked filters listed in the module docs. Done in the
/// helper once; the programs are plain data.
/// Also returns, per program, the syscall numbers it can answer with
/// something other than `ALLOW` (seccompiler answers the mismatch action,
/// here `ALLOW`, for every number without rules).
pub(crate) fn compile_stacked() -> Result<(Vec<BpfProgram>, Vec<Vec<u32>>), String> {
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

    let nrs = |m: &BTreeMap<i64, Vec<SeccompRule>>| m.keys().map(|n| *n as u32).collect();
    let handled = vec![Vec::new(), nrs(&deny), nrs(&nosys), nrs(&sock)];
    let progs = vec![
        arch_guard(),
        build(deny, libc::EPERM)?,
        build(nosys, libc::ENOSYS)?,
        build(sock, libc::EAFNOSUPPORT)?,
    ];
    Ok((progs, handled))
}

/// The filters the helper installs: the four of [`compile_stacked`] merged
/// into one program with [`merge`] (same answer for every syscall, one
/// program for the kernel to check, JIT and run, and a cheap action cache).
pub(crate) fn compile() -> Result<Vec<BpfProgram>, String> {
    let (progs, handled) = compile_stacked()?;
    Ok(vec![merge(&progs, &handled)?])
}

const BPF_CLASS_MASK: u16 = 0x07;
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JA: u16 = 0x05; // BPF_JMP | BPF_JA
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
/// Largest program the kernel accepts (`BPF_MAXINSNS`).
const BPF_MAXINSNS: usize = 4096;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// Merges stacked filters into one program with the same result for every
/// input, or refuses (`Err`) when that cannot be shown structurally.
///
/// The kernel runs stacked filters and keeps the most severe action
/// (seccomp(2), "Filter return values"). Here the first program is the
/// arch/x32 guard and the others are seccompiler programs that each answer
/// `ALLOW` except for their own, pairwise disjoint, syscall numbers (or a
/// foreign architecture, which the guard already kills). So at most one
/// program says anything but `ALLOW`, and running them one after the other
/// — each `RET ALLOW` turned into a jump to the next program — gives the
/// same answer.
///
/// In front goes a dispatcher: a native, non-x32 syscall number that no
/// program handles is allowed after a binary search (a handful of
/// instructions); everything else runs the chained programs. The kernel's
/// per-syscall action cache (`seccomp_cache_prepare`, which emulates the
/// filter for every syscall number at install time) then costs a few steps
/// per number instead of a walk through every chain.
pub(crate) fn merge(progs: &[BpfProgram], handled_by: &[Vec<u32>]) -> Result<BpfProgram, String> {
    let allow = libc::SECCOMP_RET_ALLOW;
    if progs.len() != handled_by.len() || progs.is_empty() || !handled_by[0].is_empty() {
        return Err("merge: the first program must be the guard".into());
    }
    let mut handled: Vec<u32> = Vec::new();
    for (i, h) in handled_by.iter().enumerate() {
        if h.iter().any(|n| handled.contains(n)) {
            return Err(format!("filter {i} overlaps an earlier one"));
        }
        handled.extend(h);
    }
    handled.sort_unstable();
    // The chained body.
    let mut body: Vec<sock_filter> = Vec::new();
    for (i, p) in progs.iter().enumerate() {
        let start = body.len();
        let last = i + 1 == progs.len();
        for (pc, ins) in p.iter().enumerate() {
            let class = ins.code & BPF_CLASS_MASK;
            if class == BPF_RET_K & BPF_CLASS_MASK && ins.code != BPF_RET_K {
                return Err(format!("filter {i}: return of a register"));
            }
            if ins.code == BPF_RET_K && ins.k == allow && !last {
                // Fall through to the next program.
                body.push(stmt(BPF_JA, (p.len() - pc - 1) as u32));
            } else {
                body.push(ins.clone());
            }
        }
        debug_assert_eq!(body.len() - start, p.len());
    }
    // The dispatcher: arch, x32 bit, then a search over `handled`.
    let mut pre: Vec<sock_filter> = vec![
        stmt(BPF_LD_W_ABS, 4), // seccomp_data.arch
        // Foreign arch: to the body (its guard kills).
        sock_filter {
            code: BPF_JEQ_K,
            jt: 0,
            jf: u8::MAX, // patched below
            k: AUDIT_ARCH,
        },
        stmt(BPF_LD_W_ABS, 0), // seccomp_data.nr
        sock_filter {
            code: BPF_JGE_K,
            jt: u8::MAX, // x32 numbers: to the body (EPERM); patched below
            jf: 0,
            k: X32_SYSCALL_BIT,
        },
    ];
    // Search tree, as (instructions, jumps to the body to patch).
    fn tree(nrs: &[u32], out: &mut Vec<sock_filter>, to_body: &mut Vec<(usize, bool)>) {
        match nrs.len() {
            0 => out.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW)),
            1 => {
                to_body.push((out.len(), true));
                out.push(sock_filter {
                    code: BPF_JEQ_K,
                    jt: 0,
                    jf: 0,
                    k: nrs[0],
                });
                out.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW));
            }
            _ => {
                let mid = nrs.len() / 2;
                let at = out.len();
                out.push(sock_filter {
                    code: BPF_JGE_K,
                    jt: 0,
                    jf: 0,
                    k: nrs[mid],
                });
                tree(&nrs[..mid], out, to_body);
                let jt = out.len() - at - 1;
                out[at].jt = u8::try_from(jt).unwrap_or(u8::MAX);
                tree(&nrs[mid..], out, to_body);
            }
        }
    }
    let mut to_body = vec![(1usize, false), (3usize, true)];
    tree(&handled, &mut pre, &mut to_body);
    let body_at = pre.len();
    for (at, on_true) in to_body {
        let d = body_at - at - 1;
        let d = u8::try_from(d).map_err(|_| "dispatcher too long for a short jump".to_string())?;
        if on_true {
            pre[at].jt = d;
        } else {
            pre[at].jf = d;
        }
    }
    // Every tree jump must have fit in 8 bits.
    if pre
        .iter()
        .any(|i| i.code == BPF_JGE_K && (i.jt == u8::MAX || i.jf == u8::MAX))
    {
        return Err("dispatcher too long for a short jump".into());
    }
    pre.extend(body);
    if pre.len() > BPF_MAXINSNS {
        return Err(format!(
            "merged filter too long ({} instructions)",
            pre.len()
        ));
    }
    Ok(pre)
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
        let (f, handled) = compile_stacked().unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(handled.len(), 4);
        assert!(f.iter().all(|p| !p.is_empty() && p.len() < 4096));
        let m = compile().unwrap();
        assert_eq!(m.len(), 1);
        assert!(m[0].len() < BPF_MAXINSNS);
    }

    /// A classic-BPF interpreter for the opcodes seccomp programs use
    /// (kernel `net/core/filter.c`, `seccomp_check_filter`). Panics on any
    /// other opcode, so a program using one fails the test.
    fn run(prog: &[sock_filter], data: &[u8; 64]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = &prog[pc];
            pc += 1;
            match i.code {
                0x20 => {
                    let k = i.k as usize;
                    a = u32::from_le_bytes(data[k..k + 4].try_into().unwrap());
                }
                0x54 => a &= i.k, // ALU AND K
                0x44 => a |= i.k, // ALU OR K
                0x05 => pc += i.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let t = match i.code {
                        0x15 => a == i.k,
                        0x25 => a > i.k,
                        0x35 => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    pc += if t { i.jt } else { i.jf } as usize;
                }
                0x06 => return i.k,
                c => panic!("opcode {c:#x} not handled by the test interpreter"),
            }
        }
    }

    /// seccomp(2): stacked filters all run; the most severe action wins,
    /// the most recently installed one among equals
    /// (`seccomp_run_filters`).
    fn run_stacked(progs: &[BpfProgram], data: &[u8; 64]) -> u32 {
        let act = |r: u32| (r & 0xffff_0000) as i32;
        let mut ret = libc::SECCOMP_RET_ALLOW;
        for p in progs.iter().rev() {
            let cur = run(p, data);
            if act(cur) < act(ret) {
                ret = cur;
            }
        }
        ret
    }

    fn data(arch: u32, nr: u32, args: [u64; 3]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_le_bytes());
        d[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        d
    }

    /// The merged program answers exactly as the four stacked filters, for
    /// every syscall number (native, x32, foreign architectures) and the
    /// argument values the rules look at, and blocks what it must.
    #[test]
    fn merged_filter_equals_the_stacked_filters() {
        let (progs, handled) = compile_stacked().unwrap();
        let merged = merge(&progs, &handled).unwrap();
        let mut vals: Vec<u64> = vec![
            0,
            1,
            2,
            3,
            5,
            9,
            10,
            11,
            16,
            17,
            0x11,
            libc::SOCK_STREAM as u64 | libc::SOCK_CLOEXEC as u64,
            libc::SOCK_RAW as u64 | libc::SOCK_NONBLOCK as u64,
            libc::TIOCSTI as u64,
            libc::TIOCLINUX as u64,
            libc::TIOCSTI as u64 | 1 << 32,
            libc::TIOCGWINSZ as u64,
            libc::IPPROTO_MPTCP as u64,
            libc::IPPROTO_SCTP as u64,
            libc::IPPROTO_TCP as u64,
            (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64,
            libc::SIGCHLD as u64,
            1 << 32,
            u64::MAX,
        ];
        for f in NS_FLAGS {
            vals.push(f);
            vals.push(f | libc::SIGCHLD as u64);
        }
        let all: Vec<u32> = handled.iter().flatten().copied().collect();
        let mut nrs: Vec<u32> = (0..600).collect();
        nrs.extend((0..600).map(|n| n | X32_SYSCALL_BIT));
        nrs.extend([0x3fff_ffff, 0x7fff_ffff, 0xffff_ffff]);
        let archs = [AUDIT_ARCH, 0x4000_0003, 0xc000_00b7, 0];
        let mut checked = 0u64;
        for arch in archs {
            for &nr in &nrs {
                let mut argsets: Vec<[u64; 3]> = vec![[0, 0, 0], [u64::MAX, 3, 262]];
                if arch == AUDIT_ARCH && all.contains(&nr) {
                    for &a in &vals {
                        for &b in &vals {
                            argsets.push([a, b, 0]);
                            if nr == libc::SYS_socket as u32 {
                                for &c in &vals {
                                    argsets.push([a, b, c]);
                                }
                            }
                        }
                    }
                }
                for args in argsets {
                    let d = data(arch, nr, args);
                    let (want, got) = (run_stacked(&progs, &d), run(&merged, &d));
                    assert_eq!(
                        want, got,
                        "arch {arch:#x} nr {nr:#x} args {args:x?}: stacked {want:#x}, merged {got:#x}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
        // And it does block: a sample of what the attack suite relies on.
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let n = |nr: libc::c_long| nr as u32;
        let r = |nr, args| run(&merged, &data(AUDIT_ARCH, nr, args));
        assert_eq!(r(n(libc::SYS_ptrace), [0, 0, 0]), eperm);
        assert_eq!(
            r(n(libc::SYS_unshare), [libc::CLONE_NEWUSER as u64, 0, 0]),
            eperm
        );
        assert_eq!(r(n(libc::SYS_ioctl), [0, libc::TIOCSTI as u64, 0]), eperm);
        assert_eq!(
            r(n(libc::SYS_clone3), [0, 0, 0]),
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
        assert_eq!(
            r(n(libc::SYS_socket), [libc::AF_PACKET as u64, 3, 0]),
            libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32
        );
        assert_eq!(r(n(libc::SYS_read), [0, 0, 0]), libc::SECCOMP_RET_ALLOW);
        assert_eq!(r(n(libc::SYS_read) | X32_SYSCALL_BIT, [0, 0, 0]), eperm);
        assert_eq!(
            run(&merged, &data(0x4000_0003, 1, [0; 3])),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }

    #[test]
    fn arch_guard_checks_arch_then_x32_bit() {
        let g = arch_guard();
        assert_eq!(g[1].k, AUDIT_ARCH);
        assert_eq!(g[4].k, X32_SYSCALL_BIT);
        assert_eq!(g[5].k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    }
}
