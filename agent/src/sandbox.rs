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
//! The whole process tree is followed: `PTRACE_O_TRACECLONE`, `TRACEFORK` and
//! `TRACEVFORK` make the kernel attach every new thread and process to the
//! tracer (each starts with a `PTRACE_EVENT_STOP`), so a denial in a thread, a
//! forked child or an exec'd grandchild is named with its task (tid and comm)
//! just as one in the command itself. One `waitpid(-1, __WALL | __WNOTHREAD)`
//! loop serves every task; each stop is restarted with its own signal.
//!
//! The run ends when every task has exited, so a child left running in the
//! background (even one that called `setsid`) is still watched, or when the
//! optional time limit runs out and a watchdog thread kills every live task;
//! the exit status reported is the command's own process's, as a shell would
//! report it.
//! At most [`MAX_TRACED_TASKS`] tasks are followed at once: past that (a fork
//! bomb) every task is killed and the run fails with
//! [`SandboxError::TooManyTasks`]. `PTRACE_O_EXITKILL` kills every tracee if
//! the tester itself dies (e.g. Ctrl-C).

use std::collections::HashSet;
use std::ffi::{CString, OsString};
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::prctl;
use nix::sys::ptrace::{self, Options};
use nix::sys::signal::{self, SigSet, SigmaskHow, Signal};
use nix::unistd::{self, ForkResult, Pid};

use nodeproof_seccomp::cbpf::{self, SeccompData};
use nodeproof_seccomp::cbpf::{SockFilter, BPF_MAXINSNS};
use nodeproof_seccomp::compiler::Errno;
use nodeproof_seccomp::filter::{Action, Arch};
use nodeproof_seccomp::syscalls::syscall_name;

/// Most live tasks (threads and processes) one run follows.
pub const MAX_TRACED_TASKS: usize = 1024;

/// A syscall the filter stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedSyscall {
    pub nr: i32,
    pub name: Option<String>,
    pub action: Action,
    /// The task (thread id) that made the call.
    pub tid: i32,
    /// Its `comm` (`/proc/TID/comm`) at the time, when it could be read.
    pub comm: Option<String>,
}

/// What happened to the command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxReport {
    /// Exit status, when the command's own process exited normally.
    pub exit_code: Option<i32>,
    /// Terminating signal, when a signal killed the command's own process.
    pub signal: Option<i32>,
    /// The first syscall that was trapped or killed a task, in any process of
    /// the command's tree.
    pub denied: Option<DeniedSyscall>,
    /// errno of the failed `execve` (the command never ran; no exit code).
    pub exec_failed: Option<i32>,
    /// The time limit ran out and killed the tasks still alive.
    pub timed_out: bool,
}

impl SandboxReport {
    /// The command ran and exited 0, and the filter killed or trapped no
    /// task of its tree (a denied child can leave the parent exiting 0).
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && self.denied.is_none() && !self.timed_out
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
                "; the filter answered `{name}` (nr {}) with {} in task {}",
                d.nr, d.action, d.tid
            )?;
            if let Some(comm) = &d.comm {
                write!(f, " ({comm})")?;
            }
        }
        if self.timed_out {
            write!(f, "; the time limit killed the tasks still running")?;
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
    #[error("cannot wait for the command's tasks (leader {pid})")]
    Wait {
        pid: i32,
        #[source]
        source: Errno,
    },
    #[error("the command ran more than {limit} tasks at once; all were killed")]
    TooManyTasks { limit: usize },
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

/// The traced tasks still alive. Unless the run ended with every task
/// reaped, dropping it kills and reaps them all, so that an error in the
/// parent never leaves a stopped (or a forking) tracee behind.
/// Lives on the thread that traces: only it can wait for the tracees.
struct Tree {
    leader: Pid,
    tasks: Arc<Mutex<Tasks>>,
}

/// Shared with the time limit's watchdog, which kills every live task.
/// A task leaves `live` under the lock in the same step that reaps it, so a
/// pid the watchdog kills is never one the kernel has given out again.
struct Tasks {
    live: HashSet<Pid>,
    /// Tasks first seen at their own stop, before their parent's
    /// `PTRACE_EVENT_FORK/CLONE` stop: that event must not add them again,
    /// as they may have exited (and been reaped) meanwhile.
    early: HashSet<Pid>,
    timed_out: bool,
}

fn lock(tasks: &Mutex<Tasks>) -> MutexGuard<'_, Tasks> {
    // Nothing is left half-updated by a panic in the few lines under it.
    tasks.lock().unwrap_or_else(|e| e.into_inner())
}

