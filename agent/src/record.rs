//! `nodeproof record`: what a pod's containers (or one cgroup's tasks) call,
//! gathered by the kernel recorder (`nodeproof_trace::record`) and written
//! as a [`Recording`]. This module is the glue: which arguments to watch
//! (the ones a profile's rules compare), which cgroups belong to which
//! container (rescanned, so a restarted container is recorded too), and
//! the mapping of the kernel's sets to the recording's types. The pod is
//! read by the caller; the matching and the mapping are pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::observe::profiles::{read_reference, ProfileRead};
use crate::pods::denials::container_ids;
use crate::pods::verdict::profile_path;
use nodeproof_report::refs::{pod_refs, Profile};
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{filter_spec, LintOptions};
use nodeproof_seccomp::recording::{
    RecordedArch, RecordedArg, RecordedContainer, RecordedSyscall, Recording,
};
use nodeproof_seccomp::syscalls::{resolve_syscall, syscall_name};
use nodeproof_trace::attribution::{cgroup_dirs, parse_cgroup_path};
use nodeproof_trace::record::{RecArch, RecordError, Recorder, Slot, SlotRecord};

/// containerd's `runtime/default`: contrib/seccomp's default profile, which
/// is moby's default (`profiles/runtime-default-x86_64.json` is that
/// profile resolved for an x86_64 node, see profiles/README.md).
pub const RUNTIME_DEFAULT: &[u8] = include_bytes!("../../profiles/runtime-default-x86_64.json");

/// How often the cgroup tree is scanned for the containers' cgroups.
pub const RESCAN: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum RecordRunError {
    #[error("syscall recorder")]
    Recorder(#[source] RecordError),
}

impl From<RecordError> for RecordRunError {
    fn from(e: RecordError) -> Self {
        RecordRunError::Recorder(e)
    }
}

/// The recording's arch for the recorder's.
pub fn arch_of(a: RecArch) -> Arch {
    match a {
        RecArch::X86_64 => Arch::X86_64,
        RecArch::I386 => Arch::X86,
        RecArch::X32 => Arch::X32,
    }
}

/// Which arguments to keep: per (arch, syscall number), a mask of indexes.
pub type Watch = BTreeMap<(RecArch, u32), u8>;

/// The arguments `src`'s rules compare, as the runtime builds its filter
/// (`lint::filter_spec`), on each arch the recorder tells apart: a name
/// resolves per arch, and every arch's calls are recorded whether or not
/// the profile lists it. Nothing when the profile builds no filter.
pub fn watch_of(src: &[u8], opts: &LintOptions) -> Watch {
    let mut w = Watch::new();
    let Some(spec) = filter_spec(src, opts) else {
        return w;
    };
    for rule in spec.rules.iter().filter(|r| !r.conds.is_empty()) {
        let mask = rule
            .conds
            .iter()
            .filter(|c| c.index < 6)
            .fold(0u8, |m, c| m | 1 << c.index);
        for arch in RecArch::ALL {
            // Negative numbers are libseccomp's pseudo syscalls: no call has them.
            if let Some(nr) = resolve_syscall(&rule.syscall, arch_of(arch)).filter(|n| *n >= 0) {
                *w.entry((arch, nr as u32)).or_default() |= mask;
            }
        }
    }
    w
}

/// Puts `watch` into the recorder; numbers beyond its bitmap are skipped.
pub fn set_watch(recorder: &mut Recorder, watch: &Watch) -> Result<(), RecordError> {
    for ((arch, nr), mask) in watch {
        if !recorder.watch(*arch, *nr, *mask)? {
            tracing::warn!(
                "syscall {nr} ({arch:?}) is beyond the recorder's bitmap; its arguments are not recorded"
            );
        }
    }
    Ok(())
}

/// A container of the pod: its name, the profile the spec names (as
/// written, `localhost/...`) and where its rules come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodContainer {
    pub name: String,
    pub profile: Option<Profile>,
}

/// The pod's containers and the runtime ids its status gives them (id → name).
pub fn pod_containers(pod: &Pod) -> (Vec<PodContainer>, HashMap<String, String>) {
    let refs = pod_refs(pod);
    let containers = refs
        .containers
        .into_iter()
        .map(|c| PodContainer {
            name: c.name,
            profile: c.profile.map(|(p, _)| p),
        })
        .collect();
    (containers, container_ids(pod))
}

