//! The syscalls runc 1.1.5's init and a minimal static entrypoint (busybox
//! `/bin/true`) make after the seccomp filter is loaded, on x86_64, and which of
//! them break the container start when a profile denies them.
//!
//! Learned with `cargo run -p nodeproof-e2e --bin learn-runc-init` (strace of
//! `runc run` + one real run per denied syscall, mode and errno); method and
//! caveats in docs/runc-init-syscalls.md, raw output in
//! docs/data/learn-runc-init-1.1.5.txt. Checked against real runc by
//! tests/tests/runc_init_model.rs.
//!
//! runc 1.1.5 installs the filter with `prctl(PR_SET_SECCOMP)` (no TSYNC), so
//! only init's locked thread and what it execs are filtered; other Go threads
//! are not, which is why this table only lists that thread's calls.

/// Who makes the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The runtime's init (runc init, crun's container child) between loading
    /// the filter and `execve` of the entrypoint.
    RuntimeInit,
    /// The entrypoint (busybox-static `/bin/true`) from `execve` to exit.
    Entrypoint,
}

/// One distinct use of a syscall (name + distinguishing flag/option/cmd args).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitSyscall {
    pub name: &'static str,
    /// Representative raw arguments from the trace (flags/options/cmds exactly
    /// as observed; pointers and fds as observed in one run).
    pub args: [u64; 6],
    pub phase: Phase,
    /// Made after the filter is loaded with `noNewPrivileges: true` (filter loaded just before execve).
    pub in_nnp_true: bool,
    /// Made after the filter is loaded with `noNewPrivileges: false` (filter loaded before caps/uid/chdir).
    pub in_nnp_false: bool,
    /// Denying this name alone with `SCMP_ACT_ERRNO` (EPERM) made the start fail
    /// in every mode where the call is made. Measured per name: entries sharing a
    /// name (e.g. init's several prctl options) share the measurement.
    pub fatal_eperm: bool,
    /// Same with `errnoRet: 38` (ENOSYS).
    pub fatal_enosys: bool,
    /// Same with `errnoRet: 0`: the call returns 0 without running, which
    /// most callers take for success (close-exec-fds and the exec fifo do not).
    pub fatal_success: bool,
    /// Same with any other errno (measured with EINVAL and EACCES).
    pub fatal_other: bool,
    /// Errnos this use's caller ignores whatever the per-name measurement
    /// says, measured with rules conditioned on its arguments (runc's
    /// capability library skips EINVAL from the bounding-set and ambient calls).
    pub ignores: &'static [u16],
    /// Made only on this branch of init (runc's eaccess fallback); `None`:
    /// made on every start.
    pub only_after: Option<Branch>,
    /// What the container keeps when this call is answered with success
    /// without running (errno 0): a security finding, not a start failure.
    pub skipped_drop: Option<Kept>,
    /// The outcome of denying it varies between runs (signals, Go scheduling):
    /// `fatal_*` then means "can break the start".
    pub flaky: bool,
    pub evidence: &'static str,
}

/// A branch of runc 1.1.5's `system.Eaccess` (libcontainer/system/linux.go),
/// its exec.LookPath check before `execve`: `faccessat2(path, X_OK,
/// AT_EACCESS)`; only EPERM and ENOSYS fall back, to getuid/geteuid/getgid/
/// getegid, and when both pairs compare equal, `access(2)` (faccessat on
/// x86_64). Unequal ids take x/sys' `Faccessat(AT_EACCESS)` emulation
/// (newfstatat + mode bits), which makes no further call of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    /// faccessat2 was answered EPERM or ENOSYS: the id calls are made.
    EaccessFallback,
    /// ... and uid == euid, gid == egid: `access(2)` is made.
    EaccessAccess,
}

impl Branch {
    /// Whether the branch is taken, given what each call is answered with
    /// (`None`: the call runs).
    pub fn taken(self, answer_of: &dyn Fn(&str) -> Option<Answer>) -> bool {
        let fallback = matches!(answer_of("faccessat2"), Some(Answer::Errno(EPERM | ENOSYS)));
        match self {
            Branch::EaccessFallback => fallback,
            Branch::EaccessAccess => {
                // Go's os.Getuid & co. use RawSyscallNoError: a denied call's
                // -errno is the id (0 for errno 0). runc init runs as root here.
                let id = |name: &str| match answer_of(name) {
                    None | Some(Answer::Killed) => 0,
                    Some(Answer::Errno(e)) => -i64::from(e),
                };
                fallback && id("getuid") == id("geteuid") && id("getgid") == id("getegid")
            }
        }
    }
}

/// What runc init drops only through a call a profile can answer with success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// `setuid` not run: the process stays uid 0, whatever `runAsUser` says.
    Uid,
    /// `setgid` not run: the process stays gid 0, whatever `runAsGroup` says.
    Gid,
    /// `setgroups` not run: runc init's supplementary groups stay.
    Groups,
    /// `capset` not run: the process keeps every capability runc init has.
    Capabilities,
    /// `prctl(PR_CAPBSET_DROP)` not run: the bounding set stays full.
    BoundingSet,
}

