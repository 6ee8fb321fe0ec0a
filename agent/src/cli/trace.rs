//! `nodeproof trace`: stream denials, then the exact counts.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use nodeproof_trace::KubeletLogs;

use super::{stop_on_sigint_sigterm, STOP};

pub(crate) fn trace(pod_logs_dir: &Path, opts: nodeproof_trace::TraceOptions) -> Result<ExitCode> {
    // Pod and container names come from the kubelet's log directories, so
    // a node without API credentials can filter by them too.
    let pods = KubeletLogs::new(pod_logs_dir, "/var/log/containers");
    let needs = opts.filter().needs_names();
    if !needs.is_empty() && !pods.present() {
        // Nothing could match: an empty table would read as "no denials".
        bail!(
            "{} {} the pods' names, and {} (the kubelet's pod log directories) is not on this node: \
             run it on a Kubernetes node (--pod-logs-dir if the kubelet sets podLogsDir), \
             or filter by --pod UID or --container ID",
            needs.join(" and "),
            if needs.len() == 1 { "needs" } else { "need" },
            pods.pods_dir().display()
        );
    }
    stop_on_sigint_sigterm()?;
    nodeproof_trace::run(&opts, &mut std::io::stdout().lock(), &STOP, &pods)
        .context("seccomp tracing failed")?;
    Ok(ExitCode::SUCCESS)
}
