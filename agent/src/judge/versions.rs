//! The recent versions of each profile under the seccomp root, and which one
//! a container runs under. A seccomp filter is fixed when the container
//! starts (runc loads it in `runc init`; containerd reads the file at
//! CreateContainer, `pkg/cri/opts/spec_opts.go` `WithSeccomp`), so after an
//! edit running containers keep the old filter and new or restarted ones
//! get the new: a denial is the edit's doing only where the container
//! started after it, and only if the version before allowed the call.
//!
//! Pure: the caller reads the files (the profiles check's scan, no second
//! reader), owns the clock and keeps the bytes ([`ProfileVersions::encode`]
//! / [`ProfileVersions::decode`]; the daemon writes them to its state
//! directory).
//!
//! One program per version: the node's mode (its runtime, OCI runtime and
//! native arch, as `observe::profiles::lint_options` builds them). The
//! native arch's program covers every arch the profile lists (libseccomp
//! checks `seccomp_data.arch` first), and noNewPrivileges does not change
//! the program, only when runc loads it (before or after dropping the
//! capabilities, `libcontainer/init_linux.go`): both modes load the same
//! instructions, so one is kept, not two.

use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path};
use std::time::{Duration, SystemTime};

use nodeproof_report::denial_change::PreviousVerdict;
use nodeproof_seccomp::cbpf::SockFilter;
use nodeproof_seccomp::diff;
use nodeproof_seccomp::filter::Arch;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Versions kept per profile: a rollout edits a profile a few times at most
/// before containers restart onto it; 8 keeps the edits of a busy day while
/// the containers that started under them can still be running.
pub const MAX_VERSIONS: usize = 8;
/// Bytes the kept versions may take (programs, hashes, paths), oldest
/// dropped first beyond it. A program is at most 4096 instructions of 8
/// bytes (32 KiB, the kernel's limit); the RuntimeDefault profile compiles
/// to about 1000 (8 KiB), a workload's Localhost profile of a few dozen
/// rules to 100–300 (1–2 KiB). 2 MiB holds 8 versions of 100+ such profiles
/// or of 32 RuntimeDefault-sized ones, and is a tenth of the agent's
/// steady-memory target (20 MiB, `agent_memory` bench): the
/// `profile_versions` bench measures 6.3 MiB for 100 × 8 RuntimeDefault
/// versions, which this budget cuts to its newest third. A profile's latest
/// version is never dropped: new containers get it.
pub const MAX_BYTES: usize = 2 << 20;

/// The format of [`ProfileVersions::encode`]; another is refused.
const FORMAT: u32 = 1;

/// One version of a profile file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// sha256 of the file's contents, hex.
    pub sha256: String,
    /// When the agent first saw it on disk (see [`ProfileVersions::observe`]).
    pub first_seen: SystemTime,
    /// The program the node's runtime loads for it (the -ENOSYS stub, then
    /// libseccomp's filter); `None` when no filter is built (not JSON, a
    /// profile containerd refuses, one that disables seccomp).
    #[serde(with = "program_words")]
    pub program: Option<Vec<SockFilter>>,
}

impl Version {
    fn bytes(&self, path: &str) -> usize {
        std::mem::size_of::<Version>()
            + self.sha256.len()
            + path.len()
            + self
                .program
                .as_ref()
                .map_or(0, |p| p.len() * SockFilter::SIZE)
    }

    /// The hash's first 8 hex digits, as messages show it.
    pub fn short(&self) -> &str {
        &self.sha256[..self.sha256.len().min(8)]
    }
}

