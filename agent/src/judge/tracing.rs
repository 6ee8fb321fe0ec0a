//! The tracer as node health: whether the eBPF programs load here, and
//! with which strategy (`SeccompTracingReady`).

use nodeproof_findings::{Check, Condition, ConditionStatus, ConditionType, Finding, Status};
use nodeproof_trace::Readiness;

use super::Round;

/// The round for a tracer that started (or failed to).
pub fn round(readiness: &Readiness) -> Round {
    Round {
        findings: vec![finding(readiness)],
        conditions: vec![condition(readiness)],
    }
}

/// The tracer as a finding of `nodeproof check`.
pub fn finding(readiness: &Readiness) -> Finding {
    Finding {
        check: Check::SECCOMP_TRACING,
        subject: "eBPF".into(),
        status: if readiness.ready {
            Status::Ok
        } else {
            Status::Failed
        },
        reason: readiness.reason.into(),
        // One sentence in `check`'s table, as on the Node; what each
        // strategy's refusal said (a verifier's log) only in `-o json` (and
        // the journal, where the loader logs each refusal).
        message: readiness.message.clone(),
        detail: (!readiness.detail.is_empty()).then(|| format!("Refused: {}", readiness.detail)),
    }
}

/// The `SeccompTracingReady` node condition.
pub fn condition(readiness: &Readiness) -> Condition {
    Condition {
        kind: ConditionType::SeccompTracingReady,
        status: ConditionStatus::from_bool(readiness.ready),
        reason: readiness.reason.as_str().into(),
        message: readiness.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_trace::{FailureReason, ProbeAttempt, Strategy, TraceError};

    /// What a locked-down kernel answers a fexit load: the verifier's whole log.
    fn verifier_dump() -> String {
        format!(
            "loading np_fexit_seccomp: the BPF_PROG_LOAD syscall failed. Verifier output: {}",
            "0: R1=ctx() R10=fp0 ; 0: (79) r6 = *(u64 *)(r1 +8) ".repeat(8)
        )
    }

    fn attempt(strategy: Strategy, reason: FailureReason) -> ProbeAttempt {
        ProbeAttempt {
            strategy,
            reason,
            detail: verifier_dump(),
        }
    }

    /// Every start attempt's readiness: each strategy loaded after none, one
    /// and two refusals for every reason; every way of failing.
    fn every_readiness() -> Vec<Readiness> {
        use Strategy::*;
        let mut all = Vec::new();
        for strategy in [Fexit, TpBtf, Tracepoint] {
            all.push(Readiness::loaded(strategy, &[]));
            for r in FailureReason::ALL {
                for s in FailureReason::ALL {
                    all.push(Readiness::loaded(strategy, &[attempt(Fexit, r)]));
                    all.push(Readiness::loaded(
                        strategy,
                        &[attempt(Fexit, r), attempt(TpBtf, s)],
                    ));
                }
            }
        }
        for r in FailureReason::ALL {
            for missing_caps in [vec![], vec!["CAP_BPF"], vec!["CAP_BPF", "CAP_PERFMON"]] {
                all.push(Readiness::failed(&TraceError::NoStrategy {
                    missing_caps,
                    attempts: vec![attempt(Fexit, r), attempt(TpBtf, r), attempt(Tracepoint, r)],
                }));
            }
        }
        for e in [
            TraceError::NotBuilt,
            TraceError::UnknownStrategy {
                name: "kprobe".into(),
            },
            TraceError::MissingMap { name: "COUNTS" },
            TraceError::NoStrategy {
                missing_caps: vec![],
                attempts: vec![],
            },
        ] {
            all.push(Readiness::failed(&e));
        }
        all
    }

    #[test]
    fn every_tracing_condition_message_is_short_and_the_detail_kept() {
        for r in every_readiness() {
            let c = condition(&r);
            assert!(
                nodeproof_findings::fits_condition(&c.message),
                "{} characters: {}",
                c.message.chars().count(),
                c.message
            );
            assert!(!c.message.contains("Verifier"), "{}", c.message);
            // The table's line is the condition's sentence; the kernel's
            // answers are the finding's detail, for `check -o json`.
            let f = finding(&r);
            assert_eq!(f.message, c.message);
            if r.detail.is_empty() {
                assert_eq!(f.detail, None);
            } else {
                assert!(
                    f.detail.as_deref().is_some_and(|d| d.contains(&r.detail)),
                    "{r:?}"
                );
            }
        }
        // A locked-down node (as this one): fexit refused with EPERM as root, tp_btf loaded.
        let r = Readiness::loaded(
            Strategy::TpBtf,
            &[attempt(Strategy::Fexit, FailureReason::BpfPermissionDenied)],
        );
        assert_eq!(
            condition(&r).message,
            "tracing seccomp denials with tp_btf; fexit was denied by the kernel (lockdown or an LSM)."
        );
        assert!(!finding(&r).message.contains("Verifier output"));
        assert!(finding(&r)
            .detail
            .is_some_and(|d| d.starts_with("Refused: ") && d.contains("Verifier output")));
    }
}
