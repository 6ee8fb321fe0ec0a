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
    /// runc init between loading the filter and `execve` of the entrypoint.
    RuncInit,
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
    /// The outcome of denying it varies between runs (signals, Go scheduling):
    /// `fatal_*` then means "can break the start".
    pub flaky: bool,
    pub evidence: &'static str,
}

impl InitSyscall {
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

/// runc 1.1.5+ds1 (Debian 12, go1.19.8, libseccomp 2.5.4), x86_64, busybox-static `/bin/true`.
pub const RUNC_1_1_5: &[InitSyscall] = &[
    InitSyscall {
        name: "futex",
        args: [0xc5c728, 0x80, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: true,
        evidence: "strace: seen in 4/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 1/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=true ENOSYS → 2/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false EPERM → 1/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false ENOSYS → 3/6 failed (exit 1): runc run failed: cannot start an already running container",
    },
    InitSyscall {
        name: "close",
        args: [0x3, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=true ENOSYS → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: container process is already dead",
    },
    InitSyscall {
        name: "openat",
        args: [0xffffffffffffff9c, 0xc0000b9af0, 0x80001, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=true ENOSYS → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: function not implemented",
    },
    InitSyscall {
        name: "futex",
        args: [0xc5dd38, 0x81, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: true,
        evidence: "strace: seen in 4/5 NNP=true runs, 4/5 NNP=false runs; deny NNP=true EPERM → 1/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=true ENOSYS → 2/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false EPERM → 1/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false ENOSYS → 3/6 failed (exit 1): runc run failed: cannot start an already running container",
    },
    InitSyscall {
        name: "write",
        args: [0x3, 0xc00019f8ff, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=true ENOSYS → 6/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: cannot start an already running container; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: cannot start an already running container",
    },
    InitSyscall {
        name: "getpid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "openat",
        args: [0xffffffffffffff9c, 0xc0000b9b00, 0x80000, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=true ENOSYS → 6/6 failed (exit 1): runc run failed: container process is already dead; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: open /proc/self/fd: function not implemented",
    },
    InitSyscall {
        name: "epoll_ctl",
        args: [0x7, 0x1, 0x4, 0xc00019f6ec, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; returns -1 EPERM even when allowed",
    },
    InitSyscall {
        name: "fstatfs",
        args: [0x4, 0xc00019f750, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): ensure /proc/self/fd is on procfs: operation not permitted; deny NNP=true ENOSYS → 6/6 failed (exit 1): ensure /proc/self/fd is on procfs: function not implemented; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: ensure /proc/self/fd is on procfs: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: ensure /proc/self/fd is on procfs: function not implemented",
    },
    InitSyscall {
        name: "getdents64",
        args: [0x4, 0xc0000fa000, 0x2000, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=true EPERM → 6/6 failed (exit 1): readdirent /proc/self/fd: operation not permitted; deny NNP=true ENOSYS → 6/6 failed (exit 1): readdirent /proc/self/fd: function not implemented; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: readdirent /proc/self/fd: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: error closing exec fds: readdirent /proc/self/fd: function not implemented",
    },
    InitSyscall {
        name: "execve",
        args: [0xc0000b9b10, 0xc0000b2670, 0xc000024900, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
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
        flaky: false,
        evidence: "strace: seen in 5/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "rt_sigreturn",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: true,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: true,
        evidence: "strace: seen in 1/5 NNP=true runs, 3/5 NNP=false runs; returns -1 EAGAIN even when allowed; deny NNP=true EPERM → 1/6 failed (exit 139): ; deny NNP=true ENOSYS → 1/6 failed (exit 139): ; deny NNP=false EPERM → 1/6 failed (exit 139): ; deny NNP=false ENOSYS → 1/6 failed (exit 139): ",
    },
    InitSyscall {
        name: "fcntl",
        args: [0x3, 0x2, 0x1, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs",
    },
    InitSyscall {
        name: "chdir",
        args: [0xc00013d8ae, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: chdir to cwd ('/') set in config.json failed: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: chdir to cwd ('/') set in config.json failed: function not implemented",
    },
    InitSyscall {
        name: "capget",
        args: [0xc0000b4e10, 0xc0000b4e18, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: function not implemented",
    },
    InitSyscall {
        name: "read",
        args: [0x6, 0xc00012e000, 0x1000, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: read /proc/self/status: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: read /proc/self/status: function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x18, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x8, 0x1, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented",
    },
    InitSyscall {
        name: "newfstatat",
        args: [0xffffffffffffff9c, 0xc00013daa0, 0xc00019f060, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: stat /dev/null: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: stat /dev/null: function not implemented",
    },
    InitSyscall {
        name: "fstat",
        args: [0x0, 0xc00019efd0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: fstat /dev/stdin: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: fstat /dev/stdin: function not implemented",
    },
    InitSyscall {
        name: "setgroups",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: setgroups: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: setgroups: function not implemented",
    },
    InitSyscall {
        name: "setgid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: function not implemented",
    },
    InitSyscall {
        name: "setuid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to setup user: function not implemented",
    },
    InitSyscall {
        name: "getcwd",
        args: [0xc00019e728, 0x1000, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: failed to verify if current working directory is safe: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: failed to verify if current working directory is safe: function not implemented",
    },
    InitSyscall {
        name: "capset",
        args: [0xc0000b4e10, 0xc0000b4e18, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply caps: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply caps: function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x2f, 0x3, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented",
    },
    InitSyscall {
        name: "prctl",
        args: [0x2f, 0x2, 0x5, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; returns -1 EPERM even when allowed; deny NNP=false EPERM → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: operation not permitted; deny NNP=false ENOSYS → 6/6 failed (exit 1): runc run failed: unable to start container process: unable to apply bounding set: function not implemented",
    },
    InitSyscall {
        name: "getppid",
        args: [0x0, 0x0, 0x0, 0x0, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: true,
        fatal_enosys: true,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs; deny NNP=false EPERM → 6/6 failed (exit 2): github.com/opencontainers/runc/main.go:162 +0x1253; deny NNP=false ENOSYS → 6/6 failed (exit 2): github.com/opencontainers/runc/main.go:162 +0x1253",
    },
    InitSyscall {
        name: "faccessat2",
        args: [0xffffffffffffff9c, 0xc00013dad0, 0x1, 0x200, 0x0, 0x0],
        phase: Phase::RuncInit,
        in_nnp_true: false,
        in_nnp_false: true,
        fatal_eperm: false,
        fatal_enosys: false,
        flaky: false,
        evidence: "strace: seen in 0/5 NNP=true runs, 5/5 NNP=false runs",
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
