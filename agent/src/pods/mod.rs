//! Pods on this node and their seccomp references (issue 5): which profiles
//! and RuntimeClasses they use, whether those work here, and the tracer's
//! denials attributed to them; and the RuntimeClass contracts judged on
//! this node (issue 14), whose labels steer the scheduler.

pub mod contract;
pub mod denials;
pub mod dra;
pub mod gpu_faults;
pub mod handlers;
pub mod node;

pub mod target;
pub mod verdict;
pub mod watch;