/// The rules' source of a container's profile: a Localhost file read as the
/// agent reads it, containerd's default, or none (unconfined, not set).
/// `Err` is the one line said about a profile that cannot be read.
pub fn profile_source(profile: &Profile, root: &Path) -> Result<Option<Vec<u8>>, String> {
    match profile {
        Profile::Localhost(rel) => {
            let Some(path) = profile_path(root, rel) else {
                return Err(format!(
                    "profile localhost/{rel} leaves the seccomp root; its arguments are not recorded"
                ));
            };
            match read_reference(root, &path) {
                ProfileRead::Contents(b) => Ok(Some(b)),
                ProfileRead::Missing => Err(format!(
                    "profile {} does not exist; its arguments are not recorded",
                    path.display()
                )),
                ProfileRead::Unusable(why) => Err(format!(
                    "profile {} cannot be read ({why}); its arguments are not recorded",
                    path.display()
                )),
            }
        }
        Profile::RuntimeDefault => Ok(Some(RUNTIME_DEFAULT.to_vec())),
        Profile::Unconfined | Profile::Unknown(_) => Ok(None),
    }
}

/// The cgroups (ids) of each of the pod's containers in a cgroup2 tree:
/// container id → its cgroup and those under it (CRI-O's `container`, a
/// process's own), by the kubepods path grammar of the tracer.
pub fn pod_cgroups(dirs: &HashMap<u64, String>, pod_uid: &str) -> BTreeMap<String, BTreeSet<u64>> {
    let mut out: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for (id, path) in dirs {
        let a = parse_cgroup_path(path);
        if let (Some(uid), Some(cid)) = (a.pod_uid, a.container_id) {
            if uid == pod_uid {
                out.entry(cid).or_default().insert(*id);
            }
        }
    }
    out
}

/// The cgroup at `path` (from the cgroup2 root) and those under it.
pub fn cgroups_under(dirs: &HashMap<u64, String>, path: &str) -> BTreeSet<u64> {
    let path = format!("/{}", path.trim_matches('/'));
    dirs.iter()
        .filter(|(_, p)| {
            p.as_str() == path
                || path == "/"
                || p.strip_prefix(&path).is_some_and(|r| r.starts_with('/'))
        })
        .map(|(id, _)| *id)
        .collect()
}

/// What is being recorded: each key (a container id, or the cgroup path)
/// with its slot and the cgroup ids in it, and what keys whose cgroups are
/// all gone recorded (read out of the kernel, their slots freed: a
/// container that restarts a hundred times does not hold a hundred slots).
#[derive(Default)]
pub struct Tracked {
    slots: BTreeMap<String, (Slot, BTreeSet<u64>)>,
    gone: BTreeMap<String, SlotRecord>,
}