/// Instructions as `code<<48 | jt<<40 | jf<<32 | k`: one JSON number each.
mod program_words {
    use nodeproof_seccomp::cbpf::SockFilter;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Option<Vec<SockFilter>>, s: S) -> Result<S::Ok, S::Error> {
        let words: Option<Vec<u64>> = p.as_ref().map(|p| {
            p.iter()
                .map(|i| {
                    u64::from(i.code) << 48
                        | u64::from(i.jt) << 40
                        | u64::from(i.jf) << 32
                        | u64::from(i.k)
                })
                .collect()
        });
        serde::Serialize::serialize(&words, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<SockFilter>>, D::Error> {
        let words: Option<Vec<u64>> = Option::deserialize(d)?;
        Ok(words.map(|w| {
            w.into_iter()
                .map(|w| SockFilter {
                    code: (w >> 48) as u16,
                    jt: (w >> 40) as u8,
                    jf: (w >> 32) as u8,
                    k: w as u32,
                })
                .collect()
        }))
    }
}

/// A version as a change names it: its hash and when it was first seen,
/// not its program (a root of 10,000 new files makes 10,000 changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionStamp {
    pub sha256: String,
    pub first_seen: SystemTime,
}

impl From<&Version> for VersionStamp {
    fn from(v: &Version) -> Self {
        VersionStamp {
            sha256: v.sha256.clone(),
            first_seen: v.first_seen,
        }
    }
}

/// A profile's contents changed: the version before (none for a file seen
/// for the first time) and the new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionChange {
    pub path: String,
    pub previous: Option<VersionStamp>,
    pub current: VersionStamp,
}

/// The version a container started under, and the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerVersion<'a> {
    pub current: &'a Version,
    /// The version before `current`; `None` when `current` is the oldest
    /// known (nothing to compare with).
    pub previous: Option<&'a Version>,
    /// When `current` was replaced, if it was.
    pub until: Option<SystemTime>,
}

#[derive(Debug, thiserror::Error)]
pub enum VersionsError {
    #[error("the profile versions are not in a form this agent reads")]
    Decode(#[source] serde_json::Error),
    #[error("the profile versions are in format {found}, this agent reads {FORMAT}")]
    Format { found: u32 },
}

#[derive(Serialize, Deserialize)]
struct Stored {
    format: u32,
    profiles: BTreeMap<String, Vec<Version>>,
}

/// The versions of every profile, oldest first, bounded by
/// [`MAX_VERSIONS`] per profile and [`MAX_BYTES`] in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileVersions {
    profiles: BTreeMap<String, Vec<Version>>,
    /// Paths whose history came from the state file and that have not been
    /// observed since: a change found at their first observation happened
    /// while the agent was down.
    unobserved: HashSet<String>,
    max_versions: usize,
    max_bytes: usize,
}

impl Default for ProfileVersions {
    fn default() -> Self {
        ProfileVersions::with_limits(MAX_VERSIONS, MAX_BYTES)
    }
}

