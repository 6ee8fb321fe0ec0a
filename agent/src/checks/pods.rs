//! The pods bound to this node as node health: their seccomp references
//! judged here (`crate::pods`), as findings and their part of
//! `SeccompProfilesReady`.

use std::path::{Path, PathBuf};

use nodeproof_findings::{Check, Finding, NotJudged, NotJudgedCause, Status};
use nodeproof_kube::connect::ConnectError;

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
        context: config.report.context.clone(),
        node_name: config.report.node_name.clone(),
        host_root: config.report.host_root.clone(),
        seccomp_root: seccomp_root.to_path_buf(),
        lint: profiles::lint_options(&config.seccomp),
        etc: PathBuf::from("/etc"),
    }
}

/// What `check` says of the pods when they are not judged.
pub const SUBJECT: &str = "pods";

/// One judgement of the pods bound to this node, or why there is none:
/// without credentials (an offline node, nothing asked for them) and when
/// the credentials or the API server fail (asked for, so the command fails).
pub fn judge_once(opts: &PodsOptions) -> Result<PodsOnce, NotJudged> {
    crate::pods::node::once(opts).map_err(|e| {
        let not_judged = not_judged(&e, opts);
        if not_judged.fails {
            tracing::warn!(nodeproof_check = "pods", error = %nodeproof_findings::errors::error_chain(&e), "pods could not be judged");
        } else {
            tracing::info!(nodeproof_check = "pods", "{e}; pods are not judged");
        }
        not_judged
    })
}

/// Why the pods were not judged, in one line with the remedy.
pub fn not_judged(e: &PodsRunError, opts: &PodsOptions) -> NotJudged {
    let (cause, message) = match e {
        PodsRunError::NoCredentials { .. } => {
            let lookup = nodeproof_kube::credentials::lookup_here(
                opts.kubeconfig.as_deref(),
                opts.host_root.as_deref(),
            );
            let looked: Vec<String> = lookup.looked.iter().map(|l| l.describe()).collect();
            (
                NotJudgedCause::NoCredentials,
                format!(
                    "no API credentials found: looked at {}; give --kubeconfig to judge the pods bound to this node",
                    looked.join(", ")
                ),
            )
        }
        PodsRunError::NoNodeName => (
            NotJudgedCause::NoNodeName,
            "the Node's name is not known: give --node-name or set NODE_NAME".into(),
        ),
        PodsRunError::Connect { source } => match &**source {
            ConnectError::NoNodeName => (
                NotJudgedCause::NoNodeName,
                "the Node's name is not known: give --node-name or set NODE_NAME".into(),
            ),
            e @ ConnectError::NodeNameMismatch { .. } => (NotJudgedCause::OtherNode, e.to_string()),
            ConnectError::Credentials {
                credentials,
                source,
            }
            | ConnectError::TaintCredentials {
                credentials,
                source,
            } => (
                NotJudgedCause::CredentialsUnusable,
                format!(
                    "cannot use {credentials}: {}; give a readable kubeconfig with --kubeconfig",
                    innermost(&**source)
                ),
            ),
        },
        e @ PodsRunError::NotOwnNode { .. } => (
            NotJudgedCause::OtherNode,
            format!("{e}; give --node-name of the credential's Node or that Node's credentials"),
        ),
        PodsRunError::Read { what, node, source } => (
            NotJudgedCause::ApiServer,
            format!(
                "cannot read {what} for node {node}: {}; check that the API server answers and that the credential may read them (deploy/base/rbac-agent.yaml)",
                api_text(source)
            ),
        ),
        PodsRunError::Timeout { after } => (
            NotJudgedCause::ApiServer,
            format!(
                "the API server did not answer within {} s; check that it is reachable from this node",
                after.as_secs()
            ),
        ),
        e @ (PodsRunError::GetPod { .. }
        | PodsRunError::PodName { .. }
        | PodsRunError::Runtime(_)) => (
            NotJudgedCause::ApiServer,
            nodeproof_findings::errors::error_chain(e),
        ),
    };
    NotJudged::new(Check::PodProfile, SUBJECT, cause, message)
}

/// The last cause of `e`: what a person can act on (the file that is
/// missing), without the layers that repeat the path.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// A kube error as a sentence: the API server's own message and code,
/// never kube's `Status { .. }` dump.
fn api_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("the API server answered {} ({})", s.code, s.message),
        e => innermost(e),
    }
}