impl Tasks {
    /// Follows `task` from now on, unless that makes too many; true if it
    /// was not followed yet.
    fn join(&mut self, task: Pid) -> Result<bool, SandboxError> {
        let new = self.live.insert(task);
        if new && self.live.len() > MAX_TRACED_TASKS {
            return Err(SandboxError::TooManyTasks {
                limit: MAX_TRACED_TASKS,
            });
        }
        Ok(new)
    }

    /// `task` stopped: a task not followed yet is a new one whose parent's
    /// creation event is still to come.
    fn stopped(&mut self, task: Pid) -> Result<(), SandboxError> {
        if self.join(task)? {
            self.early.insert(task);
        }
        Ok(())
    }

    /// The creation event of `task`: follow it unless it came first.
    fn created(&mut self, task: Pid) -> Result<(), SandboxError> {
        if !self.early.remove(&task) {
            self.join(task)?;
        }
        Ok(())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let mut tasks = lock(&self.tasks);
        if tasks.live.is_empty() {
            return;
        }
        // SIGKILL ends a task even when stopped; a pending SIGKILL also makes
        // fork fail, so the tree cannot grow while it is drained.
        for &t in &tasks.live {
            let _ = signal::kill(t, Signal::SIGKILL);
        }
        tasks.live.clear();
        // Until no tracee or child of this thread is left: a task not yet
        // seen (a child whose first stop was still queued) is killed there.
        while let Ok((t, st)) = wait_for(-1, self.leader) {
            if libc::WIFSTOPPED(st) {
                let _ = signal::kill(t, Signal::SIGKILL);
                // A ptrace stop (e.g. the exit stop) still needs a restart.
                let _ = cont(t, 0);
            }
        }
    }
}

fn pipe(flags: OFlag) -> Result<(OwnedFd, OwnedFd), SandboxError> {
    unistd::pipe2(OFlag::O_CLOEXEC | flags).map_err(|e| SandboxError::Pipe { source: errno(e) })
}

fn errno(e: nix::errno::Errno) -> Errno {
    Errno(e as i32)
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

/// `execve`'s arguments as C wants them, built before fork. Not nix's
/// `execve`: it builds these arrays itself, i.e. allocates, after fork.
/// Every pointer is into a `CString` of the borrowed [`Prepared`], and
/// `argv` and `envp` end in a null pointer.
struct ExecArgs<'a> {
    candidates: Vec<*const libc::c_char>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    _strings: PhantomData<&'a Prepared>,
}

impl Prepared {
    fn exec_args(&self) -> ExecArgs<'_> {
        fn null_terminated(v: &[CString]) -> Vec<*const libc::c_char> {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        }
        ExecArgs {
            candidates: self.candidates.iter().map(|c| c.as_ptr()).collect(),
            argv: null_terminated(&self.argv),
            envp: null_terminated(&self.envp),
            _strings: PhantomData,
        }
    }
}

/// A `sock_fprog` pointing at a program that outlives it.
struct Fprog<'a> {
    raw: libc::sock_fprog,
    _program: PhantomData<&'a [SockFilter]>,
}

impl<'a> Fprog<'a> {
    /// `program` must hold 1 to [`BPF_MAXINSNS`] instructions (checked by the caller).
    fn new(program: &'a [SockFilter]) -> Fprog<'a> {
        Fprog {
            raw: libc::sock_fprog {
                len: program.len() as u16,
                // SockFilter is repr(C) with the layout of struct sock_filter;
                // the kernel only reads through this pointer.
                filter: program.as_ptr() as *mut libc::sock_filter,
            },
            _program: PhantomData,
        }
    }
}

/// The child side: only async-signal-safe calls, no allocation (the parent
/// may have other threads, whose locks fork copied as they were); never
/// returns.
fn child(
    go_r: BorrowedFd<'_>,
    err_w: BorrowedFd<'_>,
    no_new_privs: bool,
    fprog: &Fprog<'_>,
    exec: &ExecArgs<'_>,
) -> ! {
    let report = |stage: i32, errno: i32| -> ! {
        let mut msg = [0u8; 8];
        msg[..4].copy_from_slice(&stage.to_ne_bytes());
        msg[4..].copy_from_slice(&errno.to_ne_bytes());
        let _ = unistd::write(err_w, &msg);
        exit_child()
    };
    // Wait until the parent has seized us, so no denial goes unobserved.
    let mut b = [0u8; 1];
    if unistd::read(go_r, &mut b) != Ok(1) {
        exit_child();
    }
    // Like std::process::Command: Rust ignores SIGPIPE and the calling thread
    // may block signals; the command should start with neither.
    let _ = signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    // SAFETY: SIG_DFL installs no handler; nix's `signal` is no safer here.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if no_new_privs {
        if let Err(e) = prctl::set_no_new_privs() {
            report(STAGE_NNP, e as i32);
        }
    }
    // SAFETY: `fprog` points at a program that outlives it (its borrow); the
    // kernel only reads it. nix has no seccomp(2) wrapper.
    let loaded = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &fprog.raw as *const libc::sock_fprog,
        )
    };
    if loaded != 0 {
        report(STAGE_LOAD, nix::errno::Errno::last_raw());
    }
    // execvp semantics: keep searching past ENOENT-like errors, prefer EACCES.
    let mut saw_eacces = false;
    let mut last = libc::ENOENT;
    for &path in &exec.candidates {
        // SAFETY: ExecArgs' pointers are into CStrings it borrows, and argv
        // and envp are null-terminated.
        unsafe { libc::execve(path, exec.argv.as_ptr(), exec.envp.as_ptr()) };
        last = nix::errno::Errno::last_raw();
        match last {
            libc::EACCES => saw_eacces = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => break,
        }
    }
    report(STAGE_EXEC, if saw_eacces { libc::EACCES } else { last })
}

