//! Small arbitrary classic-BPF seccomp filters: the project's checker and
//! interpreter (`nodeproof_seccomp::cbpf`) against the running kernel. Each
//! input starts a child (a process sharing our memory) that makes one syscall, loads the filter
//! (`PR_SET_NO_NEW_PRIVS` + `seccomp(SECCOMP_SET_MODE_FILTER)`) behind a
//! guard that lets its other syscalls through, makes the same syscall again
//! and reports what it got; the parent predicts the same
//! from `validate` and `run`. Slower than the others by nature: one process
//! per input.

#![no_main]

use std::sync::atomic::{AtomicI64, Ordering};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nodeproof_seccomp::cbpf::{op, run, validate, SeccompData, SockFilter};

/// Opcodes seccomp accepts, and a few it refuses, so that most programs load.
const CODES: [u16; 36] = [
    op::LD_W_ABS,
    op::LD_IMM,
    op::LDX_IMM,
    op::LD_MEM,
    op::LDX_MEM,
    op::ST,
    op::STX,
    0x80, // LD W LEN
    0x81, // LDX W LEN
    0x04, // ADD K
    0x0c, // ADD X
    0x14, // SUB K
    0x1c, // SUB X
    0x24, // MUL K
    op::ALU_DIV_K,
    op::ALU_DIV_X,
    0x44, // OR K
    op::ALU_AND_K,
    op::ALU_LSH_K,
    0x6c, // LSH X
    0x74, // RSH K
    0x7c, // RSH X
    0x84, // NEG
    0xa4, // XOR K
    0xac, // XOR X
    op::ALU_MOD_K,
    op::JA,
    op::JEQ_K,
    op::JEQ_X,
    op::JGT_K,
    0x2d, // JGT X
    op::JGE_K,
    op::JSET_K,
    0x4d, // JSET X
    op::TAX,
    op::TXA,
];

/// Return values: every action, with and without data.
const RETS: [u32; 12] = [
    0x0000_0000, // KILL_THREAD
    0x8000_0000, // KILL_PROCESS
    0x0003_0000, // TRAP
    0x0005_0000, // ERRNO
    0x7ff0_0000, // TRACE
    0x7ffc_0000, // LOG
    0x7fff_0000, // ALLOW
    0x7fc0_0000, // USER_NOTIF
    0x0001_0000, // no such action
    0x7fff_ffff, // ALLOW with data
    0x0005_0fff, // ERRNO 4095
    0x0005_ffff, // ERRNO above MAX_ERRNO
];

