//! What a container was seen calling, as `nodeproof record` writes it and
//! `profile diff --against` and `advise --from` read it: per container and
//! architecture, the syscall numbers it made and, for the syscalls whose
//! rules in the pod's profile compare arguments, the values of those
//! arguments. A set, not a log: how often a call was made is not kept (the
//! kernel side keeps one bit per syscall, not an event per call).
//!
//! Pure data, its JSON, and the `seccomp_data` vectors a recording stands
//! for ([`RecordedContainer::vectors`]), which callers run through a compiled
//! filter ([`crate::cbpf::run`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::cbpf::SeccompData;
use crate::filter::Arch;

/// The `format` every recording carries; a reader refuses any other.
pub const FORMAT: &str = "nodeproof.recording/v1";

/// The most argument vectors one recorded syscall stands for: beyond it,
/// each argument's values are tried with the other arguments at their first
/// recorded value instead of every combination (see [`RecordedContainer::vectors`]).
pub const MAX_VECTORS_PER_SYSCALL: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("not a recording's JSON")]
    Json(#[source] serde_json::Error),
    #[error("format {found:?} is not {FORMAT:?}")]
    Format { found: String },
}

/// One recording: one pod's containers (or one cgroup's, offline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recording {
    /// Always [`FORMAT`].
    pub format: String,
    /// The node it was made on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The pod recorded; `None` for `record --cgroup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<RecordedPod>,
    /// When recording began and ended, RFC 3339.
    pub started: String,
    pub ended: String,
    pub containers: Vec<RecordedContainer>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedPod {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedContainer {
    /// The container's name in the pod (or the cgroup's path offline).
    pub name: String,
    /// The runtime's container id, without `containerd://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its seccomp profile as the pod spec names it
    /// (`localhost/profiles/app.json`, `runtime/default`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub arches: Vec<RecordedArch>,
    /// Calls the kernel's maps had no room for: when not 0 the recording
    /// is incomplete, and readers say so.
    #[serde(default)]
    pub lost: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedArch {
    #[serde(serialize_with = "arch_out", deserialize_with = "arch_in")]
    pub arch: Arch,
    /// Sorted by number, each once.
    pub syscalls: Vec<RecordedSyscall>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedSyscall {
    /// The number as the filter sees it in `seccomp_data.nr` (x32's with
    /// bit 30 set, `__X32_SYSCALL_BIT`).
    pub nr: u32,
    /// libseccomp's name for `nr` on the arch, for people; `nr` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The arguments recorded (those the profile's rules compare); the
    /// others were not, and are taken as 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<RecordedArg>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedArg {
    /// 0..=5.
    pub index: u8,
    /// Sorted, each once.
    pub values: Vec<u64>,
    /// False when more values were made than the kernel side keeps.
    #[serde(default = "yes")]
    pub complete: bool,
}

fn yes() -> bool {
    true
}

fn arch_out<S: Serializer>(a: &Arch, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.scmp_name())
}

fn arch_in<'de, D: Deserializer<'de>>(d: D) -> Result<Arch, D::Error> {
    let name = String::deserialize(d)?;
    Arch::from_scmp_name(&name)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown architecture {name:?}")))
}

impl Recording {
    pub fn from_json(bytes: &[u8]) -> Result<Recording, RecordingError> {
        let r: Recording = serde_json::from_slice(bytes).map_err(RecordingError::Json)?;
        if r.format != FORMAT {
            return Err(RecordingError::Format { found: r.format });
        }
        Ok(r)
    }

    /// `namespace/name` of the pod, or the first container's name.
    pub fn subject(&self) -> String {
        match &self.pod {
            Some(p) => format!("{}/{}", p.namespace, p.name),
            None => self
                .containers
                .first()
                .map_or_else(|| "an empty recording".into(), |c| c.name.clone()),
        }
    }
}

/// One call a recording stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedCall {
    pub arch: Arch,
    pub nr: u32,
    pub args: [u64; 6],
}

impl RecordedCall {
    pub fn seccomp_data(&self) -> SeccompData {
        SeccompData::new(self.nr as i32, self.arch.audit_arch(), self.args)
    }
}

impl RecordedContainer {
    /// Every call the container is recorded making: per syscall, every
    /// combination of its recorded argument values (unrecorded arguments
    /// 0). Where the combinations exceed [`MAX_VECTORS_PER_SYSCALL`], each
    /// argument's values with the others at their first value: a recording
    /// keeps values per argument, not which went together, so the product
    /// is already a superset of what was called.
    pub fn vectors(&self) -> Vec<RecordedCall> {
        let mut out = Vec::new();
        for a in &self.arches {
            for s in &a.syscalls {
                let mut base = [0u64; 6];
                let args: Vec<(usize, &[u64])> = s
                    .args
                    .iter()
                    .filter(|g| usize::from(g.index) < 6 && !g.values.is_empty())
                    .map(|g| (usize::from(g.index), g.values.as_slice()))
                    .collect();
                for (i, v) in &args {
                    base[*i] = v[0];
                }
                let product = args
                    .iter()
                    .try_fold(1usize, |n, (_, v)| n.checked_mul(v.len()));
                let mut seen = BTreeSet::new();
                let mut push = |args: [u64; 6]| {
                    if seen.insert(args) {
                        out.push(RecordedCall {
                            arch: a.arch,
                            nr: s.nr,
                            args,
                        });
                    }
                };
                match product {
                    Some(n) if n <= MAX_VECTORS_PER_SYSCALL => {
                        for k in 0..n {
                            let mut v = base;
                            let mut rest = k;
                            for (i, values) in &args {
                                v[*i] = values[rest % values.len()];
                                rest /= values.len();
                            }
                            push(v);
                        }
                    }
                    _ => {
                        push(base);
                        for (i, values) in &args {
                            for x in values.iter() {
                                let mut v = base;
                                v[*i] = *x;
                                push(v);
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(args: Vec<RecordedArg>) -> RecordedContainer {
        RecordedContainer {
            name: "app".into(),
            id: None,
            profile: None,
            arches: vec![RecordedArch {
                arch: Arch::X86_64,
                syscalls: vec![
                    RecordedSyscall {
                        nr: 0,
                        name: Some("read".into()),
                        args: vec![],
                    },
                    RecordedSyscall {
                        nr: 135,
                        name: Some("personality".into()),
                        args,
                    },
                ],
            }],
            lost: 0,
        }
    }

    #[test]
    fn a_recording_round_trips_and_refuses_another_format() {
        let r = Recording {
            format: FORMAT.into(),
            node: Some("n1".into()),
            pod: Some(RecordedPod {
                namespace: "ml".into(),
                name: "vllm-0".into(),
                uid: None,
            }),
            started: "2026-12-06T01:00:00Z".into(),
            ended: "2026-12-06T01:01:00Z".into(),
            containers: vec![container(vec![])],
        };
        let json = serde_json::to_vec(&r).unwrap();
        assert!(String::from_utf8_lossy(&json).contains("\"arch\":\"SCMP_ARCH_X86_64\""));
        assert_eq!(Recording::from_json(&json).unwrap(), r);
        assert_eq!(r.subject(), "ml/vllm-0");
        let other = String::from_utf8(json).unwrap().replace(FORMAT, "other/v9");
        assert!(matches!(
            Recording::from_json(other.as_bytes()),
            Err(RecordingError::Format { .. })
        ));
        let bad_arch = serde_json::to_string(&r)
            .unwrap()
            .replace("SCMP_ARCH_X86_64", "SCMP_ARCH_VAX");
        assert!(matches!(
            Recording::from_json(bad_arch.as_bytes()),
            Err(RecordingError::Json(_))
        ));
    }

    #[test]
    fn vectors_are_every_combination_of_the_recorded_values() {
        let c = container(vec![
            RecordedArg {
                index: 0,
                values: vec![0, 8],
                complete: true,
            },
            RecordedArg {
                index: 2,
                values: vec![1, 2, 3],
                complete: true,
            },
        ]);
        let v = c.vectors();
        // read once with zeros, personality 2 × 3.
        assert_eq!(v.len(), 1 + 6);
        assert_eq!(v[0].args, [0; 6]);
        let combos: BTreeSet<(u64, u64)> = v[1..].iter().map(|c| (c.args[0], c.args[2])).collect();
        assert_eq!(combos.len(), 6);
        assert!(combos.contains(&(8, 3)));
        assert!(v.iter().all(|c| c.arch == Arch::X86_64));
    }

    #[test]
    fn too_many_combinations_vary_one_argument_at_a_time() {
        let many: Vec<u64> = (0..100).collect();
        let c = container(
            (0..3)
                .map(|i| RecordedArg {
                    index: i,
                    values: many.clone(),
                    complete: true,
                })
                .collect(),
        );
        let v = c.vectors();
        // read, then 100^3 > the cap: the base plus 3 × 99 new ones.
        assert_eq!(v.len(), 1 + 1 + 3 * 99);
        assert!(v.iter().any(|c| c.args[..3] == [0, 0, 99]));
    }
}
