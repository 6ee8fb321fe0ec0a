//! Shared by the fleet tests and the fleet_load example.

pub mod fleet;