impl Tracked {
    /// Brings the recorder in line with `want` (key → cgroup ids now): new
    /// keys get a slot, new cgroups join their key's slot, cgroups gone
    /// leave the map, and a key with none left is read and its slot freed.
    /// Returns the keys seen for the first time.
    pub fn sync(
        &mut self,
        recorder: &mut Recorder,
        want: &BTreeMap<String, BTreeSet<u64>>,
    ) -> Result<Vec<String>, RecordError> {
        let mut new = Vec::new();
        for (key, ids) in want {
            if !self.slots.contains_key(key) {
                let slot = recorder.new_slot()?;
                self.slots.insert(key.clone(), (slot, BTreeSet::new()));
                if !self.gone.contains_key(key) {
                    new.push(key.clone());
                }
            }
            let (slot, have) = self.slots.get_mut(key).expect("inserted above");
            for id in ids.difference(&have.clone()) {
                recorder.add_cgroup(*slot, *id)?;
                have.insert(*id);
            }
        }
        for (key, (_, have)) in self.slots.iter_mut() {
            let now = want.get(key);
            let gone: Vec<u64> = have
                .iter()
                .filter(|id| !now.is_some_and(|n| n.contains(id)))
                .copied()
                .collect();
            for id in gone {
                recorder.remove_cgroup(id);
                have.remove(&id);
            }
        }
        let empty: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, (_, have))| have.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for key in empty {
            let (slot, _) = self.slots.remove(&key).expect("listed above");
            let r = recorder.read(slot)?;
            recorder.free_slot(slot)?;
            self.gone.entry(key).or_default().merge(r);
        }
        Ok(new)
    }

    /// Every key's record so far.
    pub fn read(&self, recorder: &Recorder) -> Result<BTreeMap<String, SlotRecord>, RecordError> {
        let keys: BTreeSet<String> = self.slots.keys().chain(self.gone.keys()).cloned().collect();
        self.read_some(recorder, &keys)
    }

    /// The records of `keys` (those tracked), a key's gone part and live part together.
    pub fn read_some(
        &self,
        recorder: &Recorder,
        keys: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, SlotRecord>, RecordError> {
        let mut out = BTreeMap::new();
        for key in keys {
            let mut r = self.gone.get(key).cloned();
            if let Some((slot, _)) = self.slots.get(key) {
                r.get_or_insert_with(SlotRecord::default)
                    .merge(recorder.read(*slot)?);
            }
            if let Some(r) = r {
                out.insert(key.clone(), r);
            }
        }
        Ok(out)
    }

    /// Stops recording `key` and drops what it recorded (its pod is gone).
    pub fn forget(&mut self, recorder: &mut Recorder, key: &str) -> Result<(), RecordError> {
        self.gone.remove(key);
        if let Some((slot, _)) = self.slots.remove(key) {
            recorder.free_slot(slot)?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.gone.is_empty()
    }
}

/// Records until `duration` has passed or `stop` is set, calling `scan`
/// every [`RESCAN`] for the keys to record and their cgroups.
pub fn run(
    recorder: &mut Recorder,
    duration: Duration,
    stop: &AtomicBool,
    scan: &mut dyn FnMut() -> BTreeMap<String, BTreeSet<u64>>,
) -> Result<BTreeMap<String, SlotRecord>, RecordRunError> {
    let mut tracked = Tracked::default();
    let end = Instant::now() + duration;
    loop {
        let want = scan();
        for key in tracked.sync(recorder, &want)? {
            tracing::info!("recording cgroup {key}");
        }
        let now = Instant::now();
        if now >= end || stop.load(Ordering::SeqCst) {
            break;
        }
        let next = (now + RESCAN).min(end);
        // Wakes for a stop within 50 ms.
        while Instant::now() < next && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50).min(next - Instant::now()));
        }
    }
    Ok(tracked.read(recorder)?)
}

/// The scan for a pod: its containers' cgroups under `root`, by container id.
pub fn scan_pod(root: &Path, pod_uid: &str) -> BTreeMap<String, BTreeSet<u64>> {
    pod_cgroups(&cgroup_dirs(root), pod_uid)
}

/// A key's record as the recording's container.
pub fn to_container(
    name: String,
    id: Option<String>,
    profile: Option<String>,
    mut r: SlotRecord,
) -> RecordedContainer {
    // A restart's values were capped apart: the union is capped again.
    r.cap_values(nodeproof_trace::record::DEFAULT_VALUE_CAP as usize);
    let mut arches: BTreeMap<RecArch, BTreeMap<u32, Vec<RecordedArg>>> = BTreeMap::new();
    for (arch, nrs) in r.calls {
        let e = arches.entry(arch).or_default();
        for nr in nrs {
            e.entry(nr).or_default();
        }
    }
    for ((arch, nr, index), v) in r.args {
        arches
            .entry(arch)
            .or_default()
            .entry(nr)
            .or_default()
            .push(RecordedArg {
                index,
                values: v.values.into_iter().collect(),
                complete: v.complete,
            });
    }
    RecordedContainer {
        name,
        id,
        profile,
        arches: arches
            .into_iter()
            .map(|(a, syscalls)| {
                let arch = arch_of(a);
                RecordedArch {
                    arch,
                    syscalls: syscalls
                        .into_iter()
                        .map(|(nr, mut args)| {
                            args.sort_by_key(|g| g.index);
                            RecordedSyscall {
                                nr,
                                name: syscall_name(nr as i32, arch),
                                args,
                            }
                        })
                        .collect(),
                }
            })
            .collect(),
        lost: r.lost,
    }
}

/// The pod's containers as recorded: each container id's record under its
/// name (ids the status named, a restart's ids merged into one container,
/// the last id kept), in the spec's order; ids the pod never named are left
/// out (a sandbox's pause container has no name).
pub fn pod_recording(
    containers: &[PodContainer],
    names: &HashMap<String, String>,
    records: BTreeMap<String, SlotRecord>,
    latest: &HashMap<String, String>,
) -> Vec<RecordedContainer> {
    let mut by_name: BTreeMap<String, SlotRecord> = BTreeMap::new();
    for (id, r) in records {
        if let Some(name) = names.get(&id) {
            by_name.entry(name.clone()).or_default().merge(r);
        }
    }
    containers
        .iter()
        .filter_map(|c| {
            let r = by_name.remove(&c.name)?;
            let latest_id = latest
                .iter()
                .find(|(_, n)| **n == c.name)
                .map(|(id, _)| id.clone());
            Some(to_container(
                c.name.clone(),
                latest_id,
                c.profile.as_ref().map(Profile::display),
                r,
            ))
        })
        .collect()
}

