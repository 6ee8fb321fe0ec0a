//! `nodeproof trace`: stream denials, then the exact counts.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use nodeproof::config::Config;
use nodeproof::pods::denials::{PodIndex, TraceChanges};
use nodeproof_trace::{KubeletLogs, OutputFormat, TraceOptions};

use super::{parse_duration, stop_on_sigint_sigterm, Format, OutputArgs, STOP};

#[derive(clap::Args)]
pub(crate) struct TraceArgs {
    /// How long to trace, e.g. 10s, 2m, 500ms (default: until Ctrl-C).
    #[arg(long, value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// Only this command name (comm).
    #[arg(long)]
    pub(crate) comm: Option<String>,
    /// Only this process id.
    #[arg(long)]
    pub(crate) pid: Option<u32>,
    /// Only this pod: its name or UID (names from the kubelet's /var/log/pods).
    #[arg(long)]
    pub(crate) pod: Option<String>,
    /// Only pods of this namespace.
    #[arg(long, short = 'n')]
    pub(crate) namespace: Option<String>,
    /// Only this container: its name or a prefix of its runtime id.
    #[arg(long)]
    pub(crate) container: Option<String>,
    /// Where the kubelet keeps pod logs, whose names give the pods' names
    /// (its podLogsDir setting).
    #[arg(long, value_name = "DIR", default_value = nodeproof_trace::kubelet_logs::DEFAULT_POD_LOGS_DIR)]
    pub(crate) pod_logs_dir: PathBuf,
    /// Force a detection strategy: fexit, tp_btf or tracepoint (default: the first that loads).
    #[arg(long)]
    pub(crate) strategy: Option<nodeproof_trace::Strategy>,
    /// Kernel BTF file to use instead of /sys/kernel/btf/vmlinux (e.g. from BTFHub,
    /// for kernels without CONFIG_DEBUG_INFO_BTF; serves the tracepoint strategy).
    #[arg(long)]
    pub(crate) btf: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) out: OutputArgs,
}

impl TraceArgs {
    fn options(&self) -> TraceOptions {
        TraceOptions {
            duration: self.duration,
            comm: self.comm.clone(),
            pid: self.pid,
            pod: self.pod.clone(),
            namespace: self.namespace.clone(),
            container: self.container.clone(),
            format: match self.out.output {
                Format::Text => OutputFormat::Text,
                Format::Json => OutputFormat::Json,
                Format::Yaml => OutputFormat::Yaml,
            },
            strategy: self.strategy,
            btf_path: self.btf.clone(),
        }
    }
}

pub(crate) fn trace(args: &TraceArgs, config: &Config, root: &Path) -> Result<ExitCode> {
    let opts = args.options();
    // Pod and container names come from the kubelet's log directories, so
    // a node without API credentials can filter by them too.
    let pods = KubeletLogs::new(&args.pod_logs_dir, "/var/log/containers");
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
    // Where the agent keeps the profiles' versions (its state directory,
    // else where nodeproof.service's StateDirectory= puts it): a denied
    // container that started after an edit is named with the change.
    let state = config
        .daemon
        .state_dir()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    let versions =
        nodeproof::daemon::versions::load(&state.join(nodeproof::daemon::versions::STATE_FILE));
    let opts_pods = nodeproof::pods::node::PodsOptions::from_config(config, root);
    let lookup = TraceChanges::new(&pods, versions, || node_pods(&opts_pods));
    nodeproof_trace::run(&opts, &mut std::io::stdout().lock(), &STOP, &lookup)
        .context("seccomp tracing failed")?;
    Ok(ExitCode::SUCCESS)
}

/// Where nodeproof.service keeps its state (`StateDirectory=nodeproof`).
const DEFAULT_STATE_DIR: &str = "/var/lib/nodeproof";

/// This node's pods from the API server, for their profiles and their
/// containers' starts; none (said once) without an API server.
fn node_pods(opts: &nodeproof::pods::node::PodsOptions) -> PodIndex {
    let mut index = PodIndex::default();
    let listed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let (client, node) = nodeproof::pods::node::connect(opts)
                    .await
                    .map_err(|e| e.to_string())?;
                nodeproof_apiclient::read::pods_on(&client, &node)
                    .await
                    .map_err(|e| e.to_string())
            })
        });
    match listed {
        Ok(pods) => pods.iter().for_each(|p| index.upsert(p)),
        Err(e) => eprintln!("profile changes are not named: this node's pods cannot be read ({e})"),
    }
    index
}
