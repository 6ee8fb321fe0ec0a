//! The rollout guard (opt-in, `[record] rollout-guard`): a changed profile is
//! what new containers get from the moment the file changes (runc loads the
//! filter at start), so before a RuntimeClass contract that lists it stays
//! `ready`, the new version is diffed against the previous one and the
//! recordings of the pods on this node that run under it
//! (`nodeproof_seccomp::against`). Where the new version stops a call those
//! pods made, the contract turns `not-ready` naming profile, call and pods:
//! the scheduler then sends no new pod of the class here until the profile
//! allows the call again, goes back, or the pods that made it are gone.
//! Pure: versions and recordings in, a hold out; the caller caches by
//! version pair and recordings.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::judge::versions::ProfileVersions;
use nodeproof_seccomp::against::{self, BrokenCall, Certainty};
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::diff::{self, DiffError, Mode};
use nodeproof_seccomp::filter::Libseccomp;
use nodeproof_seccomp::lint::LintOptions;
use nodeproof_seccomp::recording::Recording;

/// How many calls and pods a hold's cause names before it counts the rest.
const NAMED: usize = 3;

/// One version of a profile as the guard compares it.
#[derive(Debug, Clone, Copy)]
pub struct Version<'a> {
    /// sha256, hex.
    pub sha256: &'a str,
    /// The filter the runtime loads for it in the judged mode.
    pub program: &'a [SockFilter],
}

/// A changed profile that stops calls the node's pods made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// Relative to the seccomp root, as contracts and pods name it.
    pub profile: String,
    pub previous: String,
    pub version: String,
    pub broken: Vec<BrokenCall>,
}

impl Hold {
    /// One sentence for the contract's cause: profile, change, calls, pods, remedy.
    pub fn cause(&self) -> String {
        let mut calls: Vec<String> = Vec::new();
        let mut pods: Vec<&str> = Vec::new();
        for b in &self.broken {
            let name = match &b.syscall {
                diff::Syscall::Named { name, .. } => name.clone(),
                other => other.to_string(),
            };
            let name = match b.certainty {
                Certainty::Recorded => name,
                Certainty::ArgsNotRecorded { .. } => format!("{name} (maybe)"),
            };
            if !calls.contains(&name) {
                calls.push(name);
            }
            if !pods.contains(&b.subject.as_str()) {
                pods.push(&b.subject);
            }
        }
        format!(
            "{} changed (sha256 {} → {}) and stops {} that {} made: new pods of this class wait; allow the calls or restore the previous version",
            self.profile,
            short(&self.previous),
            short(&self.version),
            named(&calls),
            if pods.len() == 1 {
                format!("pod {}", pods[0])
            } else {
                format!("pods {}", named(&pods))
            },
        )
    }
}