impl Kept {
    /// What the container process silently keeps from `init` (`runc init`,
    /// `crun's container process`), in words.
    pub fn describe(self, init: &str) -> String {
        match self {
            Kept::Uid => format!("{init}'s root user (uid 0), whatever runAsUser says"),
            Kept::Gid => format!("{init}'s root group (gid 0), whatever runAsGroup says"),
            Kept::Groups => {
                format!("{init}'s supplementary groups, whatever supplementalGroups says")
            }
            Kept::Capabilities => {
                format!("all of {init}'s capabilities, whatever the pod's capabilities drop")
            }
            Kept::BoundingSet => {
                "a full capability bounding set, so file capabilities can regain what was dropped"
                    .to_string()
            }
        }
    }
}

/// What a denied call hands back to its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The errno, 0 meaning "returned 0 without running".
    Errno(u16),
    /// The thread or process is killed, or SIGSYS is raised: no caller survives it.
    Killed,
}

/// errno values the table's measurements are keyed on.
pub const EPERM: u16 = 1;
pub const EINVAL: u16 = 22;
pub const ENOSYS: u16 = 38;

impl InitSyscall {
    /// Whether the start fails when this call is answered with `answer`.
    pub fn fails_on(&self, answer: Answer) -> bool {
        match answer {
            Answer::Killed => true,
            Answer::Errno(e) if self.ignores.contains(&e) => false,
            Answer::Errno(0) => self.fatal_success,
            Answer::Errno(EPERM) => self.fatal_eperm,
            Answer::Errno(ENOSYS) => self.fatal_enosys,
            Answer::Errno(_) => self.fatal_other,
        }
    }

    /// What runc or the container printed when this syscall alone was denied
    /// in that mode, from the learner's record in `evidence`.
    pub fn observed_failure(&self, no_new_privileges: bool, enosys: bool) -> Option<&'static str> {
        let key = format!(
            "deny NNP={} {} \u{2192} ",
            no_new_privileges,
            if enosys { "ENOSYS" } else { "EPERM" }
        );
        let rest = &self.evidence[self.evidence.find(&key)? + key.len()..];
        let rest = rest.split(';').next()?;
        let msg = rest.split_once("): ").map(|(_, m)| m)?.trim();
        (!msg.is_empty()).then_some(msg)
    }

    /// How many of the learner's starts failed when this call's name alone
    /// was denied in that mode: (failed, runs), from `evidence`.
    pub fn observed_rate(&self, no_new_privileges: bool, enosys: bool) -> Option<(u32, u32)> {
        let key = format!(
            "deny NNP={} {} \u{2192} ",
            no_new_privileges,
            if enosys { "ENOSYS" } else { "EPERM" }
        );
        let rest = &self.evidence[self.evidence.find(&key)? + key.len()..];
        let (failed, rest) = rest.split_once('/')?;
        let runs = rest.split(' ').next()?;
        Some((failed.parse().ok()?, runs.parse().ok()?))
    }

    /// Why denying this call breaks only some starts, for the entries the
    /// learner found flaky.
    pub fn intermittent_cause(&self) -> Option<&'static str> {
        INTERMITTENT_CAUSES
            .iter()
            .find(|(n, _)| *n == self.name)
            .map(|(_, cause)| *cause)
            .filter(|_| self.flaky)
    }

    pub fn in_mode(&self, no_new_privileges: bool) -> bool {
        if no_new_privileges {
            self.in_nnp_true
        } else {
            self.in_nnp_false
        }
    }
}

/// Calls whose denial alone is harmless because the caller falls back on
/// another syscall; denying both breaks the start (measured: denying brk+mmap →
/// exit 127, exit_group+exit → exit 139 or a hang).
pub const FALLBACKS: &[(&str, &[&str])] = &[("brk", &["mmap"]), ("exit_group", &["exit"])];

/// What makes init's call of these names depend on the run (docs/runc-init-syscalls.md).
pub const INTERMITTENT_CAUSES: &[(&str, &str)] = &[
    (
        "futex",
        "Go's scheduler makes a futex wake on init's locked thread in some starts only",
    ),
    (
        "rt_sigreturn",
        "a signal (Go's SIGURG preemption) reaches init's locked thread in some starts only",
    ),
];

/// What the model knows of one argument of one of init's calls. The table's
/// `args` hold one trace's values; a rule on an argument whose value runc init
/// does not fix cannot be judged from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgValue {
    /// A flag, option, command, fd or id that is the same in every start.
    Fixed,
    /// An address (a path, a buffer, Go's heap or stack): it moves from start
    /// to start (ASLR, Go's allocator), so a rule on it matches in some.
    Address,
    /// An argument the call does not take, made through Go's `syscall`
    /// package, which passes 0 there: 0 in every start.
    Zero { arity: u8 },
    /// An argument the call does not take, made by C or by Go's runtime
    /// assembly: the kernel passes all six registers (`syscall_get_arguments`),
    /// and the unused ones hold whatever was left in them.
    Unused { arity: u8 },
}

