//! `nodeproof pods`: this node's pods judged once, or watched and reported.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use nodeproof::config::Config;
use nodeproof::judge::{profiles, Origin};
use nodeproof::observe::lint_cache::LintCache;
use nodeproof_findings::ConditionStatus;

use super::{exit, stop_on_sigint_sigterm, Format, STOP};

pub(crate) fn pods(
    root: &Path,
    config: &Config,
    once: bool,
    (kubeconfig, context): (Option<PathBuf>, Option<String>),
    node_name: Option<String>,
    output: Format,
) -> Result<ExitCode> {
    use nodeproof::pods::node as pods;
    let mut opts = nodeproof::pods::node::PodsOptions::from_config(config, root);
    if kubeconfig.is_some() {
        opts.context = context;
    }
    opts.kubeconfig = kubeconfig.or(opts.kubeconfig);
    opts.node_name = node_name.or(opts.node_name);
    if !once {
        stop_on_sigint_sigterm()?;
        pods::daemon(
            &opts,
            config.report.policy(),
            config.report.runtimeclass_labels(),
            &STOP,
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    // One lint per file: the root's lint below finds the pods' reports.
    let lints = std::sync::Arc::new(LintCache::default());
    let r = pods::once(&opts, lints.clone())?;
    // What the agent reports for this node: the files' part folded in, as `run` folds it.
    let files = profiles::round(
        root,
        &nodeproof::observe::profiles::lint_root_cached(root, &opts.lint, &lints),
    );
    let node_condition = nodeproof::judge::node_conditions([
        (Origin::Own, &files.conditions[..]),
        (Origin::PodReferences, std::slice::from_ref(&r.condition)),
    ])
    .into_iter()
    .find(|c| c.kind == r.condition.kind);
    match output {
        Format::Text => {
            print!("{}", pods::render(&r, root));
            if let Some(c) = &node_condition {
                println!(
                    "reported: {} {} {}: {}",
                    c.kind, c.status, c.reason, c.message
                );
            }
        }
        Format::Json | Format::Yaml => {
            let findings: Vec<_> = r
                .findings
                .iter()
                .map(|f| {
                    serde_json::json!({"namespace": f.namespace, "pod": f.pod, "container": f.container,
                        "subject": f.subject, "reason": f.reason.as_str(), "event_reason": f.reason.event_reason(),
                        "message": f.message})
                })
                .collect();
            let v = serde_json::json!({"node": r.node, "pods": r.pods, "findings": findings,
                "condition": r.condition, "node_condition": node_condition});
            print!("{}", super::document(output, &v, false)?);
        }
    }
    Ok(exit(r.condition.status == ConditionStatus::True))
}
