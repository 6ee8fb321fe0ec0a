//! The real kernel under the agent's library: seccomp filters, the eBPF
//! tracer and cgroup2, as one test binary: each module was its own, linking
//! the whole agent again.
//!
//! What belongs here: a test that needs this machine's kernel to do what it
//! does in production (load a filter, trace denials, record a cgroup's syscalls, make a kubepods-shaped
//! cgroup, run a command under `profile test`), and so root or CAP_BPF +
//! CAP_PERFMON, a writable cgroup2, busybox or a compiler; each names what it
//! needs with `require` and skips (fails under NODEPROOF_REQUIRE=1) without
//! it. The daemon's own tracer thread is tested in `daemon`, other kernels
//! under qemu in `trace_kernels`.
//!
//! Safe as threads of one process, which these tests share:
//! - a seccomp filter is only ever loaded in a child the test forks (a
//!   filter loaded here would confine every thread of the binary);
//! - a tracer counts only the pids of its own test's children, and the
//!   loader's raising of RLIMIT_MEMLOCK to its hard limit, process-wide, is
//!   the same for every test;
//! - `profile test`'s sandbox waits with `waitpid(-1, __WALL | __WNOTHREAD)`:
//!   the calling thread's children only, never another test's;
//! - the test cgroups are named `nodeproof-test-<pid>-<n>` from one counter,
//!   so `support::cgroup` is this binary's one copy (`crate::support`): a
//!   second copy of the module (as `#[path]` once gave trace_kernel) would
//!   count from 0 again, and two tests would share one cgroup.
//!
//! `cargo test -p nodeproof --test kernel <module>` runs one part.

#[path = "../support/mod.rs"]
mod support;

mod pods_denials_kernel;
mod pods_intended_kernel;
mod record_kernel;
mod sandbox_run;
mod trace_caps;
mod trace_kernel;
mod trace_stress;
