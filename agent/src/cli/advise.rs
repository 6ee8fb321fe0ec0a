//! `nodeproof advise`: the smallest profile change that allows observed denials.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use nodeproof::config::Config;
use nodeproof_findings::count;
use nodeproof_seccomp::{allowlist, lint, recording};

use super::{exit, lint_options, parse_duration, Format, ModeArgs, OutputArgs, STOP};

#[derive(clap::Args)]
pub(crate) struct AdviseArgs {
    /// Only denials of this pod (NAMESPACE/NAME), as resolved in the trace. Without
    /// --profile, the pod is read from the API server and its profile file patched.
    #[arg(long, required_unless_present_any = ["profile", "from"])]
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
    /// A saved `nodeproof trace -o json` output, or a `nodeproof record` recording:
    /// then the smallest allow-list profile for the recorded calls is written instead
    /// of a patch (--container picks one of the recording's containers).
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
    if let Some(path) = &args.from {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        if is_recording(&bytes) {
            return from_recording(args, config, path, &bytes);
        }
    }
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

/// Whether `--from` is a recording (its `format`), not a trace.
fn is_recording(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .is_ok_and(|v| v.get("format").and_then(|f| f.as_str()) == Some(recording::FORMAT))
}

/// `advise --from RECORDING`: the smallest allow-list profile for the
/// recorded calls, on standard output; what went into it on standard error.
fn from_recording(
    args: &AdviseArgs,
    config: &Config,
    path: &Path,
    bytes: &[u8],
) -> Result<ExitCode> {
    if args.profile.is_some() || args.pod.is_some() {
        bail!("a recording makes a new profile: drop --profile and --pod (they are for a trace's denials)");
    }
    let rec = recording::Recording::from_json(bytes).with_context(|| {
        format!(
            "{} is not a recording as `nodeproof record` writes it",
            path.display()
        )
    })?;
    let opts = lint_options(&args.mode, config);
    let a = allowlist::allowlist(
        &rec,
        args.container.as_deref(),
        &opts,
        &nodeproof_bpfgen::Native,
    )?;
    match args.out.output {
        Format::Text => {
            print!("{}", one_rule_a_line(&a.profile)?);
            eprintln!(
                "allow-list for {} container {} recorded {} to {}: {} recorded, {} for {}'s init and the entrypoint's start{}; profile lint: {}{}",
                rec.subject(),
                a.containers.join(", "),
                rec.started,
                rec.ended,
                count(a.recorded.len(), "syscall", "syscalls"),
                if a.added_for_runtime.is_empty() {
                    "none".to_string()
                } else {
                    a.added_for_runtime.join(", ")
                },
                opts.oci_runtime,
                if a.unnamed.is_empty() {
                    String::new()
                } else {
                    format!("; {} without a name left out", count(a.unnamed.len(), "number", "numbers"))
                },
                a.report.outcome.as_str(),
                if a.incomplete {
                    "; the recording is incomplete: calls it missed are denied"
                } else {
                    ""
                },
            );
        }
        Format::Json | Format::Yaml => {
            print!("{}", super::document(args.out.output, &a, true)?)
        }
    }
    Ok(exit(!a.incomplete))
}

/// A profile with one rule a line, as the examples under docs/examples are
/// written: short enough to read and to review as a diff.
fn one_rule_a_line(profile: &serde_json::Value) -> Result<String> {
    let mut head = profile.clone();
    let rules = head
        .as_object_mut()
        .and_then(|o| o.remove("syscalls"))
        .unwrap_or_default();
    let head = serde_json::to_string(&head)?;
    let mut text = format!("{},\"syscalls\":[\n", head.trim_end_matches('}'));
    let rules = rules.as_array().cloned().unwrap_or_default();
    for (i, r) in rules.iter().enumerate() {
        let sep = if i + 1 < rules.len() { "," } else { "" };
        text += &format!("  {}{sep}\n", serde_json::to_string(r)?);
    }
    text += "]}\n";
    Ok(text)
}
