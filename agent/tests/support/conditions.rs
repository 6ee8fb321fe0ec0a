//! The condition the reporting tests feed their loops.
#![allow(dead_code)] // each test crate uses part of it

use nodeproof_findings::{Condition, ConditionStatus, ConditionType};

/// `SeccompProfilesReady` as the profiles check says it: True
/// `ProfilesLoad` or False `ProfileStartFails`, with `message`.
pub fn seccomp(ok: bool, message: &str) -> Condition {
    Condition::new(
        ConditionType::SeccompProfilesReady,
        ConditionStatus::from_bool(ok),
        if ok {
            "ProfilesLoad"
        } else {
            "ProfileStartFails"
        },
        message,
    )
}
