//! `nodeproof advise`: the smallest profile change that allows observed denials.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use nodeproof::config::Config;
use nodeproof_seccomp::lint;

use super::{exit, lint_options, parse_duration, Format, ModeArgs, OutputArgs, STOP};

#[derive(clap::Args)]
pub(crate) struct AdviseArgs {
    /// Only denials of this pod (NAMESPACE/NAME), as resolved in the trace. Without
    /// --profile, the pod is read from the API server and its profile file patched.
    #[arg(long, required_unless_present = "profile")]
    pub(crate) pod: Option<String>,
    /// Only this container: its name (resolved through the pod's status; needs the API
    /// server) or a prefix of its container id, as trace rows carry.
    #[arg(long)]
    pub(crate) container: Option<String>,
    /// The profile to patch (default: the --pod container's Localhost profile under the seccomp root).
    #[arg(long)]
    pub(crate) profile: Option<PathBuf>,
    /// Kubeconfig to read the pod with (default: the kubelet's, then in-cluster).
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The --kubeconfig file's context instead of its current-context (as kubectl --context).
    #[arg(long, requires = "kubeconfig")]
    pub(crate) context: Option<String>,
    /// A saved `nodeproof trace -o json` output.
    #[arg(long, conflicts_with = "duration")]
    pub(crate) from: Option<PathBuf>,
    /// Trace live for this long instead, e.g. 30s, 2m (default without --from: 10s;
    /// needs root or CAP_BPF+CAP_PERFMON). Run the workload meanwhile.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
    #[command(flatten)]
    pub(crate) mode: ModeArgs,
    #[command(flatten)]
    pub(crate) out: OutputArgs,
}

/// How long `advise` traces live when given no saved trace.
const LIVE_TRACE: Duration = Duration::from_secs(10);

/// What `--pod`/`--container`/`--profile` point at. The pod is read only
/// when needed: for its profile, to turn a container name into its id, or
/// for its UID (a live trace resolves no pod names).
fn advise_target(
    args: &AdviseArgs,
    config: &Config,
    root: &Path,
) -> Result<nodeproof::pods::target::Target> {
    use nodeproof::pods::{node::get_pod, node::PodsRunError, target};
    let given = target::Target {
        pod_uid: None,
        container: None,
        container_id: args.container.clone(),
        profile: args.profile.clone(),
        no_new_privileges: None,
    };
    let Some(key) = args.pod.as_deref() else {
        return Ok(given);
    };
    if args.profile.is_some() && args.container.is_none() && args.from.is_some() {
        return Ok(given);
    }
    let kubeconfig = args
        .kubeconfig
        .clone()
        .or_else(|| config.report.kubeconfig.clone());
    let context = args.kubeconfig.as_ref().and(args.context.as_deref());
    let pod = match get_pod(kubeconfig.as_deref(), context, key) {
        Ok(pod) => pod,
        // Offline with a profile given: the container is taken as an id prefix, as before.
        Err(e @ PodsRunError::NoCredentials { .. }) if args.profile.is_some() => {
            if args.from.is_none() {
                eprintln!(
                    "warning: {e}: a live trace names no pods, so --pod {key} may match no denial"
                );
            }
            return Ok(given);
        }
        Err(e) => return Err(e.into()),
    };
    let mut t = target::resolve(
        &pod,
        args.container.as_deref(),
        args.profile.is_none(),
        root,
    )?;
    if let Some(p) = &args.profile {
        t.profile = Some(p.clone());
    }
    Ok(t)
}

pub(crate) fn advise(args: &AdviseArgs, config: &Config, root: &Path) -> Result<ExitCode> {
    use nodeproof::advise;
    let target = advise_target(args, config, root)?;
    let Some(profile) = target.profile.clone() else {
        bail!("no profile to patch (give --profile or --pod)");
    };
    if args.profile.is_none() || target.container.is_some() {
        eprintln!(
            "advising on {} for pod {}{}",
            profile.display(),
            args.pod.as_deref().unwrap_or(""),
            target
                .container
                .as_ref()
                .map_or(String::new(), |c| format!(" container {c}"))
        );
    }
    let filter = advise::TraceFilter {
        pod: args.pod.clone(),
        container_id: target.container_id.clone(),
        pod_uid: target.pod_uid.clone(),
    };
    let denied = match &args.from {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            advise::denials_from_trace(&path.to_string_lossy(), &text, &filter)?
        }
        None => {
            let duration = args.duration.unwrap_or(LIVE_TRACE);
            // A live trace waits: say for how long, and that the workload must run meanwhile.
            eprintln!(
                "tracing seccomp denials for {} (--duration to change, --from to read a saved trace)",
                humantime::format_duration(duration)
            );
            let opts = nodeproof_trace::TraceOptions {
                duration: Some(duration),
                format: nodeproof_trace::OutputFormat::Json,
                ..nodeproof_trace::TraceOptions::default()
            };
            let summary = nodeproof_trace::run(
                &opts,
                &mut std::io::sink(),
                &STOP,
                &nodeproof_trace::KubeletLogs::host(),
            )
            .context("seccomp tracing failed")?;
            advise::denials(&summary.summary, &filter)
        }
    };
    let path = profile.to_string_lossy();
    let src = std::fs::read(&profile).with_context(|| format!("cannot read {path}"))?;
    let mut opts = lint_options(&args.mode, config);
    // The pod's container says what the runtime sets, unless the flag does.
    if let (None, Some(nnp)) = (args.mode.no_new_privileges, target.no_new_privileges) {
        opts.no_new_privileges = nnp;
    }
    let advice = advise::advise(&path, &src, &denied, &opts)?;
    match args.out.output {
        Format::Text => print!("{}", advise::render(&advice)),
        Format::Json | Format::Yaml => {
            print!("{}", super::document(args.out.output, &advice, true)?)
        }
    }
    Ok(exit(
        advice.outcome == lint::Outcome::Ok && advice.still_denied.is_empty(),
    ))
}
