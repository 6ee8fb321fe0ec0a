//! Run a command under a seccomp program in a forked child
//! (`nodeproof profile test PATH -- CMD [ARG]...`).
//!
//! The child is traced with `PTRACE_SEIZE` so the parent can name the syscall
//! that was denied:
//! * `SECCOMP_RET_TRAP` raises SIGSYS; at its signal-delivery stop
//!   `PTRACE_GETSIGINFO` carries `si_syscall`.
//! * `SECCOMP_RET_KILL_*` deliver an unblockable SIGSYS that the tracer never
//!   sees as a signal stop, so the syscall is read from the registers at the
//!   `PTRACE_EVENT_EXIT` stop (the kernel rolls them back to the syscall entry)
//!   and confirmed by running the program through [`cbpf::run`].
//!
//! Only the main process is traced: a denial in a forked grandchild shows up
//! only through the exit status it causes.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use nodeproof_seccomp::cbpf::{self, SeccompData};
use nodeproof_seccomp::cbpf::{SockFilter, BPF_MAXINSNS};
use nodeproof_seccomp::compiler::Errno;
use nodeproof_seccomp::filter::{Action, Arch};
use nodeproof_seccomp::syscalls::syscall_name;

/// A syscall the filter stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedSyscall {
    pub nr: i32,
    pub name: Option<String>,
    pub action: Action,
}

/// What happened to the command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxReport {
    /// Exit status, when the command exited normally.
    pub exit_code: Option<i32>,
    /// Terminating signal, when a signal killed it.
    pub signal: Option<i32>,
    /// The first syscall that was trapped or killed the process.
    pub denied: Option<DeniedSyscall>,
    /// errno of the failed `execve` (the command never ran; no exit code).
    pub exec_failed: Option<i32>,
}

impl SandboxReport {
    /// The command ran and exited 0.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
    }
}

impl std::fmt::Display for SandboxReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(errno) = self.exec_failed {
            let e = std::io::Error::from_raw_os_error(errno);
            return write!(f, "the command could not be executed: {e}");
        }
        match (self.exit_code, self.signal) {
            (Some(code), _) => write!(f, "exited with status {code}")?,
            (None, Some(sig)) => write!(f, "killed by signal {sig} ({})", signal_name(sig))?,
            (None, None) => write!(f, "ended without an exit status")?,
        }
        if let Some(d) = &self.denied {
            let name = d
                .name
                .clone()
                .unwrap_or_else(|| format!("syscall {}", d.nr));
            write!(
                f,
                "; the filter answered `{name}` (nr {}) with {}",
                d.nr, d.action
            )?;
        }
        Ok(())
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSYS => "SIGSYS",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGKILL => "SIGKILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGPIPE => "SIGPIPE",
        _ => "other",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    #[error("no command given")]
    EmptyCommand,
    #[error("argument {index} contains a NUL byte")]
    NulInArgument { index: usize },
    #[error("environment variable {index} contains a NUL byte")]
    NulInEnvironment { index: usize },
    #[error("a seccomp program needs 1 to {max} instructions, this one has {len}", max = BPF_MAXINSNS)]
    ProgramLength { len: usize },
    #[error("the filter was built for {arch} but this machine is {host}")]
    ForeignArch { arch: Arch, host: Arch },
    #[error("cannot create a pipe to the child")]
    Pipe {
        #[source]
        source: Errno,
    },
    #[error("cannot fork")]
    Fork {
        #[source]
        source: Errno,
    },
    #[error("cannot {request} child {pid}")]
    Ptrace {
        request: &'static str,
        pid: i32,
        #[source]
        source: Errno,
    },
    #[error("cannot wait for child {pid}")]
    Wait {
        pid: i32,
        #[source]
        source: Errno,
    },
    #[error("child could not set no_new_privs")]
    NoNewPrivs {
        #[source]
        source: Errno,
    },
    #[error("loading a filter without no_new_privs needs CAP_SYS_ADMIN")]
    LoadNeedsPrivilege {
        #[source]
        source: Errno,
    },
    #[error("the kernel refused the seccomp program")]
    Load {
        #[source]
        source: Errno,
    },
}

// Stages the child reports through the CLOEXEC pipe.
const STAGE_NNP: i32 = 1;
const STAGE_LOAD: i32 = 2;
const STAGE_EXEC: i32 = 3;
const CHILD_FAILED_EXIT: i32 = 127;

/// `si_code` of a SIGSYS raised by seccomp.
const SYS_SECCOMP: i32 = 1;

