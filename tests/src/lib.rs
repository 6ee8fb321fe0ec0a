//! Helpers shared by the end-to-end tests.

pub mod learn;
pub mod runc;