/// Where the daemon would keep a pod's recording: `<state dir>/recordings/<namespace>/<pod>.json`.
pub fn recording_path(state_dir: &Path, namespace: &str, pod: &str) -> PathBuf {
    state_dir
        .join("recordings")
        .join(namespace)
        .join(format!("{pod}.json"))
}

/// The recordings kept under `state_dir` (`recordings/<namespace>/<pod>.json`)
/// with a fingerprint of the files (their paths, sizes and modification
/// times); `None`, without reading a file, when the fingerprint is still
/// `known`. A file that cannot be read or is not a recording is left out
/// with a warning (once a change: the rollout guard reads again only then).
pub fn kept_recordings(state_dir: &Path, known: Option<u64>) -> Option<(u64, Vec<Recording>)> {
    use std::hash::{Hash, Hasher};
    let mut files: Vec<(PathBuf, u64, std::time::SystemTime)> = Vec::new();
    let root = state_dir.join("recordings");
    for ns in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
            let path = f.path();
            if path.extension().is_some_and(|e| e == "json") {
                if let Ok(m) = f.metadata() {
                    let mtime = m.modified().unwrap_or(std::time::UNIX_EPOCH);
                    files.push((path, m.len(), mtime));
                }
            }
        }
    }
    files.sort();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    files.hash(&mut h);
    let fingerprint = h.finish();
    if known == Some(fingerprint) {
        return None;
    }
    let recordings = files
        .iter()
        .filter_map(|(path, ..)| {
            let parsed = std::fs::read(path)
                .map_err(|e| e.to_string())
                .and_then(|b| Recording::from_json(&b).map_err(|e| e.to_string()));
            parsed
                .map_err(|e| {
                    tracing::warn!(path = %path.display(), error = %e, "a kept recording is left out")
                })
                .ok()
        })
        .collect();
    Some((fingerprint, recordings))
}

/// Writes `recording` (indented JSON) to `path` through `<path>.tmp` and a
/// rename, so that a reader never sees half of one; the directory is made.
pub fn write_recording(path: &Path, recording: &Recording) -> std::io::Result<()> {
    let mut json = serde_json::to_vec_pretty(recording).map_err(std::io::Error::other)?;
    json.push(b'\n');
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, &json)?;
    std::fs::rename(&tmp, path)
}

/// The cgroup2 mount of this host (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid ones).
pub fn cgroup2_root() -> PathBuf {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()
        .and_then(|m| nodeproof_trace::attribution::cgroup2_mount(&m))
        .map_or_else(|| PathBuf::from("/sys/fs/cgroup"), PathBuf::from)
}