/// `_exit(2)` with [`CHILD_FAILED_EXIT`]: not `std::process::exit`, which
/// runs the parent's exit handlers in the child; nix has no `_exit`.
fn exit_child() -> ! {
    // SAFETY: _exit has no preconditions and never returns.
    unsafe { libc::_exit(CHILD_FAILED_EXIT) }
}

/// Run `argv` under `program` and report how it ended. With `time_limit`,
/// every task still alive when it runs out is killed (the report says so).
pub fn run_under_filter(
    program: &[SockFilter],
    native: Arch,
    no_new_privs: bool,
    argv: &[OsString],
    time_limit: Option<Duration>,
) -> Result<SandboxReport, SandboxError> {
    let host = Arch::native();
    if native != host {
        return Err(SandboxError::ForeignArch { arch: native, host });
    }
    if program.is_empty() || program.len() > BPF_MAXINSNS {
        return Err(SandboxError::ProgramLength { len: program.len() });
    }
    let prepared = prepare(argv)?;
    let exec = prepared.exec_args();
    let fprog = Fprog::new(program);
    let (go_r, go_w) = pipe(OFlag::empty())?;
    // Non-blocking: a sibling forked concurrently by another thread may hold
    // a copy of the write end until it execs, and we read only once our child
    // is gone, when its report (if any) is already in the pipe.
    let (err_r, err_w) = pipe(OFlag::O_NONBLOCK)?;

    // SAFETY: the child branch only runs `child`, which is async-signal-safe
    // and allocates nothing: all it uses was built above.
    let pid = match unsafe { unistd::fork() } {
        Err(e) => return Err(SandboxError::Fork { source: errno(e) }),
        Ok(ForkResult::Child) => child(go_r.as_fd(), err_w.as_fd(), no_new_privs, &fprog, &exec),
        Ok(ForkResult::Parent { child }) => child,
    };
    let tree = Tree {
        leader: pid,
        tasks: Arc::new(Mutex::new(Tasks {
            live: HashSet::from([pid]),
            early: HashSet::new(),
            timed_out: false,
        })),
    };
    drop(go_r);
    drop(err_w);

    let opts = Options::PTRACE_O_TRACEEXIT
        | Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_EXITKILL
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK;
    ptrace::seize(pid, opts).map_err(|e| ptrace_err("seize", pid, e))?;
    // One byte to a pipe is written whole or not at all.
    unistd::write(&go_w, &[1]).map_err(|e| SandboxError::Pipe { source: errno(e) })?;
    drop(go_w);

    // Dropping `_stop_watchdog` (any return) ends the watchdog.
    let (_stop_watchdog, stopped) = mpsc::channel::<()>();
    if let Some(limit) = time_limit {
        let tasks = Arc::clone(&tree.tasks);
        std::thread::spawn(move || {
            if stopped.recv_timeout(limit) == Err(RecvTimeoutError::Timeout) {
                let mut tasks = lock(&tasks);
                tasks.timed_out = true;
                for &t in &tasks.live {
                    let _ = signal::kill(t, Signal::SIGKILL);
                }
            }
        });
    }

    let mut report = SandboxReport::default();
    let mut exec_seen = false;
    while !lock(&tree.tasks).live.is_empty() {
        // Peek first, then reap under the lock (see `Tasks`).
        let task = peek_any(pid)?;
        let mut tasks = lock(&tree.tasks);
        let (task, st) = wait_for(task.as_raw(), pid)?;
        if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
            tasks.live.remove(&task);
            if task == pid {
                if libc::WIFEXITED(st) {
                    report.exit_code = Some(libc::WEXITSTATUS(st));
                } else {
                    report.signal = Some(libc::WTERMSIG(st));
                }
            }
            continue;
        }
        if !libc::WIFSTOPPED(st) {
            continue;
        }
        // A new task's first stop can come before its parent's
        // PTRACE_EVENT_FORK/CLONE stop (ptrace(2), "Attaching and detaching"),
        // so any stop adds its task.
        tasks.stopped(task)?;
        if tasks.timed_out {
            // A task that joined after the watchdog's kill.
            let _ = signal::kill(task, Signal::SIGKILL);
        }
        let sig = libc::WSTOPSIG(st);
        let mut on_stop = || -> Result<libc::c_int, SandboxError> {
            let mut inject = 0;
            match st >> 16 {
                libc::PTRACE_EVENT_EXEC => {
                    exec_seen = true;
                    // A non-leader thread that execs takes over the leader's tid
                    // and its own tid vanishes without an exit report
                    // (ptrace(2), "execve(2) under ptrace").
                    let former = ptrace::getevent(task)
                        .map_err(|e| ptrace_err("read former tid of", task, e))?;
                    if former as libc::pid_t != task.as_raw() {
                        tasks.live.remove(&Pid::from_raw(former as libc::pid_t));
                    }
                }
                libc::PTRACE_EVENT_EXIT => {
                    if report.denied.is_none() {
                        report.denied = killed_by_filter(task, program, native)?;
                    }
                }
                // The new task joins here too, before its parent can go on (and
                // exit): otherwise the tree could look empty while the child's
                // first stop is still on its way.
                libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => {
                    let new = ptrace::getevent(task)
                        .map_err(|e| ptrace_err("read the new task of", task, e))?;
                    tasks.created(Pid::from_raw(new as libc::pid_t))?;
                }
                // A new task's first stop, or a group-stop of a seized tracee:
                // just let it run on.
                libc::PTRACE_EVENT_STOP => {}
                _ => {
                    if sig == libc::SIGSYS && report.denied.is_none() {
                        report.denied = trapped_by_filter(task, native)?;
                    }
                    inject = sig;
                }
            }
            Ok(inject)
        };
        let inject = match on_stop() {
            Ok(inject) => inject,
            // Killed while stopped (the time limit's SIGKILL, a sibling
            // thread's KILL_PROCESS or exec): ptrace(2) answers ESRCH for a
            // tracee that is no longer stopped, and wait reports its end.
            Err(SandboxError::Ptrace {
                source: Errno(libc::ESRCH),
                ..
            }) => continue,
            Err(e) => return Err(e),
        };
        // ESRCH: the task was killed meanwhile (e.g. another thread's exec or
        // a KILL_PROCESS); its exit is still reported by wait.
        match cont(task, inject) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => return Err(ptrace_err("continue", task, e)),
        }
    }

    report.timed_out = lock(&tree.tasks).timed_out;
    if !exec_seen {
        // The child is gone, so this read cannot block: EOF or its report.
        let mut msg = [0u8; 8];
        if unistd::read(&err_r, &mut msg) == Ok(8) {
            let word = |i: usize| i32::from_ne_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
            let (stage, code) = (word(0), word(4));
            let source = Errno(code);
            match stage {
                STAGE_NNP => return Err(SandboxError::NoNewPrivs { source }),
                STAGE_LOAD if code == libc::EACCES && !no_new_privs => {
                    return Err(SandboxError::LoadNeedsPrivilege { source })
                }
                STAGE_LOAD => return Err(SandboxError::Load { source }),
                _ => {
                    // The exit code is our helper's, not the command's.
                    report.exec_failed = Some(code);
                    report.exit_code = None;
                }
            }
        }
    }
    Ok(report)
}

