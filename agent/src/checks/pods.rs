//! The pods bound to this node as node health: their seccomp references
//! judged here (`crate::pods`), as findings and their part of
//! `SeccompProfilesReady`.

use std::path::{Path, PathBuf};

use nodeproof_findings::{Check, Finding, Status};

use super::{profiles, Round};
use crate::config::Config;
use crate::pods::node::{PodsOnce, PodsOptions, PodsRunError};
use crate::pods::verdict::PodFinding;
use nodeproof_kube::contract::ContractState;
use nodeproof_kube::contract_labels::{self, ContractVerdict};

pub use crate::pods::verdict::combine;

/// One pod reference that cannot be used here, as a finding of `check`.
pub fn finding(f: &PodFinding) -> Finding {
    let container = f
        .container
        .as_ref()
        .map(|c| format!(" container {c}"))
        .unwrap_or_default();
    Finding {
        check: Check::PodProfile,
        subject: format!("{}/{}{container}", f.namespace, f.pod),
        status: Status::Failed,
        reason: f.reason.as_str().into(),
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
        check: Check::RuntimeClassContract,
        subject: v.class.clone(),
        status,
        reason: match v.state {
            ContractState::Ready => contract_labels::EVENT_READY,
            ContractState::NotReady => contract_labels::EVENT_NOT_READY,
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

/// The pods check's settings from the config: the reporter's credentials
/// and node name, the profiles' lint settings, the runtime's config under
/// `/etc`. The CLI and the daemon both start from this.
pub fn options(config: &Config, seccomp_root: &Path) -> PodsOptions {
    PodsOptions {
        kubeconfig: config.report.kubeconfig.clone(),
        node_name: config.report.node_name.clone(),
        host_root: config.report.host_root.clone(),
        seccomp_root: seccomp_root.to_path_buf(),
        lint: profiles::lint_options(&config.seccomp),
        etc: PathBuf::from("/etc"),
    }
}

/// One judgement of the pods bound to this node, when credentials are
/// found: `None` without credentials (nothing to judge, as the daemon),
/// and a failure is logged once here and leaves the pods' part out.
pub fn judge_once(opts: &PodsOptions) -> Option<PodsOnce> {
    match crate::pods::node::once(opts) {
        Ok(once) => Some(once),
        Err(e @ PodsRunError::NoCredentials { .. }) => {
            tracing::info!(nodeproof_check = "pods", "{e}; pods are not judged");
            None
        }
        Err(e) => {
            tracing::warn!(nodeproof_check = "pods", error = %nodeproof_findings::errors::error_chain(&e), "pods could not be judged");
            None
        }
    }
}