impl ArgValue {
    pub fn describe(self) -> String {
        match self {
            ArgValue::Fixed => "an argument runc init fixes".to_string(),
            ArgValue::Address => {
                "an address, which moves from start to start".to_string()
            }
            ArgValue::Zero { arity } => format!(
                "an argument the call does not take (it takes {arity}), which Go's syscall package passes as 0"
            ),
            ArgValue::Unused { arity } => format!(
                "an argument the call does not take (it takes {arity}), so it holds whatever the register held"
            ),
        }
    }

    /// The same value in every start (a fixed argument, or Go's 0).
    pub fn is_fixed(self) -> bool {
        matches!(self, ArgValue::Fixed | ArgValue::Zero { .. })
    }
}

/// The calls of runc init that Go's runtime makes itself, from assembly
/// that loads only the registers a call takes (go1.19
/// src/runtime/sys_linux_amd64.s: futex, epollctl, sigreturn, rtsigprocmask,
/// ...): their unused slots are not zeroed. Every other call of runc init
/// after the filter is runc's own, through the `syscall` package.
pub const GO_RUNTIME_CALLS: &[&str] = &[
    "arch_prctl",
    "clone",
    "epoll_ctl",
    "epoll_pwait",
    "futex",
    "gettid",
    "madvise",
    "mincore",
    "mmap",
    "munmap",
    "nanosleep",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sched_getaffinity",
    "sched_yield",
    "sigaltstack",
    "tgkill",
];

/// Whether `need`'s unused argument slots are Go's zeros: a call of Go
/// runc init's own (not the runtime's, not the entrypoint's libc).
pub fn zeroes_unused_slots(go_init: bool, need: &InitSyscall) -> bool {
    go_init && need.phase == Phase::RuntimeInit && !GO_RUNTIME_CALLS.contains(&need.name)
}

/// `prctl`'s option that drops one capability from the bounding set.
pub const PR_CAPBSET_DROP: u64 = 24;

/// The argument of `need` that names a capability, when init makes the call
/// once per capability the container's bounding set lacks (runc's
/// capability library and crun both loop `prctl(PR_CAPBSET_DROP, cap)` from
/// 0 to the kernel's last capability, skipping those the set keeps): a
/// trace's one value there stands for all of them.
pub fn capability_argument(need: &InitSyscall) -> Option<u8> {
    (need.name == "prctl" && need.args[0] == PR_CAPBSET_DROP).then_some(1)
}

/// `args[index]` of init's call `name` on x86_64 (runc's and crun's tables),
/// from each call's kernel prototype (`SYSCALL_DEFINEn`; `faccessat` is the
/// 3-argument one). `fcntl`
/// and `prctl` take an address only for some commands, none of init's, so
/// theirs count as fixed. `zeroed`: the caller passes 0 in the slots the
/// call does not take ([`zeroes_unused_slots`]). `None`: not one of init's calls.
pub fn arg_value(name: &str, index: u8, zeroed: bool) -> Option<ArgValue> {
    let arity = match name {
        "getegid" | "geteuid" | "getgid" | "getpid" | "getppid" | "getuid" | "rt_sigreturn" => 0,
        "brk" | "chdir" | "close" | "exit_group" | "set_tid_address" | "setgid" | "setuid" => 1,
        "arch_prctl" | "capget" | "capset" | "fstat" | "fstatfs" | "getcwd" | "set_robust_list"
        | "setgroups" => 2,
        "execve" | "faccessat" | "fcntl" | "getdents64" | "getrandom" | "mprotect" | "read"
        | "readlink" | "write" | "setresuid" | "setresgid" | "close_range" => 3,
        "epoll_ctl" | "faccessat2" | "newfstatat" | "openat" | "prlimit64" | "rseq"
        | "rt_sigaction" | "rt_sigprocmask" => 4,
        "prctl" => 5,
        "futex" => 6,
        _ => return None,
    };
    let addresses: &[u8] = match name {
        "brk" | "chdir" | "getcwd" | "getrandom" | "mprotect" | "rseq" | "set_robust_list"
        | "set_tid_address" => &[0],
        "arch_prctl" | "faccessat" | "faccessat2" | "fstat" | "fstatfs" | "getdents64"
        | "openat" | "read" | "setgroups" | "write" => &[1],
        "capget" | "capset" | "readlink" => &[0, 1],
        "newfstatat" => &[1, 2],
        "execve" => &[0, 1, 2],
        "epoll_ctl" => &[3],
        "rt_sigaction" | "rt_sigprocmask" => &[1, 2],
        "prlimit64" => &[2, 3],
        "futex" => &[0, 3, 4],
        _ => &[],
    };
    Some(if index >= arity && zeroed {
        ArgValue::Zero { arity }
    } else if index >= arity {
        ArgValue::Unused { arity }
    } else if addresses.contains(&index) {
        ArgValue::Address
    } else {
        ArgValue::Fixed
    })
}

