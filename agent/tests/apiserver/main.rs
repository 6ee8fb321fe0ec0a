//! Against the test API server (crates/testapi, started in this process by
//! each test), as one test binary: each module was its own, linking the
//! whole agent again.
//!
//! What belongs here: a test whose outside world is the test API server and
//! what this checkout builds, and nothing of the machine's: the agent's
//! library in-process, or the `nodeproof` binary for a command, a
//! `nodeproof run` or a `gate-controller` the test starts, reads and stops;
//! the fake NVML and the fake kubelet; a tool it skips without (promtool).
//! No root and no kernel feature: a test that traces real denials belongs
//! in `kernel`, one that plays systemd to the daemon (notify socket,
//! signals, restarts under it) in `daemon`.
//!
//! Safe as threads of one process: every API server, agent, port
//! (`support::agent::free_port`), directory and fake library is the test's
//! own; none changes the environment, the current directory, a signal
//! disposition or a limit of this process; a simulated clock is the
//! test's own value, never the process's. The fakes are built once, by the
//! one `fake_nvml_support` module declared here.
//!
//! `cargo test -p nodeproof --test apiserver <module>` runs one part.

#[path = "../support/fake_nvml.rs"]
mod fake_nvml_support;
#[path = "../support/mod.rs"]
mod support;

mod check_equals_run;
mod cluster_check;
mod cluster_policy;
mod gate_controller;
mod gate_device_taints;
mod gpu_pods;
mod ops_monitoring;
mod pods_apiserver;
mod printed_errors;
mod rbac_agent;
mod report_apiserver;
mod report_identity;
mod report_writes;
mod runtimeclass_contracts;