/// The key of a profile: its path under the seccomp root as a pod names it
/// (`profiles/app.json`), `.` components and doubled slashes dropped.
pub fn key(relative: &Path) -> String {
    relative
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// sha256 of `bytes`, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl ProfileVersions {
    pub fn with_limits(max_versions: usize, max_bytes: usize) -> Self {
        ProfileVersions {
            profiles: BTreeMap::new(),
            unobserved: HashSet::new(),
            max_versions: max_versions.max(1),
            max_bytes,
        }
    }

    /// The file `path` read with `bytes` (modified at `mtime`) at `now`:
    /// a new version when the contents differ from the latest known, its
    /// program from `program` (called only then). First seen is `now`,
    /// except where the agent could not have seen it sooner: a file's
    /// first version, and a change found at the first observation after a
    /// restart (it happened while the agent was down), take the file's
    /// mtime when that is later than the version before (and not in the
    /// future), since a container started between the edit and `now` got
    /// the new version.
    pub fn observe(
        &mut self,
        path: &str,
        bytes: &[u8],
        mtime: Option<SystemTime>,
        now: SystemTime,
        program: impl FnOnce() -> Option<Vec<SockFilter>>,
    ) -> Option<VersionChange> {
        let after_restart = self.unobserved.remove(path);
        let sha256 = sha256_hex(bytes);
        let versions = self.profiles.entry(path.to_string()).or_default();
        let previous = versions.last().map(VersionStamp::from);
        if previous.as_ref().is_some_and(|p| p.sha256 == sha256) {
            return None;
        }
        let mtime = mtime.filter(|m| *m <= now);
        let first_seen = match &previous {
            None => mtime.unwrap_or(now),
            Some(p) if after_restart => mtime.filter(|m| *m > p.first_seen).unwrap_or(now),
            Some(_) => now,
        };
        let current = Version {
            sha256,
            first_seen,
            program: program(),
        };
        let stamp = VersionStamp::from(&current);
        versions.push(current);
        if versions.len() > self.max_versions {
            let excess = versions.len() - self.max_versions;
            versions.drain(..excess);
        }
        self.trim();
        Some(VersionChange {
            path: path.to_string(),
            previous,
            current: stamp,
        })
    }

    /// Forgets the profiles not in `present` (the files gone from the root).
    pub fn retain(&mut self, present: &HashSet<String>) {
        self.profiles.retain(|p, _| present.contains(p));
        self.unobserved.retain(|p| present.contains(p));
    }

    /// Drops the oldest versions, whichever profile they are of, until the
    /// kept ones fit the byte budget; a profile's latest is never dropped.
    fn trim(&mut self) {
        let mut total = self.bytes();
        while total > self.max_bytes {
            let oldest = self
                .profiles
                .iter()
                .filter(|(_, v)| v.len() > 1)
                .min_by_key(|(_, v)| v[0].first_seen)
                .map(|(p, _)| p.clone());
            let Some(path) = oldest else {
                return;
            };
            if let Some(v) = self.profiles.get_mut(&path) {
                total -= v[0].bytes(&path);
                v.remove(0);
            }
        }
    }

    /// Past the budget with only latest versions left (a root of thousands
    /// of profiles), the least recently changed keep their hash and time
    /// but not their program: a denial under them is judged `unknown`. Once
    /// a pass over the root, not per file: it sorts every profile.
    pub fn fit_programs(&mut self) {
        let mut total = self.bytes();
        if total <= self.max_bytes {
            return;
        }
        let mut latest: Vec<(SystemTime, String)> = self
            .profiles
            .iter()
            .filter_map(|(p, v)| {
                let l = v.last()?;
                l.program.as_ref().map(|_| (l.first_seen, p.clone()))
            })
            .collect();
        latest.sort();
        for (_, path) in latest {
            if total <= self.max_bytes {
                return;
            }
            if let Some(l) = self.profiles.get_mut(&path).and_then(|v| v.last_mut()) {
                let before = l.bytes(&path);
                l.program = None;
                total -= before - l.bytes(&path);
            }
        }
    }

    /// The bytes the kept versions take, as the budget counts them.
    pub fn bytes(&self) -> usize {
        self.profiles
            .iter()
            .flat_map(|(p, v)| v.iter().map(move |v| v.bytes(p)))
            .sum()
    }

    /// The versions of `path`, oldest first.
    pub fn versions(&self, path: &str) -> &[Version] {
        self.profiles.get(path).map_or(&[], Vec::as_slice)
    }

    /// The latest version of `path`.
    pub fn latest(&self, path: &str) -> Option<&Version> {
        self.versions(path).last()
    }

    /// Profiles with at least one version kept.
    pub fn len(&self) -> usize {
        self.profiles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.profiles.is_empty()
    }

    /// The version of `path` a container that started at `started` (the
    /// pod status's `startedAt`, whole seconds) runs under: the latest
    /// first seen before that second began. A version first seen within the
    /// second itself is taken as not yet the container's: containerd read
    /// the file at CreateContainer, before the start the kubelet records,
    /// and an edit in the same second more likely followed that read.
    /// `None` when the container started before every version known (its
    /// version may be older than any the agent saw).
    pub fn at_start(&self, path: &str, started: SystemTime) -> Option<ContainerVersion<'_>> {
        let versions = self.versions(path);
        let second = truncate_to_second(started);
        let i = versions.iter().rposition(|v| v.first_seen < second)?;
        Some(ContainerVersion {
            current: &versions[i],
            previous: i.checked_sub(1).map(|p| &versions[p]),
            until: versions.get(i + 1).map(|v| v.first_seen),
        })
    }

    /// The state file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(&Stored {
            format: FORMAT,
            profiles: self.profiles.clone(),
        })
        .unwrap_or_default()
    }

    /// The versions a state file kept; each profile's next observation is
    /// taken as the first after a restart (see [`ProfileVersions::observe`]).
    pub fn decode(bytes: &[u8]) -> Result<ProfileVersions, VersionsError> {
        let stored: Stored = serde_json::from_slice(bytes).map_err(VersionsError::Decode)?;
        if stored.format != FORMAT {
            return Err(VersionsError::Format {
                found: stored.format,
            });
        }
        let mut out = ProfileVersions {
            unobserved: stored.profiles.keys().cloned().collect(),
            profiles: stored.profiles,
            ..ProfileVersions::default()
        };
        for v in out.profiles.values_mut() {
            if v.len() > out.max_versions {
                let excess = v.len() - out.max_versions;
                v.drain(..excess);
            }
        }
        out.trim();
        Ok(out)
    }
}