#[derive(Arbitrary, Debug, Clone, Copy)]
enum CodeIn {
    Known(u8),
    Ret(bool),
    Raw(u16),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum KIn {
    /// A `seccomp_data` offset (an argument word, nr or arch), or a slot.
    Offset(u8),
    Ret(u8, u16),
    Small(u8),
    Any(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct InsIn {
    code: CodeIn,
    jt: u8,
    jf: u8,
    k: KIn,
}

#[derive(Arbitrary, Debug, Clone)]
struct Input {
    program: Vec<InsIn>,
    /// Whether a `ret` is appended (most programs then end as the kernel requires).
    close: Option<u8>,
    syscall: u8,
    args: [u64; 6],
}

/// Syscalls whose result does not depend on their arguments and that change
/// nothing: the child measures what each returns without the filter. The
/// x32 numbers run only where the kernel has x32; the filter sees the bit
/// either way; 999 is no syscall (ENOSYS).
const SYSCALLS: [i64; 7] = [
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_getpgrp,
    libc::SYS_gettid,
    0x4000_0000 | libc::SYS_getpid,
    0x4000_0000 | libc::SYS_getppid,
    999,
];

const MAX_PROGRAM: usize = 24;

fn program(input: &Input) -> Vec<SockFilter> {
    let mut p: Vec<SockFilter> = input
        .program
        .iter()
        .take(MAX_PROGRAM)
        .map(|i| {
            let code = match i.code {
                CodeIn::Known(c) => CODES[usize::from(c) % CODES.len()],
                CodeIn::Ret(true) => op::RET_K,
                CodeIn::Ret(false) => op::RET_A,
                CodeIn::Raw(c) => c,
            };
            let k = match i.k {
                KIn::Offset(o) => {
                    // The instruction pointer (offsets 8 and 12) is where
                    // libc's syscall() is in the child: not known to the
                    // prediction, so loads of it read the arch word instead.
                    let o = u32::from(o % 16) * 4;
                    if o == 8 || o == 12 {
                        4
                    } else {
                        o
                    }
                }
                KIn::Ret(r, data) => RETS[usize::from(r) % RETS.len()] | u32::from(data % 8),
                KIn::Small(n) => u32::from(n),
                KIn::Any(n) => n,
            };
            let k = if code == op::LD_W_ABS && (k == 8 || k == 12) {
                4
            } else {
                k
            };
            SockFilter {
                code,
                jt: i.jt % 8,
                jf: i.jf % 8,
                k,
            }
        })
        .collect();
    if let Some(r) = input.close {
        p.push(SockFilter {
            code: op::RET_K,
            jt: 0,
            jf: 0,
            k: RETS[usize::from(r) % RETS.len()],
        });
    }
    p
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The kernel refused to load the filter with this errno.
    Refused(i32),
    /// The syscall returned this raw value (`-errno` on failure).
    Returned(i64),
    /// SIGSYS reached the child's handler, with this `si_errno` (the action's data).
    Trapped(i32),
    /// The child died of this signal.
    Killed(i32),
}

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const MAX_ERRNO: u32 = 4095;

/// What the kernel does with the filter's return value `ret` for a syscall
/// that returns `natural` when it runs: `__seccomp_filter` in
/// kernel/seccomp.c (6.x).
fn kernel_effect(ret: u32, natural: i64) -> Outcome {
    let data = ret & 0xffff;
    match ret & 0xffff_0000 {
        // SECCOMP_RET_ERRNO: "Set low-order bits as an errno, capped at MAX_ERRNO."
        0x0005_0000 => Outcome::Returned(-i64::from(data.min(MAX_ERRNO))),
        // SECCOMP_RET_TRAP: SIGSYS, si_errno = data.
        0x0003_0000 => Outcome::Trapped(data as i32),
        // SECCOMP_RET_TRACE without a tracer: -ENOSYS.
        0x7ff0_0000 => Outcome::Returned(-i64::from(libc::ENOSYS)),
        // SECCOMP_RET_USER_NOTIF with no listener (none was asked for): -ENOSYS.
        0x7fc0_0000 => Outcome::Returned(-i64::from(libc::ENOSYS)),
        // SECCOMP_RET_LOG and SECCOMP_RET_ALLOW: the syscall runs.
        0x7ffc_0000 | 0x7fff_0000 => Outcome::Returned(natural),
        // KILL_THREAD, KILL_PROCESS and any unknown action: SIGSYS kill
        // (the thread is the child's only one).
        _ => Outcome::Killed(libc::SIGSYS),
    }
}

// What the child reports, in memory it shares with the parent (CLONE_VM).
// The parent is blocked in waitpid while the child runs, and reads these
// only after reaping it.
static NATURAL: AtomicI64 = AtomicI64::new(0);
static SECOND: AtomicI64 = AtomicI64::new(0);

const EXIT_OK: i32 = 0;
const EXIT_REFUSED: i32 = 250;
const EXIT_TRAPPED: i32 = 251;
const EXIT_SETUP_FAILED: i32 = 252;

extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo; an atomic store and _exit
    // are async-signal-safe.
    unsafe {
        SECOND.store(i64::from((*info).si_errno), Ordering::SeqCst);
        libc::_exit(EXIT_TRAPPED)
    }
}

/// `program` behind a guard that allows every other syscall: the child's
/// own `exit_group` after the probe passes through the filter too.
/// Jumps are relative, so the program is unchanged behind it, and it starts
/// as it would alone (A = 0; X and the scratch slots untouched).
fn guarded(program: &[SockFilter], nr: i64) -> Vec<SockFilter> {
    let ins = |code, jt, jf, k| SockFilter { code, jt, jf, k };
    let mut p = vec![
        ins(op::LD_W_ABS, 0, 0, 0),
        ins(op::JEQ_K, 1, 0, nr as u32),
        ins(op::RET_K, 0, 0, 0x7fff_0000),
        ins(op::LD_IMM, 0, 0, 0),
    ];
    p.extend_from_slice(program);
    p
}

/// What the child is asked to do; it lives on the parent's stack, which the
/// child shares.
struct Job {
    nr: i64,
    args: [u64; 6],
    fprog: libc::sock_fprog,
}

/// The raw result of `syscall()`: `-errno` on failure.
fn raw(r: libc::c_long) -> i64 {
    if r == -1 {
        // SAFETY: errno of this thread. (The child shares the parent's
        // thread pointer, so this is the parent's errno slot; the parent is
        // blocked in waitpid and does not read it.)
        -i64::from(unsafe { *libc::__errno_location() })
    } else {
        r
    }
}

/// The child: one syscall without the filter, the filter, the same syscall
/// with it. Only raw syscalls and stores to the shared statics: it shares
/// the parent's memory, so it must take no lock and allocate nothing.
extern "C" fn child(job: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `job` points at the parent's Job, alive until the child is reaped.
    let job = unsafe { &*(job as *const Job) };
    let (nr, a) = (job.nr, job.args);
    // SAFETY: plain C structs and syscalls on this process alone (no
    // CLONE_THREAD or CLONE_SIGHAND: its rlimits and signal handlers are
    // its own copies).
    unsafe {
        // A killed child would otherwise dump core.
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        NATURAL.store(
            raw(libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5])),
            Ordering::SeqCst,
        );
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigsys as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        if libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) != 0
            || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        {
            libc::_exit(EXIT_SETUP_FAILED);
        }
        if libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &job.fprog as *const libc::sock_fprog,
        ) != 0
        {
            SECOND.store(i64::from(*libc::__errno_location()), Ordering::SeqCst);
            libc::_exit(EXIT_REFUSED);
        }
        SECOND.store(
            raw(libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5])),
            Ordering::SeqCst,
        );
        libc::_exit(EXIT_OK)
    }
}

