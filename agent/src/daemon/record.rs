//! The `[record]` section at work in `nodeproof run`: the selected pods on
//! this node recorded as `nodeproof record --pod` records one (the kernel
//! recorder, their containers' cgroups rescanned every second), each pod's
//! recording (the union over its containers' restarts) written to
//! `<state dir>/recordings/<namespace>/<pod>.json` by tmp + rename every
//! `interval-s` and at stop, a deleted pod's file removed. A thread of its
//! own (the recorder's map reads block); the pods are listed through the
//! daemon's runtime. Read at start: a reload does not change it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use tokio::task::JoinHandle;

use super::bus::{Follower, RecordEnds};
use crate::config::{Config, RecordConfig};
use crate::pods::node::{self as pods_node, PodsOptions};
use crate::record::{self as rec, PodContainer, Tracked};
use nodeproof_seccomp::recording::{RecordedPod, Recording, FORMAT};
use nodeproof_trace::record::{Recorder, RecorderConfig};

/// One selected pod and what is known of its containers.
struct Recorded {
    namespace: String,
    name: String,
    containers: Vec<PodContainer>,
    /// Every container id its status ever named → the container's name.
    names: HashMap<String, String>,
    /// The ids its status names now.
    latest: HashMap<String, String>,
    /// Container ids whose cgroups were found under its UID.
    ids: BTreeSet<String>,
    started: SystemTime,
}

/// Starts the recording thread when `[record]` is enabled.
pub fn start(config: &Config, ends: RecordEnds) -> Option<JoinHandle<()>> {
    if !config.record.enabled {
        return None;
    }
    let root = ends
        .seccomp_root
        .clone()
        .unwrap_or_else(|| config.seccomp.root.clone());
    let opts = crate::pods::node::PodsOptions::from_config(config, &root);
    let cfg = config.record.clone();
    let Some(state_dir) = config.daemon.state_dir() else {
        tracing::warn!("pods are not recorded: no state directory to keep their recordings in (daemon.state-dir, or systemd's StateDirectory=)");
        return None;
    };
    let stop = ends.stop;
    let rt = tokio::runtime::Handle::current();
    Some(tokio::task::spawn_blocking(move || {
        run(&cfg, &opts, &state_dir, &stop, &rt)
    }))
}

fn run(
    cfg: &RecordConfig,
    opts: &PodsOptions,
    state_dir: &std::path::Path,
    stop: &Follower<bool>,
    rt: &tokio::runtime::Handle,
) {
    let mut recorder = match Recorder::start(&RecorderConfig::default()) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %super::error_chain(&e), "pods are not recorded: the syscall recorder does not load");
            return;
        }
    };
    let (client, node) = match rt.block_on(pods_node::connect(opts)) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %super::error_chain(&e), "pods are not recorded: no API server to list them from");
            return;
        }
    };
    tracing::info!(path = %state_dir.display(), "recording the selected pods ({}) into this state directory", recorder.attach_point());
    let cgroups = rec::cgroup2_root();
    let interval = Duration::from_secs(cfg.interval_s);
    let mut pods: BTreeMap<String, Recorded> = BTreeMap::new();
    let mut tracked = Tracked::default();
    let mut watch = rec::Watch::new();
    let mut last_write: Option<Instant> = None;
    loop {
        let stopping = *stop.latest();
        if stopping || last_write.is_none_or(|t| t.elapsed() >= interval) {
            if !stopping {
                let listed = rt.block_on(async {
                    tokio::time::timeout(
                        Duration::from_secs(10),
                        nodeproof_apiclient::read::pods_on(&client, &node),
                    )
                    .await
                });
                match listed {
                    Ok(Ok(list)) => {
                        let selected = select(cfg, &list);
                        update(&mut pods, selected, &mut tracked, &mut recorder, state_dir);
                        let mut want = rec::Watch::new();
                        for p in pods.values() {
                            for c in &p.containers {
                                if let Some(Ok(Some(src))) = c
                                    .profile
                                    .as_ref()
                                    .map(|pr| rec::profile_source(pr, &opts.seccomp_root))
                                {
                                    for (k, m) in rec::watch_of(&src, &opts.lint) {
                                        *want.entry(k).or_default() |= m;
                                    }
                                }
                            }
                        }
                        // The watch only grows: an argument stops being kept for no pod.
                        for (k, m) in want {
                            *watch.entry(k).or_default() |= m;
                        }
                        if let Err(e) = rec::set_watch(&mut recorder, &watch) {
                            tracing::warn!(error = %super::error_chain(&e), "the recorder's watch was not set");
                        }
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "cannot list this node's pods; recordings kept as they are")
                    }
                    Err(_) => tracing::warn!(
                        "listing this node's pods timed out; recordings kept as they are"
                    ),
                }
            }
            write_all(&pods, &tracked, &recorder, state_dir, &node);
            last_write = Some(Instant::now());
        }
        if stopping {
            return;
        }
        let dirs = nodeproof_trace::attribution::cgroup_dirs(&cgroups);
        let mut want = BTreeMap::new();
        for (uid, p) in pods.iter_mut() {
            for (id, cgs) in rec::pod_cgroups(&dirs, uid) {
                p.ids.insert(id.clone());
                want.insert(id, cgs);
            }
        }
        if let Err(e) = tracked.sync(&mut recorder, &want) {
            tracing::warn!(error = %super::error_chain(&e), "the recorder's cgroups were not updated");
        }
        let next = Instant::now() + rec::RESCAN;
        while Instant::now() < next && !*stop.latest() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The listed pods the config selects, by UID.