fn truncate_to_second(t: SystemTime) -> SystemTime {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => SystemTime::UNIX_EPOCH + Duration::from_secs(d.as_secs()),
        Err(_) => t,
    }
}

/// What `previous` did with syscall `nr` on the arch the tracer named
/// (`x86_64`), without the call's arguments: `Allowed` or `Denied` when
/// every region of the arguments its program compares for that number
/// decides alike (ALLOW and LOG run the call; ERRNO, TRAP and the kills
/// stop it), `Unknown` otherwise: a decision that depends on arguments the
/// tracer does not report, one left to another process (NOTIFY, TRACE),
/// regions only sampled, no program, or an arch the name does not give.
pub fn judge(previous: &Version, arch: &str, nr: i32) -> PreviousVerdict {
    let (Some(program), Some(arch), Ok(nr)) = (
        previous.program.as_deref(),
        Arch::from_cli_name(arch),
        u32::try_from(nr),
    ) else {
        return PreviousVerdict::Unknown;
    };
    let Ok(d) = diff::decisions(program, arch.audit_arch(), nr) else {
        return PreviousVerdict::Unknown;
    };
    if d.sampled {
        return PreviousVerdict::Unknown;
    }
    let runs = |a: &nodeproof_seccomp::filter::Action| diff::severity(*a) == 0;
    let stops = |a: &nodeproof_seccomp::filter::Action| diff::severity(*a) >= 2;
    if !d.actions.is_empty() && d.actions.iter().all(runs) {
        PreviousVerdict::Allowed
    } else if !d.actions.is_empty() && d.actions.iter().all(stops) {
        PreviousVerdict::Denied
    } else {
        PreviousVerdict::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeproof_bpfgen::Native;
    use nodeproof_seccomp::lint::{loaded_program, LintOptions};

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    fn program(src: &[u8]) -> Option<Vec<SockFilter>> {
        loaded_program(src, &LintOptions::default(), &Native).map(|(_, p)| p)
    }

    const V1: &[u8] = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["rmdir"],"action":"SCMP_ACT_ERRNO"}]}"#;
    const V2: &[u8] = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","rmdir"],"action":"SCMP_ACT_ERRNO"}]}"#;
    const ARGS: &[u8] = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","args":[{"index":1,"value":448,"op":"SCMP_CMP_EQ"}]}]}"#;

    fn nr(name: &str) -> i32 {
        nodeproof_seccomp::syscalls::resolve_syscall(name, Arch::X86_64).unwrap()
    }

    #[test]
    fn an_edit_is_a_new_version_and_the_same_contents_are_not() {
        let mut v = ProfileVersions::default();
        let first = v
            .observe("p.json", V1, Some(t(0)), t(10), || program(V1))
            .unwrap();
        assert_eq!(first.previous, None);
        assert_eq!(first.current.first_seen, t(0), "a new file: its mtime");
        assert!(v
            .observe("p.json", V1, Some(t(0)), t(20), || panic!(
                "not compiled again"
            ))
            .is_none());
        let c = v
            .observe("p.json", V2, Some(t(25)), t(30), || program(V2))
            .unwrap();
        assert_eq!(c.previous.unwrap().sha256, sha256_hex(V1));
        assert_eq!(
            c.current.first_seen,
            t(30),
            "seen while running: the agent's clock"
        );
        assert_eq!(v.versions("p.json").len(), 2);
    }

    #[test]
    fn past_the_budget_the_least_recently_changed_latest_versions_lose_their_programs() {
        let t = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let one = {
            let mut v = ProfileVersions::with_limits(8, usize::MAX);
            v.observe("a", V1, None, t(0), || program(V1));
            v.bytes()
        };
        let prog = program(V1).unwrap().len() * SockFilter::SIZE;
        // Room for five profiles' hashes and times, and three programs.
        let budget = 5 * (one - prog) + 3 * prog;
        let mut v = ProfileVersions::with_limits(8, budget);
        for (i, p) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            v.observe(p, V1, None, t(i as u64), || program(V1));
        }
        assert!(v.bytes() > budget, "latest versions are never dropped");
        v.fit_programs();
        assert!(v.bytes() <= budget, "{} bytes", v.bytes());
        let kept: Vec<bool> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|p| v.latest(p).unwrap().program.is_some())
            .collect();
        assert_eq!(kept, [false, false, true, true, true], "oldest first");
        assert_eq!(v.len(), 5, "every profile keeps its hash and time");
    }

    #[test]
    fn versions_are_bounded_per_profile_and_in_bytes_oldest_first() {
        let mut v = ProfileVersions::with_limits(3, usize::MAX);
        for i in 0..5u64 {
            v.observe("a", format!("{{\"v\":{i}}}").as_bytes(), None, t(i), || {
                None
            });
        }
        let kept: Vec<_> = v.versions("a").iter().map(|x| x.first_seen).collect();
        assert_eq!(kept, [t(2), t(3), t(4)]);
        // A budget for about three versions with programs: the oldest go
        // first, whichever profile they are of; each profile keeps its latest.
        let p = program(V2).unwrap();
        let one = Version {
            sha256: "x".repeat(64),
            first_seen: t(0),
            program: Some(p.clone()),
        }
        .bytes("a");
        let mut v = ProfileVersions::with_limits(8, 3 * one + one / 2);
        v.observe("a", b"1", None, t(1), || Some(p.clone()));
        v.observe("b", b"1", None, t(2), || Some(p.clone()));
        v.observe("a", b"2", None, t(3), || Some(p.clone()));
        v.observe("b", b"2", None, t(4), || Some(p.clone()));
        assert!(v.bytes() <= 3 * one + one / 2);
        assert_eq!(v.versions("a").len(), 1, "a's oldest (t1) went first");
        assert_eq!(v.versions("b").len(), 2);
        let mut tiny = ProfileVersions::with_limits(8, 1);
        tiny.observe("a", b"1", None, t(1), || Some(p.clone()));
        tiny.observe("b", b"1", None, t(2), || Some(p.clone()));
        assert_eq!((tiny.versions("a").len(), tiny.versions("b").len()), (1, 1));
    }

    #[test]
    fn a_change_while_the_agent_was_down_is_dated_by_its_mtime_when_later() {
        let mut v = ProfileVersions::default();
        v.observe("p", V1, None, t(100), || None);
        v.observe("q", V1, None, t(100), || None);
        v.observe("r", V1, None, t(100), || None);
        let mut back = ProfileVersions::decode(&v.encode()).unwrap();
        let c = back
            .observe("p", V2, Some(t(150)), t(200), || None)
            .unwrap();
        assert_eq!(c.current.first_seen, t(150), "edited while down: its mtime");
        // An mtime not later than the last known version (kept by `cp -p`),
        // or in the future: the agent's clock.
        let c = back.observe("q", V2, Some(t(50)), t(200), || None).unwrap();
        assert_eq!(c.current.first_seen, t(200));
        let c = back
            .observe("r", V2, Some(t(900)), t(200), || None)
            .unwrap();
        assert_eq!(c.current.first_seen, t(200));
        // Later edits, while running: the clock, whatever the mtime.
        let c = back
            .observe("p", V1, Some(t(210)), t(300), || None)
            .unwrap();
        assert_eq!(c.current.first_seen, t(300));
    }

    #[test]
    fn a_container_gets_the_version_seen_before_its_start_second() {
        let mut v = ProfileVersions::default();
        v.observe("p", V1, None, t(100), || None);
        // v2 seen at 200.4 s.
        v.observe("p", V2, None, t(200) + Duration::from_millis(400), || None);
        assert_eq!(v.at_start("p", t(50)), None, "before any version known");
        let at = |s| v.at_start("p", t(s)).map(|c| c.current.sha256.clone());
        assert_eq!(at(150), Some(sha256_hex(V1)));
        // startedAt 200 (the container started in 200.0..201.0): a tie with
        // v2's second, taken as v1 (containerd read the file before).
        assert_eq!(at(200), Some(sha256_hex(V1)));
        let c = v.at_start("p", t(201)).unwrap();
        assert_eq!(c.current.sha256, sha256_hex(V2));
        assert_eq!(c.previous.unwrap().sha256, sha256_hex(V1));
        assert_eq!(c.until, None);
        let old = v.at_start("p", t(150)).unwrap();
        assert_eq!(
            (old.previous, old.until),
            (None, Some(t(200) + Duration::from_millis(400)))
        );
        assert_eq!(v.at_start("other", t(500)), None);
    }

    #[test]
    fn the_versions_round_trip_and_a_bad_file_is_an_error() {
        let mut v = ProfileVersions::default();
        v.observe(
            "profiles/a.json",
            V1,
            None,
            t(1) + Duration::from_nanos(7),
            || program(V1),
        );
        v.observe("profiles/a.json", V2, None, t(2), || program(V2));
        v.observe("b.json", b"not json", None, t(3), || program(b"not json"));
        let back = ProfileVersions::decode(&v.encode()).unwrap();
        assert_eq!(back.profiles, v.profiles);
        assert!(back.versions("profiles/a.json")[1]
            .program
            .as_ref()
            .is_some_and(|p| p.len() > 3));
        assert_eq!(back.versions("b.json")[0].program, None);
        assert!(matches!(
            ProfileVersions::decode(b"{\"format\":1"),
            Err(VersionsError::Decode(_))
        ));
        assert!(matches!(
            ProfileVersions::decode(b""),
            Err(VersionsError::Decode(_))
        ));
        assert!(matches!(
            ProfileVersions::decode(br#"{"format":9,"profiles":{}}"#),
            Err(VersionsError::Format { found: 9 })
        ));
    }

    #[test]
    fn both_no_new_privileges_modes_load_the_same_program() {
        for src in [V1, V2, ARGS] {
            let nnp = LintOptions {
                no_new_privileges: true,
                ..LintOptions::default()
            };
            assert_eq!(
                loaded_program(src, &nnp, &Native).map(|(_, p)| p),
                program(src),
                "{}",
                String::from_utf8_lossy(src)
            );
        }
    }

    #[test]
    fn the_previous_version_is_judged_on_the_number_alone() {
        let version = |src: &[u8]| Version {
            sha256: sha256_hex(src),
            first_seen: t(0),
            program: program(src),
        };
        let mkdir = nr("mkdir");
        assert_eq!(
            judge(&version(V1), "x86_64", mkdir),
            PreviousVerdict::Allowed
        );
        assert_eq!(
            judge(&version(V2), "x86_64", mkdir),
            PreviousVerdict::Denied
        );
        // Denied only for one mode argument: the tracer does not say which.
        assert_eq!(
            judge(&version(ARGS), "x86_64", mkdir),
            PreviousVerdict::Unknown
        );
        assert_eq!(
            judge(&version(ARGS), "x86_64", nr("rmdir")),
            PreviousVerdict::Allowed
        );
        assert_eq!(
            judge(&version(b"[]"), "x86_64", mkdir),
            PreviousVerdict::Unknown
        );
        assert_eq!(
            judge(&version(V1), "sparc", mkdir),
            PreviousVerdict::Unknown
        );
        assert_eq!(judge(&version(V1), "x86_64", -1), PreviousVerdict::Unknown);
    }

    #[test]
    fn keys_are_paths_under_the_root_as_pods_name_them() {
        assert_eq!(key(Path::new("./profiles//app.json")), "profiles/app.json");
        assert_eq!(key(Path::new("app.json")), "app.json");
    }
}
