//! `nodeproof run` as a service, as one test binary: each module was its
//! own, linking the whole agent again.
//!
//! What belongs here: the daemon's life under a supervisor, which the test
//! plays: systemd's notify socket and watchdog (`daemon`, and
//! `daemon::notify` against the sd-notify crate in `sd_notify`), SIGHUP
//! reloads and SIGTERM, the pods watcher across reloads and API server
//! restarts, and (root) the daemon's own tracer thread reporting real
//! denials (`pods_daemon`), naming the profile edit they followed and
//! keeping the profiles' versions across a restart (`versions_daemon`), and
//! its recorder writing a pod's recording (`record_daemon`). A test that only starts `nodeproof run` to read
//! what it writes to the test API server belongs in `apiserver`; systemd
//! itself, in `systemd_nspawn`.
//!
//! Safe as threads of one process: each agent gets its own directory, port
//! (`free_port`) and notify socket, passed in its own environment; the one
//! test that changes this process's environment (`sd_notify`) runs in a
//! child process of its own, and the kubepods cgroups come from the one
//! `support::cgroup` counter.
//!
//! `cargo test -p nodeproof --test daemon <module>` runs one part.

#[path = "../support/mod.rs"]
mod support;

mod daemon;
mod pods_daemon;
mod record_daemon;
mod sd_notify;
mod versions_daemon;