/// RFC 3339 in seconds, as the recording's times are written.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_trace::record::ArgValues;

    const UID: &str = "8b6c7e2a-1d2f-4a5b-9c3d-0e1f2a3b4c5d";

    fn dirs(rows: &[(u64, String)]) -> HashMap<u64, String> {
        rows.iter().cloned().collect()
    }

    #[test]
    fn a_pods_cgroups_are_found_by_uid_with_those_under_them() {
        let a = "ab".repeat(32);
        let b = "cd".repeat(32);
        let d = dirs(&[
            (1, "/kubepods/burstable".into()),
            (2, format!("/kubepods/burstable/pod{UID}")),
            (3, format!("/kubepods/burstable/pod{UID}/{a}")),
            (4, format!("/kubepods/burstable/pod{UID}/{a}/sub")),
            (5, format!("/kubepods/burstable/pod{UID}/{b}")),
            (
                6,
                format!("/kubepods/burstable/pod00000000-0000-0000-0000-000000000000/{b}"),
            ),
            (
                7,
                format!(
                    "/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{b}.scope",
                    UID.replace('-', "_")
                ),
            ),
        ]);
        let got = pod_cgroups(&d, UID);
        assert_eq!(got.len(), 2);
        assert_eq!(got[&a], [3, 4].into());
        assert_eq!(got[&b], [5, 7].into());
    }

    #[test]
    fn a_cgroup_path_takes_its_subtree_and_not_its_namesakes() {
        let d = dirs(&[
            (1, "/".into()),
            (2, "/app".into()),
            (3, "/app/worker".into()),
            (4, "/apple".into()),
        ]);
        assert_eq!(cgroups_under(&d, "app"), [2, 3].into());
        assert_eq!(cgroups_under(&d, "/app/"), [2, 3].into());
        assert_eq!(cgroups_under(&d, "/").len(), 4);
    }

    #[test]
    fn the_watch_is_every_compared_argument_on_each_arch() {
        let src = br#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
            {"names":["getppid"],"action":"SCMP_ACT_ALLOW"},
            {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":8,"op":"SCMP_CMP_EQ"}]},
            {"names":["socket"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"},{"index":2,"value":0,"op":"SCMP_CMP_EQ"}]}]}"#;
        let w = watch_of(src, &LintOptions::default());
        assert_eq!(w.get(&(RecArch::X86_64, 135)), Some(&0b1));
        assert_eq!(w.get(&(RecArch::I386, 136)), Some(&0b1));
        assert_eq!(w.get(&(RecArch::X86_64, 41)), Some(&0b101));
        // getppid compares nothing.
        assert!(!w.contains_key(&(RecArch::X86_64, 110)));
        // containerd's default compares personality's and clone's first argument.
        let d = watch_of(RUNTIME_DEFAULT, &LintOptions::default());
        assert_eq!(d.get(&(RecArch::X86_64, 135)), Some(&0b1));
        assert_eq!(d.get(&(RecArch::X86_64, 56)), Some(&0b1));
    }

    #[test]
    fn a_recording_is_written_whole_where_the_daemon_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = recording_path(dir.path(), "ml", "vllm-0");
        assert!(path.ends_with("recordings/ml/vllm-0.json"));
        let r = Recording {
            format: nodeproof_seccomp::recording::FORMAT.into(),
            node: None,
            pod: None,
            started: rfc3339(std::time::UNIX_EPOCH),
            ended: rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(60)),
            containers: vec![],
        };
        write_recording(&path, &r).unwrap();
        assert_eq!(
            Recording::from_json(&std::fs::read(&path).unwrap()).unwrap(),
            r
        );
        assert_eq!(r.ended, "1970-01-01T00:01:00Z");
        // Only the recording: its temporary file was renamed.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("vllm-0.json")]);
    }

    #[test]
    fn restarts_merge_under_the_container_name_and_map_to_the_recording() {
        let mut first = SlotRecord::default();
        first.calls.insert(RecArch::X86_64, [110, 135].into());
        first.args.insert(
            (RecArch::X86_64, 135, 0),
            ArgValues {
                values: [8].into(),
                complete: true,
            },
        );
        let mut second = SlotRecord {
            lost: 1,
            ..SlotRecord::default()
        };
        second.calls.insert(RecArch::X86_64, [83].into());
        second.calls.insert(RecArch::I386, [20].into());
        let names: HashMap<String, String> =
            [("a1".into(), "app".into()), ("a2".into(), "app".into())].into();
        let latest: HashMap<String, String> = [("a2".into(), "app".into())].into();
        let records: BTreeMap<String, SlotRecord> = [
            ("a1".to_string(), first),
            ("a2".to_string(), second),
            ("pause".to_string(), SlotRecord::default()),
        ]
        .into();
        let containers = vec![
            PodContainer {
                name: "app".into(),
                profile: Some(Profile::RuntimeDefault),
            },
            PodContainer {
                name: "idle".into(),
                profile: None,
            },
        ];
        let out = pod_recording(&containers, &names, records, &latest);
        assert_eq!(out.len(), 1);
        let c = &out[0];
        assert_eq!(c.name, "app");
        assert_eq!(c.id.as_deref(), Some("a2"));
        assert_eq!(c.profile.as_deref(), Some("runtime/default"));
        assert_eq!(c.lost, 1);
        assert_eq!(c.arches[0].arch, Arch::X86_64);
        let nrs: Vec<u32> = c.arches[0].syscalls.iter().map(|s| s.nr).collect();
        assert_eq!(nrs, vec![83, 110, 135]);
        let p = &c.arches[0].syscalls[2];
        assert_eq!(p.name.as_deref(), Some("personality"));
        assert_eq!(
            p.args,
            vec![RecordedArg {
                index: 0,
                values: vec![8],
                complete: true
            }]
        );
        assert_eq!(c.arches[1].arch, Arch::X86);
        assert_eq!(c.arches[1].syscalls[0].name.as_deref(), Some("getpid"));
    }
}