fn named<S: AsRef<str>>(items: &[S]) -> String {
    let mut s = items
        .iter()
        .take(NAMED)
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > NAMED {
        s.push_str(&format!(" and {} more", items.len() - NAMED));
    }
    s
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Whether `recording`'s containers ran under `profile` (relative to the
/// seccomp root): a Localhost reference to it, as pod specs write it.
fn runs_under(rec: &Recording, profile: &str) -> bool {
    let want = format!("localhost/{profile}");
    rec.containers
        .iter()
        .any(|c| c.profile.as_deref() == Some(want.as_str()))
}

/// The hold `current` puts on `profile`, if it stops a call a recording of
/// a pod running under it holds. Only the containers that ran under the
/// profile count.
pub fn judge(
    profile: &str,
    previous: Version<'_>,
    current: Version<'_>,
    lib: Libseccomp,
    mode: Mode,
    recordings: &[Recording],
) -> Result<Option<Hold>, DiffError> {
    if previous.sha256 == current.sha256 {
        return Ok(None);
    }
    let want = format!("localhost/{profile}");
    let relevant: Vec<Recording> = recordings
        .iter()
        .filter(|r| runs_under(r, profile))
        .map(|r| {
            let mut r = r.clone();
            r.containers
                .retain(|c| c.profile.as_deref() == Some(want.as_str()));
            r
        })
        .collect();
    if relevant.is_empty() {
        return Ok(None);
    }
    let diffs = diff::diff_programs(previous.program, current.program, lib, mode)?;
    if !diff::any_harsher(&diffs) {
        return Ok(None);
    }
    let broken = against::against(&diffs, &relevant).broken;
    Ok((!broken.is_empty()).then(|| Hold {
        profile: profile.to_string(),
        previous: previous.sha256.to_string(),
        version: current.sha256.to_string(),
        broken,
    }))
}

/// Reads the recordings kept in a state directory with their fingerprint,
/// or `None` when it is still the one given (`crate::record::kept_recordings`).
pub type ReadRecordings = fn(&Path, Option<u64>) -> Option<(u64, Vec<Recording>)>;

/// What a profile's hold was judged on: the previous and current
/// versions' sha256 and the recordings' fingerprint.
type Stamp = (String, String, u64);

/// The guard as the pods' judge holds it: the daemon's profile versions,
/// where recordings are kept, and what it last judged of each profile.
pub struct RolloutGuard {
    versions: Arc<Mutex<ProfileVersions>>,
    state_dir: PathBuf,
    read: ReadRecordings,
    /// The recordings as of `fingerprint`.
    recordings: Option<(u64, Vec<Recording>)>,
    /// profile → what it was judged on, and the hold.
    judged: HashMap<String, (Stamp, Option<Hold>)>,
}

impl RolloutGuard {
    pub fn new(
        versions: Arc<Mutex<ProfileVersions>>,
        state_dir: PathBuf,
        read: ReadRecordings,
    ) -> Self {
        RolloutGuard {
            versions,
            state_dir,
            read,
            recordings: None,
            judged: HashMap::new(),
        }
    }

    /// The hold on `profile` (relative to the seccomp root) now, as one
    /// sentence: its latest version against the one before, in the node's
    /// mode, against the kept recordings. Judged again only when a version
    /// or a recording file changed.
    pub fn cause(&mut self, profile: &str, lint: &LintOptions) -> Option<String> {
        let key = crate::judge::versions::key(Path::new(profile));
        let (previous, current) = {
            let versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
            match versions.versions(&key) {
                [.., p, c] => (p.clone(), c.clone()),
                _ => return None,
            }
        };
        let (Some(old), Some(new)) = (&previous.program, &current.program) else {
            return None;
        };
        let known = self.recordings.as_ref().map(|(f, _)| *f);
        if let Some(read) = (self.read)(&self.state_dir, known) {
            self.recordings = Some(read);
        }
        let (fingerprint, recordings) = self.recordings.as_ref()?;
        let stamp = (
            previous.sha256.clone(),
            current.sha256.clone(),
            *fingerprint,
        );
        if let Some((s, hold)) = self.judged.get(&key) {
            if *s == stamp {
                return hold.as_ref().map(Hold::cause);
            }
        }
        let hold = judge(
            &key,
            Version {
                sha256: &previous.sha256,
                program: old,
            },
            Version {
                sha256: &current.sha256,
                program: new,
            },
            lint.oci_runtime.behaviour().libseccomp,
            Mode::of(lint),
            recordings,
        )
        .unwrap_or_else(|e| {
            tracing::warn!(seccomp_profile = %key, error = %e, "the rollout guard cannot compare the profile's versions");
            None
        });
        if let Some(h) = &hold {
            tracing::warn!(
                seccomp_profile = %key,
                profile_version = %h.version,
                previous_version = %h.previous,
                "the rollout guard holds the profile's classes: {}",
                h.cause()
            );
        }
        let cause = hold.as_ref().map(Hold::cause);
        self.judged.insert(key, (stamp, hold));
        cause
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_bpfgen::Native;
    use nodeproof_seccomp::filter::Arch;
    use nodeproof_seccomp::lint::{loaded_program, LintOptions};
    use nodeproof_seccomp::recording::{
        RecordedArch, RecordedContainer, RecordedPod, RecordedSyscall, FORMAT,
    };

    fn opts() -> LintOptions {
        LintOptions {
            arch: Arch::X86_64,
            check_listener: false,
            ..LintOptions::default()
        }
    }

    fn program(names: &[&str]) -> Vec<SockFilter> {
        let p = serde_json::json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "architectures": ["SCMP_ARCH_X86_64"],
            "syscalls": [{"names": names, "action": "SCMP_ACT_ALLOW"}],
        });
        loaded_program(&serde_json::to_vec(&p).unwrap(), &opts(), &Native)
            .expect("a filter")
            .1
    }

    fn recording(pod: &str, profile: &str, calls: &[(&str, u32)]) -> Recording {
        Recording {
            format: FORMAT.into(),
            node: Some("n1".into()),
            pod: Some(RecordedPod {
                namespace: "ml".into(),
                name: pod.into(),
                uid: None,
            }),
            started: String::new(),
            ended: String::new(),
            containers: vec![RecordedContainer {
                name: "app".into(),
                id: None,
                profile: Some(profile.into()),
                arches: vec![RecordedArch {
                    arch: Arch::X86_64,
                    syscalls: calls
                        .iter()
                        .map(|(n, nr)| RecordedSyscall {
                            nr: *nr,
                            name: Some((*n).into()),
                            args: vec![],
                        })
                        .collect(),
                }],
                lost: 0,
            }],
        }
    }

    #[test]
    fn a_change_that_stops_a_recorded_call_holds_and_names_it() {
        let base = [
            "read",
            "write",
            "close",
            "exit_group",
            "execve",
            "brk",
            "mmap",
        ];
        let old = program(&[&base[..], &["mkdir"]].concat());
        let new = program(&base);
        let lib = opts().oci_runtime.behaviour().libseccomp;
        let mode = Mode::of(&opts());
        let recs = vec![
            recording(
                "web-0",
                "localhost/profiles/app.json",
                &[("read", 0), ("mkdir", 83)],
            ),
            // Another profile's pod made mkdir too: not this change's.
            recording("db-0", "localhost/profiles/db.json", &[("mkdir", 83)]),
            recording("web-1", "localhost/profiles/app.json", &[("read", 0)]),
        ];
        let v = |sha, p| Version {
            sha256: sha,
            program: p,
        };
        let hold = judge(
            "profiles/app.json",
            v("9a8b7c6d5e4f3a2b1c0d", &old),
            v("1f2e3d4c5b6a79881100", &new),
            lib,
            mode,
            &recs,
        )
        .unwrap()
        .expect("a hold");
        assert_eq!(hold.broken.len(), 1);
        assert_eq!(
            hold.cause(),
            "profiles/app.json changed (sha256 9a8b7c6d5e4f → 1f2e3d4c5b6a) and stops mkdir that pod ml/web-0 made: new pods of this class wait; allow the calls or restore the previous version"
        );
        // Back to allowing it, or no pod of the profile recorded making it,
        // or the same version: no hold.
        let held = |old: &[SockFilter], (sha, new): (&str, &[SockFilter]), recs: &[Recording]| {
            let previous = Version {
                sha256: "9a8b",
                program: old,
            };
            let current = Version {
                sha256: sha,
                program: new,
            };
            judge("profiles/app.json", previous, current, lib, mode, recs).unwrap()
        };
        let wider = program(&[&base[..], &["mkdir", "rmdir"]].concat());
        assert_eq!(held(&old, ("7777", &wider), &recs), None);
        assert_eq!(held(&old, ("1f2e", &new), &recs[1..]), None);
        assert_eq!(held(&old, ("9a8b", &new), &recs), None);
        assert!(held(&old, ("1f2e", &new), &recs).is_some());
    }
}