/// Kills and reaps the child unless it was reaped normally, so that an error
/// in the parent never leaves a stopped tracee behind.
struct Child {
    pid: libc::pid_t,
    reaped: bool,
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // SAFETY: pid is our unreaped child; SIGKILL ends it even when stopped.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        loop {
            let mut st = 0;
            // SAFETY: waiting on our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut st, libc::__WALL) };
            if r < 0 && Errno::last().0 == libc::EINTR {
                continue;
            }
            if r <= 0 || libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                break;
            }
            // A ptrace stop (e.g. the exit stop) still needs a restart.
            // SAFETY: restarting our own tracee.
            unsafe { ptrace(libc::PTRACE_CONT, self.pid, 0) };
        }
    }
}

struct Pipe {
    r: libc::c_int,
    w: libc::c_int,
}

impl Pipe {
    fn new(flags: libc::c_int) -> Result<Pipe, SandboxError> {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | flags) } != 0 {
            return Err(SandboxError::Pipe {
                source: Errno::last(),
            });
        }
        Ok(Pipe {
            r: fds[0],
            w: fds[1],
        })
    }

    fn close_r(&mut self) {
        close_fd(&mut self.r);
    }

    fn close_w(&mut self) {
        close_fd(&mut self.w);
    }
}

fn close_fd(fd: &mut libc::c_int) {
    if *fd >= 0 {
        // SAFETY: closing a descriptor this Pipe owns, once.
        unsafe { libc::close(*fd) };
        *fd = -1;
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.close_r();
        self.close_w();
    }
}