fn ptrace_err(request: &'static str, pid: Pid, e: nix::errno::Errno) -> SandboxError {
    SandboxError::Ptrace {
        request,
        pid: pid.as_raw(),
        source: errno(e),
    }
}

/// `waitpid(which, __WALL | __WNOTHREAD)` (`which` -1: any), the tid and
/// raw status of the next tracee or child of this thread to change, ptrace
/// stops included. `__WNOTHREAD` keeps it off children of the caller's other
/// threads (another run, a `std::process::Command`), whose statuses are
/// theirs to reap. Not nix's `waitpid`: its `WaitStatus` holds a
/// `nix::sys::signal::Signal`, which has no real-time signals, so a tracee
/// stopped or killed by one (glibc's cancellation and setxid signals are)
/// would be an error. `leader` only names the run in the error.
fn wait_for(which: libc::pid_t, leader: Pid) -> Result<(Pid, libc::c_int), SandboxError> {
    loop {
        let mut st = 0;
        // SAFETY: waiting on our own children and tracees into a local int.
        let r = unsafe { libc::waitpid(which, &mut st, libc::__WALL | libc::__WNOTHREAD) };
        if r > 0 {
            return Ok((Pid::from_raw(r), st));
        }
        let e = nix::errno::Errno::last();
        if e != nix::errno::Errno::EINTR {
            return Err(wait_err(leader, e));
        }
    }
}