/// runc 1.1.5+ds1 (Debian 12, go1.19.8, libseccomp 2.5.4), x86_64, busybox-static `/bin/true`.
///
/// `fatal_success` and `fatal_other` were measured like `fatal_eperm` (one
/// name denied, 3 runs per mode) with `errnoRet` 0, 22 (EINVAL) and 13
/// (EACCES); prctl's entries per option, with a rule on `args[0]`.
pub const RUNC_1_1_5: &[InitSyscall] = &[
    InitSyscall {
        name: "futex",
        args: [0xc5c728, 0x80, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: true,
        evidence: "strace: seen in 4/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 1/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=true ENOSYS → 2/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false EPERM → 1/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false ENOSYS → 3/6 failed (exit 1): runc run failed: cannot start an already running container",
    },
    InitSyscall {
        name: "close",
        args: [0x3, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=true ENOSYS → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: container process is already dead",
    },
    InitSyscall {
        name: "openat",
        args: [0xffffffffffffff9c, 0xc0000b9af0, 0x80001, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=true ENOSYS → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: function not implemented",
    },
    InitSyscall {
        name: "futex",
        args: [0xc5dd38, 0x81, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: true,
        evidence: "strace: seen in 4/5 NNP=true runs, 4/5 NNP=false runs; deny NNP=true EPERM → 1/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=true ENOSYS → 2/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false EPERM → 1/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false ENOSYS → 3/6 failed (exit 1): runc run failed: cannot start an already running container",
    },
    InitSyscall {
        name: "write",
        args: [0x3, 0xc00019f8ff, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=true ENOSYS → 6/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: cannot start an already running container",
    },
    InitSyscall {
        name: "getpid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "openat",
        args: [0xffffffffffffff9c, 0xc0000b9b00, 0x80000, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=true ENOSYS → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: function not implemented",
    },
    InitSyscall {
        name: "epoll_ctl",
        args: [0x7, 0x1, 0x4, 0xc00019f6ec, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; returns -1 EPERM even when allowed",
    },
    InitSyscall {
        name: "fstatfs",
        args: [0x4, 0xc00019f750, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): ensure /proc/self/fd is on procfs: operation not permitted; deny NNP=true ENOSYS → 6/6 failed (exit 1): ensure /proc/self/fd is on procfs: function not implemented; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: ensure /proc/self/fd is on procfs: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: ensure /proc/self/fd is on procfs: function not implemented",
    },
    InitSyscall {
        name: "getdents64",
        args: [0x4, 0xc0000fa000, 0x2000, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): readdirent /proc/self/fd: operation not permitted; deny NNP=true ENOSYS → 6/6 failed (exit 1): readdirent /proc/self/fd: function not implemented; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: readdirent /proc/self/fd: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: readdirent /proc/self/fd: function not implemented",
    },
    InitSyscall {
        name: "execve",
        args: [0xc0000b9b10, 0xc0000b2670, 0xc000024900, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): exec /bin/true: operation not permitted; deny NNP=true ENOSYS → 6/6 failed (exit 1): exec /bin/true: function not implemented; deny NNP=false EPERM → 6/6 failed (exit 1): exec /bin/true: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): exec /bin/true: function not implemented",
    },
    InitSyscall {
        name: "brk",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "arch_prctl",
        args: [0x1002, 0xc83f3c0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 127): cannot set %fs base address for thread-local storage; deny NNP=true ENOSYS → 6/6 failed (exit 127): cannot set %fs base address for thread-local storage; deny NNP=false EPERM → 6/6 failed (exit 127): cannot set %fs base address for thread-local storage; deny NNP=false ENOSYS → 6/6 failed (exit 127): cannot set %fs base address for thread-local storage",
    },
    InitSyscall {
        name: "set_tid_address",
        args: [0xc83f690, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "set_robust_list",
        args: [0xc83f6a0, 0x18, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "rseq",
        args: [0xc83fce0, 0x20, 0x0, 0x53053053, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "prlimit64",
        args: [0x0, 0x3, 0x0, 0x7ffed1bd2f20, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "readlink",
        args: [0x5c2c98, 0x7ffed1bd1e90, 0x1000, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "getrandom",
        args: [0x5eb7c0, 0x8, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "mprotect",
        args: [0x5db000, 0x7000, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 127): : error while loading shared libraries: cannot apply additional memory protection after relocation: Operation not permitted; deny NNP=true ENOSYS → 6/6 failed (exit 127): : error while loading shared libraries: cannot apply additional memory protection after relocation: Function not implemented; deny NNP=false EPERM → 6/6 failed (exit 127): : error while loading shared libraries: cannot apply additional memory protection after relocation: Operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 127): : error while loading shared libraries: cannot apply additional memory protection after relocation: Function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x10, 0x7ffed1bd2e78, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented",
    },
    InitSyscall {
        name: "getuid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "exit_group",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "rt_sigreturn",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: true,
        evidence: "any answer is fatal when a signal arrives: a denied rt_sigreturn returns into the restorer's next instruction without the signal frame restored (Go: INT $3 after the SYSCALL); errno 0 failed (exit 139) in the campaign, seed 10486381270820303779 case #21, through runc and containerd; strace: seen in 1/5 NNP=true runs, 3/5 NNP=false runs; returns -1 EAGAIN even when allowed; deny NNP=true EPERM → 1/6 failed (exit 139): ; deny NNP=true ENOSYS → 1/6 failed (exit 139): ; deny NNP=false EPERM → 1/6 failed (exit 139): ; deny NNP=false ENOSYS → 1/6 failed (exit 139): ",
    },
    InitSyscall {
        name: "fcntl",
        args: [0x3, 0x2, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "chdir",
        args: [0xc00013d8ae, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: chdir to cwd ('/') set in config.json failed: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: chdir to cwd ('/') set in config.json failed: function not implemented",
    },
    InitSyscall {
        name: "capget",
        args: [0xc0000b4e10, 0xc0000b4e18, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: function not implemented",
    },
    InitSyscall {
        name: "read",
        args: [0x6, 0xc00012e000, 0x1000, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: read /proc/self/status: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: read /proc/self/status: function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x18, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[EINVAL],
        only_after: None,
        skipped_drop: Some(Kept::BoundingSet),
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented; per option (rule on args[0] == 24): EPERM, ENOSYS, EACCES → 3/3 failed (unable to apply bounding set), EINVAL and 0 → 3/3 started (runc's capability library ignores EINVAL from PR_CAPBSET_DROP)",
    },
    InitSyscall {
        name: "prctl",
        args: [0x8, 0x1, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented; per option (rule on args[0] == 8): EPERM, ENOSYS, EINVAL, EACCES → 3/3 failed (unable to set keep caps), 0 → 3/3 started",
    },
    InitSyscall {
        name: "newfstatat",
        args: [0xffffffffffffff9c, 0xc00013daa0, 0xc00019f060, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: stat /dev/null: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: stat /dev/null: function not implemented",
    },
    InitSyscall {
        name: "fstat",
        args: [0x0, 0xc00019efd0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: fstat /dev/stdin: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: fstat /dev/stdin: function not implemented",
    },
    InitSyscall {
        name: "fstat",
        args: [0x1, 0xc00019efd0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "runc's fixStdioPermissions (libcontainer/init_linux.go) fstats stdin, stdout and stderr in turn; the traces kept the first call of a name only. Seen missing: a differential campaign case (runc-1.1.5, seed 1767648712536697145) denying fstat for fd > 0 with ENOSYS failed the start with `unable to setup user: fstat /dev/stdout: function not implemented`; fd 1 stands for stdout with the same outcome as stdin's",
    },
    InitSyscall {
        name: "fstat",
        args: [0x2, 0xc00019efd0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "runc's fixStdioPermissions (libcontainer/init_linux.go) fstats stdin, stdout and stderr in turn; the traces kept the first call of a name only. Seen missing: a differential campaign case (runc-1.1.5, seed 1767648712536697145) denying fstat for fd > 0 with ENOSYS failed the start with `unable to setup user: fstat /dev/stdout: function not implemented`; fd 2 stands for stderr with the same outcome as stdin's",
    },
    InitSyscall {
        name: "setgroups",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: Some(Kept::Groups),
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: setgroups: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: setgroups: function not implemented",
    },
    InitSyscall {
        name: "setgid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: Some(Kept::Gid),
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: function not implemented",
    },
    InitSyscall {
        name: "setuid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: Some(Kept::Uid),
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: function not implemented",
    },
    InitSyscall {
        name: "getcwd",
        args: [0xc00019e728, 0x1000, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: failed to verify if current working directory is safe: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: failed to verify if current working directory is safe: function not implemented",
    },
    InitSyscall {
        name: "capset",
        args: [0xc0000b4e10, 0xc0000b4e18, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: Some(Kept::Capabilities),
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply caps: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply caps: function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x2f, 0x3, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented; per option (rule on args[0] == 47): 0, EPERM, ENOSYS, EINVAL, EACCES → 3/3 started (the capability library ignores PR_CAP_AMBIENT errors)",
    },
    InitSyscall {
        name: "prctl",
        args: [0x2f, 0x2, 0x5, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; returns -1 EPERM even when allowed; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented; per option (rule on args[0] == 47): 0, EPERM, ENOSYS, EINVAL, EACCES → 3/3 started (the capability library ignores PR_CAP_AMBIENT errors)",
    },
    InitSyscall {
        name: "getppid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 2): github.com/opencontainers/runc/main.go:162 +0x1253; deny NNP=false ENOSYS → 6/6 failed (exit 2): github.com/opencontainers/runc/main.go:162 +0x1253",
    },
    InitSyscall {
        name: "faccessat2",
        args: [0xffffffffffffff9c, 0xc00013dad0, 0x1, 0x200, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EINVAL → 3/3 failed (exit 1): runc run failed: unable to start container process: exec /bin/true: invalid argument; EACCES → 3/3 failed: exec /bin/true: permission denied; EPERM, ENOSYS, TRACE (no tracer), 0 → started (runc's Eaccess falls back on EPERM/ENOSYS only)",
    },
    InitSyscall {
        name: "getuid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: Some(Branch::EaccessFallback),
        skipped_drop: None,
        flaky: false,
        evidence: "strace with faccessat2 denied (EPERM), NNP=false: made after it; deny with faccessat2 EPERM or ENOSYS, this errno 0/1/22 → 3/3 started each",
    },
    InitSyscall {
        name: "geteuid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: Some(Branch::EaccessFallback),
        skipped_drop: None,
        flaky: false,
        evidence: "strace with faccessat2 denied (EPERM), NNP=false: made after it; deny with faccessat2 EPERM or ENOSYS, this errno 0/1/22 → 3/3 started each",
    },
    InitSyscall {
        name: "getgid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: Some(Branch::EaccessFallback),
        skipped_drop: None,
        flaky: false,
        evidence: "strace with faccessat2 denied (EPERM), NNP=false: made after it; deny with faccessat2 EPERM or ENOSYS, this errno 0/1/22 → 3/3 started each",
    },
    InitSyscall {
        name: "getegid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: Some(Branch::EaccessFallback),
        skipped_drop: None,
        flaky: false,
        evidence: "strace with faccessat2 denied (EPERM), NNP=false: made after it; deny with faccessat2 EPERM or ENOSYS, this errno 0/1/22 → 3/3 started each",
    },
    InitSyscall {
        name: "faccessat",
        args: [0xffffffffffffff9c, 0xc00013dad0, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: Some(Branch::EaccessAccess),
        skipped_drop: None,
        flaky: false,
        evidence: "strace with faccessat2 denied (EPERM), NNP=false: faccessat(AT_FDCWD, \"/bin/true\", X_OK) = 0; deny with faccessat2 EPERM or ENOSYS: errno 0 → 3/3 started, EPERM → 3/3 failed (exit 1): runc run failed: unable to start container process: exec /bin/true: operation not permitted, EINVAL → 3/3 failed: exec /bin/true: invalid argument; with getuid (EPERM) or getegid (errno 5) denied as well → 2/2 started",
    },
];

/// runc 1.1.15+ds1 (Debian 13, go1.24.4, libseccomp 2.6.0), x86_64, busybox-static `/bin/true`:
/// `learn-runc-init --runtime runc-1.1.15 --runs 3 --reps 2`. Unlike 1.1.5, its init makes no
/// eaccess fallback (faccessat) when faccessat2 is denied. The prctl options' `ignores` and what
/// a skipped drop keeps are 1.1.5's (the same capability library), checked by lint_vs_runc.
pub const RUNC_1_1_15: &[InitSyscall] = &[
    InitSyscall {
        name: "close",
        args: [0x3, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=true EPERM → 2/2 failed (exit 1): runc run failed: container process is already dead; deny NNP=true ENOSYS → 2/2 failed (exit 1): runc run failed: container process is already dead; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: container process is already dead; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: container process is already dead",
    },
    InitSyscall {
        name: "openat",
        args: [0xffffffffffffff9c, 0xc000169010, 0x80001, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=true EPERM → 2/2 failed (exit 1): runc run failed: container process is already dead; deny NNP=true ENOSYS → 2/2 failed (exit 1): runc run failed: container process is already dead; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: function not implemented",
    },
    InitSyscall {
        name: "write",
        args: [0x3, 0xc00003197f, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=true EPERM → 2/2 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=true ENOSYS → 2/2 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: cannot start an already running container",
    },
    InitSyscall {
        name: "getpid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "openat",
        args: [0xffffffffffffff9c, 0xc000169020, 0x80000, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=true EPERM → 2/2 failed (exit 1): runc run failed: container process is already dead; deny NNP=true ENOSYS → 2/2 failed (exit 1): runc run failed: container process is already dead; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: function not implemented",
    },
    InitSyscall {
        name: "fcntl",
        args: [0x4, 0x3, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "fcntl",
        args: [0x4, 0x4, 0x8800, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "epoll_ctl",
        args: [0x7, 0x1, 0x4, 0xc00003174c, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; returns -1 EPERM even when allowed",
    },
    InitSyscall {
        name: "fstatfs",
        args: [0x4, 0xc0000317f8, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=true EPERM → 2/2 failed (exit 1): ensure /proc/self/fd is on procfs: operation not permitted; deny NNP=true ENOSYS → 2/2 failed (exit 1): ensure /proc/self/fd is on procfs: function not implemented; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: ensure /proc/self/fd is on procfs: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: ensure /proc/self/fd is on procfs: function not implemented",
    },
    InitSyscall {
        name: "getdents64",
        args: [0x4, 0xc000178000, 0x2000, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=true EPERM → 2/2 failed (exit 1): readdirent /proc/self/fd: operation not permitted; deny NNP=true ENOSYS → 2/2 failed (exit 1): readdirent /proc/self/fd: function not implemented; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: readdirent /proc/self/fd: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: readdirent /proc/self/fd: function not implemented",
    },
    InitSyscall {
        name: "execve",
        args: [0xc000169030, 0xc00002cf80, 0xc000022de0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=true EPERM → 2/2 failed (exit 1): exec /bin/true: operation not permitted; deny NNP=true ENOSYS → 2/2 failed (exit 1): exec /bin/true: function not implemented; deny NNP=false EPERM → 2/2 failed (exit 1): exec /bin/true: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): exec /bin/true: function not implemented",
    },
    InitSyscall {
        name: "brk",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "arch_prctl",
        args: [0x1002, 0x3bc8e3c0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=true EPERM → 2/2 failed (exit 127): cannot set %fs base address for thread-local storage; deny NNP=true ENOSYS → 2/2 failed (exit 127): cannot set %fs base address for thread-local storage; deny NNP=false EPERM → 2/2 failed (exit 127): cannot set %fs base address for thread-local storage; deny NNP=false ENOSYS → 2/2 failed (exit 127): cannot set %fs base address for thread-local storage",
    },
    InitSyscall {
        name: "set_tid_address",
        args: [0x3bc8e690, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "set_robust_list",
        args: [0x3bc8e6a0, 0x18, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "rseq",
        args: [0x3bc8ece0, 0x20, 0x0, 0x53053053, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "prlimit64",
        args: [0x0, 0x3, 0x0, 0x7fff59ab1730, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "readlink",
        args: [0x5c2c98, 0x7fff59ab06a0, 0x1000, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "getrandom",
        args: [0x5eb7c0, 0x8, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "mprotect",
        args: [0x5db000, 0x7000, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=true EPERM → 2/2 failed (exit 127): : error while loading shared libraries: cannot apply additional memory protection after relocation: Operation not permitted; deny NNP=true ENOSYS → 2/2 failed (exit 127): : error while loading shared libraries: cannot apply additional memory protection after relocation: Function not implemented; deny NNP=false EPERM → 2/2 failed (exit 127): : error while loading shared libraries: cannot apply additional memory protection after relocation: Operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 127): : error while loading shared libraries: cannot apply additional memory protection after relocation: Function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x10, 0x7fff59ab1688, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented",
    },
    InitSyscall {
        name: "getuid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "exit_group",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::Entrypoint,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 3/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "futex",
        args: [0xe35aa0, 0x81, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: true,
        evidence: "strace: seen in 2/3 NNP=true runs, 2/3 NNP=false runs; deny NNP=true EPERM → 1/2 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=true ENOSYS → 2/2 failed (exit 1): runc run failed: cannot start an already running container",
    },
    InitSyscall {
        name: "rt_sigreturn",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: true,
        evidence: "any answer is fatal when a signal arrives: a denied rt_sigreturn returns into the restorer's next instruction without the signal frame restored (Go: INT $3 after the SYSCALL); errno 0 failed (exit 139) in the campaign, seed 10486381270820303779 case #21, through runc and containerd; strace: seen in 1/3 NNP=true runs, 1/3 NNP=false runs; deny NNP=true EPERM → 1/2 failed (exit 139): ; deny NNP=true ENOSYS → 1/2 failed (exit 139): ",
    },
    InitSyscall {
        name: "futex",
        args: [0xe34160, 0x80, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: true,
        evidence: "strace: seen in 1/3 NNP=true runs, 2/3 NNP=false runs; returns -1 EAGAIN even when allowed; deny NNP=true EPERM → 1/2 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=true ENOSYS → 2/2 failed (exit 1): runc run failed: cannot start an already running container",
    },
    InitSyscall {
        name: "fcntl",
        args: [0x3, 0x2, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs",
    },
    InitSyscall {
        name: "chdir",
        args: [0xc000180de8, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: chdir to cwd ('/') set in config.json failed: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: chdir to cwd ('/') set in config.json failed: function not implemented",
    },
    InitSyscall {
        name: "capget",
        args: [0xc0000c6cf0, 0xc0000c6cf8, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: function not implemented",
    },
    InitSyscall {
        name: "read",
        args: [0x6, 0xc000189000, 0x1000, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: read /proc/self/status: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: read /proc/self/status: function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x18, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[EINVAL],
        only_after: None,
        skipped_drop: Some(Kept::BoundingSet),
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented; per option as runc 1.1.5 (the same capability library), checked by lint_vs_runc's prctl variants",
    },
    InitSyscall {
        name: "prctl",
        args: [0x8, 0x1, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented; per option as runc 1.1.5 (the same capability library), checked by lint_vs_runc's prctl variants",
    },
    InitSyscall {
        name: "newfstatat",
        args: [0xffffffffffffff9c, 0xc000180ff0, 0xc0000312a8, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: stat /dev/null: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: stat /dev/null: function not implemented",
    },
    InitSyscall {
        name: "fstat",
        args: [0x0, 0xc000031218, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: fstat /dev/stdin: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: fstat /dev/stdin: function not implemented",
    },
    InitSyscall {
        name: "fstat",
        args: [0x1, 0xc000031218, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "runc's fixStdioPermissions (libcontainer/init_linux.go) fstats stdin, stdout and stderr in turn; the traces kept the first call of a name only. Seen missing: a differential campaign case (runc-1.1.5, seed 1767648712536697145) denying fstat for fd > 0 with ENOSYS failed the start with `unable to setup user: fstat /dev/stdout: function not implemented`; fd 1 stands for stdout with the same outcome as stdin's",
    },
    InitSyscall {
        name: "fstat",
        args: [0x2, 0xc000031218, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "runc's fixStdioPermissions (libcontainer/init_linux.go) fstats stdin, stdout and stderr in turn; the traces kept the first call of a name only. Seen missing: a differential campaign case (runc-1.1.5, seed 1767648712536697145) denying fstat for fd > 0 with ENOSYS failed the start with `unable to setup user: fstat /dev/stdout: function not implemented`; fd 2 stands for stderr with the same outcome as stdin's",
    },
    InitSyscall {
        name: "setgroups",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: Some(Kept::Groups),
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: setgroups: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: setgroups: function not implemented",
    },
    InitSyscall {
        name: "setgid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: Some(Kept::Gid),
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: function not implemented",
    },
    InitSyscall {
        name: "setuid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: Some(Kept::Uid),
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to setup user: function not implemented",
    },
    InitSyscall {
        name: "getcwd",
        args: [0xc0000307b0, 0x1000, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: true,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: failed to verify if current working directory is safe: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: failed to verify if current working directory is safe: function not implemented",
    },
    InitSyscall {
        name: "capset",
        args: [0xc0000c6cf0, 0xc0000c6cf8, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: Some(Kept::Capabilities),
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply caps: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply caps: function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x2f, 0x3, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented; per option as runc 1.1.5 (the same capability library), checked by lint_vs_runc's prctl variants",
    },
    InitSyscall {
        name: "prctl",
        args: [0x2f, 0x2, 0x5, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: false,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; returns -1 EPERM even when allowed; deny NNP=false EPERM → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 2/2 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented; per option as runc 1.1.5 (the same capability library), checked by lint_vs_runc's prctl variants",
    },
    InitSyscall {
        name: "getppid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs; deny NNP=false EPERM → 2/2 failed (exit 2): github.com/opencontainers/runc/main.go:162 +0x11b2; deny NNP=false ENOSYS → 2/2 failed (exit 2): github.com/opencontainers/runc/main.go:162 +0x11b2",
    },
    InitSyscall {
        name: "faccessat2",
        args: [0xffffffffffffff9c, 0xc000181020, 0x1, 0x200, 0x0, 0x0],
        phase: Phase::RuntimeInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        fatal_success: false,
        fatal_other: true,
        ignores: &[],
        only_after: None,
        skipped_drop: None,
        flaky: false,
        evidence: "strace: seen in 0/3 NNP=true runs, 3/3 NNP=false runs",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for s in RUNC_1_1_5 {
            assert!(s.in_nnp_true || s.in_nnp_false, "{} is in no mode", s.name);
            assert!(!s.evidence.is_empty());
        }
        // The calls every start needs: the close-exec-fds walk and the exec itself.
        for name in [
            "getdents64",
            "fstatfs",
            "openat",
            "close",
            "execve",
            "write",
        ] {
            assert!(
                RUNC_1_1_5.iter().any(|s| s.name == name
                    && s.fatal_eperm
                    && s.in_mode(true)
                    && s.in_mode(false)),
                "{name}"
            );
        }
        // noNewPrivileges=false loads the filter before capset/setuid/chdir.
        for name in ["capset", "setuid", "setgroups", "chdir"] {
            let s = RUNC_1_1_5.iter().find(|s| s.name == name).expect(name);
            assert!(s.fatal_eperm && s.in_nnp_false && !s.in_nnp_true, "{name}");
        }
    }
}