/// Everything the child needs, built before fork: after fork only
/// async-signal-safe calls are allowed.
struct Prepared {
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

fn prepare(argv: &[OsString]) -> Result<Prepared, SandboxError> {
    let Some(cmd) = argv.first() else {
        return Err(SandboxError::EmptyCommand);
    };
    let argv_c = argv
        .iter()
        .enumerate()
        .map(|(index, a)| {
            CString::new(a.as_bytes()).map_err(|_| SandboxError::NulInArgument { index })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let envp = std::env::vars_os()
        .enumerate()
        .map(|(index, (k, v))| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).map_err(|_| SandboxError::NulInEnvironment { index })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if cmd.is_empty() {
        return Err(SandboxError::EmptyCommand);
    }
    // execvp's PATH search, done here because it allocates.
    let candidates = if cmd.as_bytes().contains(&b'/') {
        vec![argv_c[0].clone()]
    } else {
        let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
        path.as_bytes()
            .split(|&b| b == b':')
            .filter_map(|dir| {
                let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
                let mut p = dir.to_vec();
                p.push(b'/');
                p.extend_from_slice(cmd.as_bytes());
                CString::new(p).ok()
            })
            .collect()
    };
    Ok(Prepared {
        candidates,
        argv: argv_c,
        envp,
    })
}

fn null_terminated(v: &[CString]) -> Vec<*const libc::c_char> {
    v.iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The child side. Only async-signal-safe calls; never returns.
///
/// # Safety
/// Must be called in a freshly forked child with pointers that stay valid.
unsafe fn child(
    go_r: libc::c_int,
    err_w: libc::c_int,
    no_new_privs: bool,
    fprog: &libc::sock_fprog,
    candidates: &[*const libc::c_char],
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> ! {
    let report = |stage: i32, errno: i32| -> ! {
        let msg = [stage, errno];
        libc::write(err_w, msg.as_ptr().cast(), 8);
        libc::_exit(CHILD_FAILED_EXIT)
    };
    // Wait until the parent has seized us, so no denial goes unobserved.
    let mut b = 0u8;
    if libc::read(go_r, (&mut b as *mut u8).cast(), 1) != 1 {
        libc::_exit(CHILD_FAILED_EXIT);
    }
    // Like std::process::Command: Rust ignores SIGPIPE and the calling thread
    // may block signals; the command should start with neither.
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    if no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        report(STAGE_NNP, *libc::__errno_location());
    }
    if libc::syscall(
        libc::SYS_seccomp,
        libc::SECCOMP_SET_MODE_FILTER,
        0,
        fprog as *const libc::sock_fprog,
    ) != 0
    {
        report(STAGE_LOAD, *libc::__errno_location());
    }
    // execvp semantics: keep searching past ENOENT-like errors, prefer EACCES.
    let mut saw_eacces = false;
    let mut last = libc::ENOENT;
    for &path in candidates {
        libc::execve(path, argv, envp);
        last = *libc::__errno_location();
        match last {
            libc::EACCES => saw_eacces = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => break,
        }
    }
    report(STAGE_EXEC, if saw_eacces { libc::EACCES } else { last })
}

/// Run `argv` under `program` and report how it ended.
pub fn run_under_filter(
    program: &[SockFilter],
    native: Arch,
    no_new_privs: bool,
    argv: &[OsString],
) -> Result<SandboxReport, SandboxError> {
    let host = Arch::native();
    if native != host {
        return Err(SandboxError::ForeignArch { arch: native, host });
    }
    if program.is_empty() || program.len() > BPF_MAXINSNS {
        return Err(SandboxError::ProgramLength { len: program.len() });
    }
    let prepared = prepare(argv)?;
    let candidates: Vec<*const libc::c_char> =
        prepared.candidates.iter().map(|c| c.as_ptr()).collect();
    let argv_p = null_terminated(&prepared.argv);
    let envp_p = null_terminated(&prepared.envp);
    let fprog = libc::sock_fprog {
        // Checked against BPF_MAXINSNS above.
        len: program.len() as u16,
        // SockFilter is repr(C) with the layout of struct sock_filter; the
        // kernel only reads through this pointer.
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    let mut go = Pipe::new(0)?;
    // Non-blocking: a sibling forked concurrently by another thread may hold
    // a copy of the write end until it execs, and we read only once our child
    // is gone, when its report (if any) is already in the pipe.
    let mut err = Pipe::new(libc::O_NONBLOCK)?;

    // SAFETY: the child branch only runs `child`, which is async-signal-safe.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SandboxError::Fork {
            source: Errno::last(),
        });
    }
    if pid == 0 {
        // SAFETY: freshly forked; all pointers were built before fork.
        unsafe {
            child(
                go.r,
                err.w,
                no_new_privs,
                &fprog,
                &candidates,
                argv_p.as_ptr(),
                envp_p.as_ptr(),
            )
        }
    }
    let mut child = Child { pid, reaped: false };
    go.close_r();
    err.close_w();

    let opts = libc::PTRACE_O_TRACEEXIT | libc::PTRACE_O_TRACEEXEC | libc::PTRACE_O_EXITKILL;
    // SAFETY: seizing our own child.
    if unsafe { ptrace(libc::PTRACE_SEIZE, pid, opts as usize) } != 0 {
        return Err(ptrace_err("seize", pid));
    }
    let b = 1u8;
    // SAFETY: writing one byte from a live buffer.
    if unsafe { libc::write(go.w, (&b as *const u8).cast(), 1) } != 1 {
        return Err(SandboxError::Pipe {
            source: Errno::last(),
        });
    }
    go.close_w();

    let mut report = SandboxReport::default();
    let mut exec_seen = false;
    loop {
        let st = wait(pid)?;
        if libc::WIFEXITED(st) {
            report.exit_code = Some(libc::WEXITSTATUS(st));
            break;
        }
        if libc::WIFSIGNALED(st) {
            report.signal = Some(libc::WTERMSIG(st));
            break;
        }
        if !libc::WIFSTOPPED(st) {
            continue;
        }
        let sig = libc::WSTOPSIG(st);
        let mut inject = 0;
        match st >> 16 {
            libc::PTRACE_EVENT_EXEC => exec_seen = true,
            libc::PTRACE_EVENT_EXIT => {
                if report.denied.is_none() {
                    report.denied = killed_by_filter(pid, program, native)?;
                }
            }
            // Group-stop of a seized tracee: just let it run on.
            libc::PTRACE_EVENT_STOP => {}
            _ => {
                if sig == libc::SIGSYS && report.denied.is_none() {
                    report.denied = trapped_by_filter(pid, native)?;
                }
                inject = sig;
            }
        }
        // SAFETY: restarting our own stopped tracee.
        if unsafe { ptrace(libc::PTRACE_CONT, pid, inject as usize) } != 0 {
            return Err(ptrace_err("continue", pid));
        }
    }
    child.reaped = true;

    if !exec_seen {
        // The child is gone, so this read cannot block: EOF or its report.
        let mut msg = [0i32; 2];
        // SAFETY: reading at most 8 bytes into msg.
        let n = unsafe { libc::read(err.r, msg.as_mut_ptr().cast(), 8) };
        if n == 8 {
            let source = Errno(msg[1]);
            match msg[0] {
                STAGE_NNP => return Err(SandboxError::NoNewPrivs { source }),
                STAGE_LOAD if msg[1] == libc::EACCES && !no_new_privs => {
                    return Err(SandboxError::LoadNeedsPrivilege { source })
                }
                STAGE_LOAD => return Err(SandboxError::Load { source }),
                _ => {
                    // The exit code is our helper's, not the command's.
                    report.exec_failed = Some(msg[1]);
                    report.exit_code = None;
                }
            }
        }
    }
    Ok(report)
}

/// `ptrace(2)` with a null `addr`; glibc reads `data` as a pointer, so pass
/// a pointer-sized value rather than an int.
unsafe fn ptrace(request: libc::c_uint, pid: libc::pid_t, data: usize) -> libc::c_long {
    libc::ptrace(
        request,
        pid,
        std::ptr::null_mut::<libc::c_void>(),
        data as *mut libc::c_void,
    )
}

fn ptrace_err(request: &'static str, pid: i32) -> SandboxError {
    SandboxError::Ptrace {
        request,
        pid,
        source: Errno::last(),
    }
}

fn wait(pid: libc::pid_t) -> Result<libc::c_int, SandboxError> {
    loop {
        let mut st = 0;
        // SAFETY: waiting on our own child; __WALL includes ptrace stops.
        if unsafe { libc::waitpid(pid, &mut st, libc::__WALL) } == pid {
            return Ok(st);
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            return Err(SandboxError::Wait { pid, source: e });
        }
    }
}

/// The arch a SIGSYS's `si_arch` names; x32 shares x86_64's audit value.
fn arch_of(audit: u32, nr: i32, native: Arch) -> Arch {
    if audit == Arch::X86_64.audit_arch() && nr & 0x4000_0000 != 0 {
        return Arch::X32;
    }
    if audit == native.audit_arch() {
        return native;
    }
    Arch::ALL
        .into_iter()
        .find(|a| a.audit_arch() == audit)
        .unwrap_or(native)
}

/// At a SIGSYS signal-delivery stop: was it `SECCOMP_RET_TRAP`, and for what?
fn trapped_by_filter(pid: i32, native: Arch) -> Result<Option<DeniedSyscall>, SandboxError> {
    // SAFETY: siginfo_t is plain data; zeroed is valid.
    let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel fills si for our stopped tracee.
    if unsafe { ptrace(libc::PTRACE_GETSIGINFO, pid, &mut si as *mut _ as usize) } != 0 {
        return Err(ptrace_err("read siginfo of", pid));
    }
    if si.si_code != SYS_SECCOMP {
        return Ok(None);
    }
    // SIGSYS's union member { void *call_addr; int syscall; unsigned arch; }
    // is not exposed by libc. The union follows three ints, pointer-aligned.
    let union_at = (3 * 4usize).next_multiple_of(std::mem::align_of::<*const u8>());
    let base = union_at + std::mem::size_of::<*const u8>();
    // SAFETY: reading two i32/u32 inside the 128-byte siginfo_t.
    let (nr, audit) = unsafe {
        let p = (&si as *const libc::siginfo_t).cast::<u8>();
        (
            std::ptr::read_unaligned(p.add(base).cast::<i32>()),
            std::ptr::read_unaligned(p.add(base + 4).cast::<u32>()),
        )
    };
    let arch = arch_of(audit, nr, native);
    Ok(Some(DeniedSyscall {
        nr,
        name: syscall_name(nr, arch),
        action: Action::Trap,
    }))
}

/// At the exit stop: did the filter kill the process, and on which syscall?
fn killed_by_filter(
    pid: i32,
    program: &[SockFilter],
    native: Arch,
) -> Result<Option<DeniedSyscall>, SandboxError> {
    let mut status: libc::c_ulong = 0;
    // SAFETY: the kernel stores the pending exit status in `status`.
    if unsafe {
        ptrace(
            libc::PTRACE_GETEVENTMSG,
            pid,
            &mut status as *mut _ as usize,
        )
    } != 0
    {
        return Err(ptrace_err("read exit status of", pid));
    }
    let status = status as libc::c_int;
    if !libc::WIFSIGNALED(status) || libc::WTERMSIG(status) != libc::SIGSYS {
        return Ok(None);
    }
    let Some(data) = syscall_at_stop(pid, native)? else {
        return Ok(None);
    };
    // A SIGSYS death is the filter's doing only if the program says so for
    // these registers (another thread, or a plain kill -SYS, could be the cause).
    let action = cbpf::run(program, &data)
        .ok()
        .and_then(Action::from_ret)
        .filter(|a| matches!(a, Action::KillProcess | Action::KillThread));
    Ok(action.map(|action| DeniedSyscall {
        nr: data.nr,
        name: syscall_name(data.nr, arch_of(data.arch, data.nr, native)),
        action,
    }))
}

#[cfg(target_arch = "x86_64")]
fn syscall_at_stop(pid: i32, native: Arch) -> Result<Option<SeccompData>, SandboxError> {
    // SAFETY: plain data; the kernel fills it for our stopped tracee.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    if unsafe { ptrace(libc::PTRACE_GETREGS, pid, &mut regs as *mut _ as usize) } != 0 {
        return Err(ptrace_err("read registers of", pid));
    }
    // orig_rax is -1 outside a syscall.
    let Ok(nr) = i32::try_from(regs.orig_rax as i64) else {
        return Ok(None);
    };
    if nr < 0 {
        return Ok(None);
    }
    Ok(Some(SeccompData {
        nr,
        arch: native.audit_arch(),
        instruction_pointer: regs.rip,
        args: [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9],
    }))
}

/// Register layouts of other hosts are not wired up: a kill is still
/// reported through `signal`, just without naming the syscall.
#[cfg(not(target_arch = "x86_64"))]
fn syscall_at_stop(_pid: i32, _native: Arch) -> Result<Option<SeccompData>, SandboxError> {
    Ok(None)
}
