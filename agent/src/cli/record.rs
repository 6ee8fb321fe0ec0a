//! `nodeproof record`: what a pod's containers (or one cgroup) call, as a recording.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};

use nodeproof::config::Config;
use nodeproof::record::{self as rec, PodContainer};
use nodeproof_seccomp::recording::{RecordedPod, Recording, FORMAT};
use nodeproof_trace::record::{Recorder, RecorderConfig};

use super::{lint_options, parse_duration, stop_on_sigint_sigterm, ModeArgs, STOP};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("subject").required(true).args(["pod", "cgroup"])))]
pub(crate) struct RecordArgs {
    /// The pod to record (NAMESPACE/NAME), read from the API server: each of its
    /// containers, restarts included.
    #[arg(long)]
    pub(crate) pod: Option<String>,
    /// Record the tasks of this cgroup2 directory and those under it instead
    /// (a path from the cgroup2 root, or an absolute one under it); no API server.
    #[arg(long, value_name = "PATH")]
    pub(crate) cgroup: Option<PathBuf>,
    /// Keep the arguments this profile's rules compare (default with --pod: each
    /// container's own profile; with --cgroup: none).
    #[arg(long, value_name = "FILE")]
    pub(crate) profile: Option<PathBuf>,
    /// How long to record, e.g. 60s, 10m (SIGINT or SIGTERM end it sooner).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub(crate) duration: Duration,
    /// Write the recording here (default: standard output).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Kubeconfig to read the pod with (default: the kubelet's, then in-cluster).
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The --kubeconfig file's context instead of its current-context (as kubectl --context).
    #[arg(long, requires = "kubeconfig")]
    pub(crate) context: Option<String>,
    #[command(flatten)]
    pub(crate) mode: ModeArgs,
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

pub(crate) fn record(args: &RecordArgs, config: &Config, root: &Path) -> Result<ExitCode> {
    let opts = lint_options(&args.mode, config);
    let given_watch = match &args.profile {
        Some(p) => {
            let src = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
            Some(rec::watch_of(&src, &opts))
        }
        None => None,
    };
    let cgroups = rec::cgroup2_root();
    let recording = match (&args.pod, &args.cgroup) {
        (Some(key), _) => record_pod(args, config, root, key, &cgroups, given_watch, &opts)?,
        (None, Some(path)) => record_cgroup(args, &cgroups, path, given_watch.unwrap_or_default())?,
        (None, None) => unreachable!("clap requires --pod or --cgroup"),
    };
    match &args.output {
        Some(path) => {
            rec::write_recording(path, &recording)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "recorded {} container(s) of {} into {}",
                recording.containers.len(),
                recording.subject(),
                path.display()
            );
        }
        None => println!("{}", serde_json::to_string_pretty(&recording)?),
    }
    Ok(ExitCode::SUCCESS)
}

fn start(watch: &rec::Watch) -> Result<Recorder> {
    let mut recorder = Recorder::start(&RecorderConfig::default())?;
    rec::set_watch(&mut recorder, watch)?;
    stop_on_sigint_sigterm()?;
    Ok(recorder)
}

