//! nodeproof, the agent: configuration composed from each crate's section,
//! the checks assembled once (`checks`, pure) and what they observe
//! (`observe`: the reads, probes and lints), the daemon, the pods check and the
//! tools that combine several crates (`advise`, `sandbox`, `preflight`, `record`).
//! The binary (`main.rs`) only parses arguments and picks implementations.

pub mod advise;
pub mod checks;
pub mod config;
pub mod daemon;
pub mod judge;
pub mod memory;
pub mod observe;
pub mod oneshot;
pub mod pods;
pub mod record;
pub mod sandbox;
// Included by build.rs, which embeds the line; compiled here for its tests.
#[cfg(test)]
mod version_line;
