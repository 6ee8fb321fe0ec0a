//! Shared test support.

pub mod apiserver;