fn record_pod(
    args: &RecordArgs,
    config: &Config,
    root: &Path,
    key: &str,
    cgroups: &Path,
    given_watch: Option<rec::Watch>,
    opts: &nodeproof_seccomp::lint::LintOptions,
) -> Result<Recording> {
    use nodeproof::pods::node::{get_pod, PodsRunError};
    let kubeconfig = args
        .kubeconfig
        .clone()
        .or_else(|| config.report.kubeconfig.clone());
    let context = args.kubeconfig.as_ref().and(args.context.as_deref());
    let read = || match get_pod(kubeconfig.as_deref(), context, key) {
        Err(PodsRunError::GetPod { source, .. })
            if nodeproof_apiclient::read::answered(&source, 404) =>
        {
            Err(anyhow::anyhow!("pod {key} not found"))
        }
        r => r.map_err(anyhow::Error::from),
    };
    let pod = read()?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if uid.is_empty() {
        bail!("pod {key} has no UID: its cgroups cannot be found");
    }
    let (containers, mut names) = rec::pod_containers(&pod);
    let watch = match given_watch {
        Some(w) => w,
        None => containers_watch(&containers, root, opts),
    };
    let mut recorder = start(&watch)?;
    eprintln!(
        "recording pod {key} for {} (Ctrl-C ends it sooner)",
        humantime::format_duration(args.duration)
    );
    let started = SystemTime::now();
    let mut latest = names.clone();
    // Ids the pod was read again for: a sandbox's pause container is never
    // named, and one read for it is enough.
    let mut asked = BTreeSet::new();
    let mut scan = || {
        let found = rec::scan_pod(cgroups, &uid);
        // A container id the pod's status did not name yet: a restart; read the pod again.
        let unknown: Vec<String> = found
            .keys()
            .filter(|id| !names.contains_key(*id) && !asked.contains(*id))
            .cloned()
            .collect();
        if !unknown.is_empty() {
            asked.extend(unknown);
            learn(read(), &mut names, &mut latest);
        }
        found
    };
    let records = rec::run(&mut recorder, args.duration, &STOP, &mut scan)?;
    let ended = SystemTime::now();
    // A restart whose id the status did not have yet when its cgroup appeared: once more.
    if records.keys().any(|id| !names.contains_key(id)) {
        learn(read(), &mut names, &mut latest);
    }
    if records.is_empty() {
        eprintln!(
            "warning: no cgroup of pod {key} (uid {uid}) under {}: is it running on this node?",
            cgroups.display()
        );
    }
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    Ok(Recording {
        format: FORMAT.into(),
        node: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .or_else(hostname),
        pod: Some(RecordedPod {
            namespace: ns.into(),
            name: name.into(),
            uid: Some(uid),
        }),
        started: rec::rfc3339(started),
        ended: rec::rfc3339(ended),
        containers: rec::pod_recording(&containers, &names, records, &latest),
    })
}

/// The pod read again: the ids its status names now (`latest`), added to
/// every id it ever named (`names`, id → container name).
fn learn(
    pod: Result<k8s_openapi::api::core::v1::Pod>,
    names: &mut HashMap<String, String>,
    latest: &mut HashMap<String, String>,
) {
    match pod {
        Ok(p) => {
            *latest = rec::pod_containers(&p).1;
            names.extend(latest.clone());
        }
        Err(e) => tracing::warn!(error = %e, "cannot read the pod again"),
    }
}

/// The union of the arguments each container's profile compares; a profile
/// that cannot be read is said once and watches nothing.
fn containers_watch(
    containers: &[PodContainer],
    root: &Path,
    opts: &nodeproof_seccomp::lint::LintOptions,
) -> rec::Watch {
    let mut watch = rec::Watch::new();
    for c in containers {
        let Some(p) = &c.profile else { continue };
        match rec::profile_source(p, root) {
            Ok(Some(src)) => {
                for (k, m) in rec::watch_of(&src, opts) {
                    *watch.entry(k).or_default() |= m;
                }
            }
            Ok(None) => {}
            Err(why) => eprintln!("warning: container {}: {why}", c.name),
        }
    }
    watch
}

fn record_cgroup(
    args: &RecordArgs,
    cgroups: &Path,
    path: &Path,
    watch: rec::Watch,
) -> Result<Recording> {
    // Absolute under the root, else from the root (a leading `/` or not).
    let rel = path
        .strip_prefix(cgroups)
        .or_else(|_| path.strip_prefix("/"))
        .unwrap_or(path)
        .to_path_buf();
    let dir = cgroups.join(&rel);
    if !dir.join("cgroup.procs").is_file() {
        bail!(
            "cgroup {} does not exist under {}: give a cgroup2 directory",
            rel.display(),
            cgroups.display()
        );
    }
    let key = format!("/{}", rel.display());
    let mut recorder = start(&watch)?;
    eprintln!(
        "recording cgroup {key} for {} (Ctrl-C ends it sooner)",
        humantime::format_duration(args.duration)
    );
    let started = SystemTime::now();
    let mut scan = || {
        let ids: BTreeSet<u64> =
            rec::cgroups_under(&nodeproof_trace::attribution::cgroup_dirs(cgroups), &key);
        let mut m = BTreeMap::new();
        if !ids.is_empty() {
            m.insert(key.clone(), ids);
        }
        m
    };
    let records = rec::run(&mut recorder, args.duration, &STOP, &mut scan)?;
    let ended = SystemTime::now();
    let container_id = nodeproof_trace::attribution::parse_cgroup_path(&key).container_id;
    let profile = args.profile.as_ref().map(|p| p.display().to_string());
    let containers = records
        .into_iter()
        .map(|(k, r)| rec::to_container(k, container_id.clone(), profile.clone(), r))
        .collect();
    Ok(Recording {
        format: FORMAT.into(),
        node: hostname(),
        pod: None,
        started: rec::rfc3339(started),
        ended: rec::rfc3339(ended),
        containers,
    })
}
