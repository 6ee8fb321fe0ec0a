//! The pods' judgement as one check round: their seccomp references
//! judged here, as findings and their part of `SeccompProfilesReady`, and
//! the annotated RuntimeClasses judged on this node.

use nodeproof_findings::reason::ContractReason;
use nodeproof_findings::{Check, Finding, Status};
use nodeproof_report::contract::ContractState;
use nodeproof_report::contract_labels::ContractVerdict;

use super::node::PodsOnce;
use super::verdict::PodFinding;
use crate::judge::Round;

/// One pod reference that cannot be used here, as a finding of `check`.
pub fn finding(f: &PodFinding) -> Finding {
    let container = f
        .container
        .as_ref()
        .map(|c| format!(" container {c}"))
        .unwrap_or_default();
    Finding {
        detail: None,
        check: Check::POD_PROFILE,
        subject: format!("{}/{}{container}", f.namespace, f.pod),
        status: Status::Failed,
        reason: f.reason.into(),
        message: format!("{}: {}", f.subject, f.message),
    }
}

/// An annotated RuntimeClass judged on this node, as a finding of `check`
/// (what the daemon labels the Node with).
pub fn contract_finding(v: &ContractVerdict) -> Finding {
    let (status, message) = match v.state {
        ContractState::Ready => (Status::Ok, format!("{} = ready", v.label_key())),
        ContractState::NotReady => (
            Status::Failed,
            format!("{} = not-ready: {}", v.label_key(), v.cause),
        ),
    };
    Finding {
        detail: None,
        check: Check::RUNTIMECLASS_CONTRACT,
        subject: v.class.clone(),
        status,
        reason: match v.state {
            ContractState::Ready => ContractReason::Ready,
            ContractState::NotReady => ContractReason::NotReady,
        }
        .into(),
        message,
    }
}

/// The round for one judgement of the node's pods.
pub fn round(once: &PodsOnce) -> Round {
    Round {
        findings: once
            .findings
            .iter()
            .map(finding)
            .chain(once.contracts.iter().map(contract_finding))
            .collect(),
        conditions: vec![once.condition.clone()],
    }
}
