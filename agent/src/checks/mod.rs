//! The checks, each one function returning one round of findings and
//! conditions; `check`, `preflight`, `pods` and `run` call the same ones.

pub mod profiles;