/// The next task [`wait_for`] would return, left unreaped (`WNOWAIT`).
fn peek_any(leader: Pid) -> Result<Pid, SandboxError> {
    loop {
        // SAFETY: an all-zero siginfo_t is valid; waitid fills it in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags =
            libc::WEXITED | libc::WSTOPPED | libc::WNOWAIT | libc::__WALL | libc::__WNOTHREAD;
        // SAFETY: waitid writes only into `info`.
        if unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) } == 0 {
            // SAFETY: a successful waitid fills si_pid (the task's tid).
            return Ok(Pid::from_raw(unsafe { info.si_pid() }));
        }
        let e = nix::errno::Errno::last();
        if e != nix::errno::Errno::EINTR {
            return Err(wait_err(leader, e));
        }
    }
}

fn wait_err(leader: Pid, e: nix::errno::Errno) -> SandboxError {
    SandboxError::Wait {
        pid: leader.as_raw(),
        source: errno(e),
    }
}

/// `PTRACE_CONT`, passing on signal `sig` (0: none). Not nix's
/// `ptrace::cont`, which takes a `Signal` and so cannot pass on a real-time one.
fn cont(pid: Pid, sig: libc::c_int) -> Result<(), nix::errno::Errno> {
    // SAFETY: restarting our own stopped tracee; `addr` is unused and `data`
    // is the signal number, not a pointer (glibc's prototype says void *).
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_CONT,
            pid.as_raw(),
            std::ptr::null_mut::<libc::c_void>(),
            sig as usize as *mut libc::c_void,
        )
    };
    nix::errno::Errno::result(r).map(drop)
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
fn trapped_by_filter(pid: Pid, native: Arch) -> Result<Option<DeniedSyscall>, SandboxError> {
    let si = ptrace::getsiginfo(pid).map_err(|e| ptrace_err("read siginfo of", pid, e))?;
    if si.si_code != SYS_SECCOMP {
        return Ok(None);
    }
    // SAFETY: a SIGSYS with si_code SYS_SECCOMP carries the union's sigsys
    // member (call_addr, syscall, arch), which is what these read.
    let (nr, audit) = unsafe { (si.si_syscall(), si.si_arch()) };
    let arch = arch_of(audit, nr, native);
    Ok(Some(DeniedSyscall {
        nr,
        name: syscall_name(nr, arch),
        action: Action::Trap,
        tid: pid.as_raw(),
        comm: comm(pid),
    }))
}

/// At the exit stop: did the filter kill the process, and on which syscall?
fn killed_by_filter(
    pid: Pid,
    program: &[SockFilter],
    native: Arch,
) -> Result<Option<DeniedSyscall>, SandboxError> {
    // The pending exit status.
    let status = ptrace::getevent(pid).map_err(|e| ptrace_err("read exit status of", pid, e))?
        as libc::c_int;
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
        tid: pid.as_raw(),
        comm: comm(pid),
    }))
}

/// A stopped task's `comm`; `/proc/TID` answers for any thread id.
fn comm(tid: Pid) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{tid}/comm")).ok()?;
    Some(String::from_utf8_lossy(raw.strip_suffix(b"\n").unwrap_or(&raw)).into_owned())
}

#[cfg(target_arch = "x86_64")]
fn syscall_at_stop(pid: Pid, native: Arch) -> Result<Option<SeccompData>, SandboxError> {
    let regs = ptrace::getregs(pid).map_err(|e| ptrace_err("read registers of", pid, e))?;
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
fn syscall_at_stop(_pid: Pid, _native: Arch) -> Result<Option<SeccompData>, SandboxError> {
    Ok(None)
}