fn select<'a>(cfg: &RecordConfig, pods: &'a [Pod]) -> BTreeMap<String, &'a Pod> {
    pods.iter()
        .filter(|p| {
            let m = &p.metadata;
            cfg.selects(
                m.namespace.as_deref().unwrap_or_default(),
                &m.labels.clone().unwrap_or_default(),
            )
        })
        .filter_map(|p| Some((p.metadata.uid.clone()?, p)))
        .collect()
}

/// Takes the selection in: new pods recorded, known ones' container ids
/// updated, pods no longer there (deleted, or no longer selected) dropped
/// with their files.
fn update(
    pods: &mut BTreeMap<String, Recorded>,
    selected: BTreeMap<String, &Pod>,
    tracked: &mut Tracked,
    recorder: &mut Recorder,
    state_dir: &std::path::Path,
) {
    let gone: Vec<String> = pods
        .keys()
        .filter(|uid| !selected.contains_key(*uid))
        .cloned()
        .collect();
    for uid in gone {
        let p = pods.remove(&uid).expect("listed above");
        for id in &p.ids {
            if let Err(e) = tracked.forget(recorder, id) {
                tracing::warn!(error = %super::error_chain(&e), "a recording slot was not freed");
            }
        }
        let path = rec::recording_path(state_dir, &p.namespace, &p.name);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(pod = %format!("{}/{}", p.namespace, p.name), "pod gone; its recording removed")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a gone pod's recording")
            }
        }
    }
    for (uid, pod) in selected {
        let (containers, ids) = rec::pod_containers(pod);
        let p = pods.entry(uid).or_insert_with(|| {
            let m = &pod.metadata;
            tracing::info!(pod = %format!("{}/{}", m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default()), "recording a pod");
            Recorded {
                namespace: m.namespace.clone().unwrap_or_default(),
                name: m.name.clone().unwrap_or_default(),
                containers: Vec::new(),
                names: HashMap::new(),
                latest: HashMap::new(),
                ids: BTreeSet::new(),
                started: SystemTime::now(),
            }
        });
        p.containers = containers;
        p.names.extend(ids.clone());
        p.latest = ids;
    }
}

/// Writes every recorded pod's file.
fn write_all(
    pods: &BTreeMap<String, Recorded>,
    tracked: &Tracked,
    recorder: &Recorder,
    state_dir: &std::path::Path,
    node: &str,
) {
    for (uid, p) in pods {
        let records = match tracked.read_some(recorder, &p.ids) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %super::error_chain(&e), "a pod's recording was not read");
                continue;
            }
        };
        let recording = Recording {
            format: FORMAT.into(),
            node: Some(node.to_string()),
            pod: Some(RecordedPod {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                uid: Some(uid.clone()),
            }),
            started: rec::rfc3339(p.started),
            ended: rec::rfc3339(SystemTime::now()),
            containers: rec::pod_recording(&p.containers, &p.names, records, &p.latest),
        };
        let path: PathBuf = rec::recording_path(state_dir, &p.namespace, &p.name);
        if let Err(e) = rec::write_recording(&path, &recording) {
            tracing::warn!(path = %path.display(), error = %e, "cannot write a pod's recording");
        }
    }
}