/// The child's stack: allocated once, reused by every child (one at a time).
const STACK: usize = 256 * 1024;

/// (what the syscall returned before the filter, what the kernel did with it loaded).
///
/// The child is a process of its own that shares the parent's memory
/// (`clone(CLONE_VM)`, as posix_spawn does): seccomp filters, rlimits and
/// signal handlers are per process, but no page table is copied. A plain
/// fork per input copied libFuzzer's address space and ran at 615 inputs/s.
fn kernel(program: &[SockFilter], nr: i64, args: [u64; 6]) -> (i64, Outcome) {
    thread_local! {
        static STACK_MEM: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; STACK]);
    }
    let program = guarded(program, nr);
    let job = Job {
        nr,
        args,
        fprog: libc::sock_fprog {
            len: program.len() as u16,
            filter: program.as_ptr() as *mut libc::sock_filter,
        },
    };
    NATURAL.store(i64::MIN, Ordering::SeqCst);
    SECOND.store(i64::MIN, Ordering::SeqCst);
    let pid = STACK_MEM.with_borrow_mut(|stack| {
        // The stack grows down; the top, 16-byte aligned.
        let top = (stack.as_mut_ptr() as usize + STACK) & !15;
        // SAFETY: the child runs `child` on its own stack and touches only
        // `job` and the statics; we reap it before `job` or the stack go.
        unsafe {
            libc::clone(
                child,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::SIGCHLD,
                &job as *const Job as *mut libc::c_void,
            )
        }
    });
    assert!(pid > 0, "clone failed: {}", std::io::Error::last_os_error());
    let mut status = 0;
    // libFuzzer's timeout alarm (SIGALRM, every second) interrupts the wait.
    let waited = loop {
        // SAFETY: pid is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r != -1 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break r;
        }
    };
    assert_eq!(waited, pid, "{}", std::io::Error::last_os_error());
    drop(program);
    let natural = NATURAL.load(Ordering::SeqCst);
    assert_ne!(
        natural,
        i64::MIN,
        "the child reported nothing (status {status:#x})"
    );
    let second = || {
        let v = SECOND.load(Ordering::SeqCst);
        assert_ne!(v, i64::MIN, "status {status:#x}");
        v
    };
    if libc::WIFSIGNALED(status) {
        return (natural, Outcome::Killed(libc::WTERMSIG(status)));
    }
    assert!(libc::WIFEXITED(status), "{status:#x}");
    let outcome = match libc::WEXITSTATUS(status) {
        EXIT_OK => Outcome::Returned(second()),
        EXIT_REFUSED => Outcome::Refused(second() as i32),
        EXIT_TRAPPED => Outcome::Trapped(second() as i32),
        other => panic!("the child could not set up (exit {other})"),
    };
    (natural, outcome)
}

fuzz_target!(|input: Input| {
    let program = program(&input);
    if program.is_empty() {
        return;
    }
    let nr = SYSCALLS[usize::from(input.syscall) % SYSCALLS.len()];
    let (natural, kernel) = kernel(&program, nr, input.args);
    let predicted = match validate(&program) {
        // The kernel's checks (bpf_check_classic, seccomp_check_filter) refuse with EINVAL.
        Err(_) => Outcome::Refused(libc::EINVAL),
        Ok(()) => {
            let data = SeccompData::new(nr as i32, AUDIT_ARCH_X86_64, input.args);
            let ret = run(&program, &data).expect("a validated program runs to a return");
            kernel_effect(ret, natural)
        }
    };
    assert_eq!(
        predicted, kernel,
        "interpreter vs kernel, nr {nr:#x} args {:x?}\nprogram {program:x?}",
        input.args
    );
});
