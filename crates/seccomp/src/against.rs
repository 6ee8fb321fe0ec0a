//! The recorded calls a profile change breaks: `profile diff OLD NEW
//! --against RECORDING…` and the daemon's rollout guard. Pure: the exact
//! difference of the two filters ([`crate::diff`]) against what containers
//! were recorded calling ([`crate::recording`]).
//!
//! A recorded call is broken where a harsher change ([`Change::harsher`])
//! covers it: its arch, its number and, for each argument the change
//! compares, a recorded value in the change's region. A recording keeps the
//! values of the arguments the pod's profile compared when it was made; a
//! change that compares an argument the recording did not keep covers the
//! call only possibly ([`Certainty::ArgsNotRecorded`]): the value the
//! container passed is unknown.

use serde::{Serialize, Serializer};

use crate::diff::{Change, ProfileDiff, Syscall};
use crate::filter::{Action, Arch};
use crate::recording::{RecordedSyscall, Recording};

/// x32 numbers carry this bit in `seccomp_data.nr` (`__X32_SYSCALL_BIT`).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// How sure the break is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Certainty {
    /// A recorded call (number and recorded argument values) is in the
    /// changed region.
    Recorded,
    /// The number is, and the recorded arguments are, but the change also
    /// compares these arguments, which the recording did not keep.
    ArgsNotRecorded { indexes: Vec<u8> },
}

/// One recorded call NEW stops where OLD did not (or stops harder).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokenCall {
    /// `namespace/pod` (or the recorded cgroup).
    pub subject: String,
    pub container: String,
    #[serde(serialize_with = "arch_name")]
    pub arch: Arch,
    pub syscall: Syscall,
    /// The recorded argument values in the region: (index, value).
    pub args: Vec<(u8, u64)>,
    #[serde(serialize_with = "display")]
    pub old: Action,
    #[serde(serialize_with = "display")]
    pub new: Action,
    pub certainty: Certainty,
}

fn display<T: std::fmt::Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn arch_name<S: Serializer>(a: &Arch, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.scmp_name())
}

impl std::fmt::Display for BrokenCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} container {}: {}",
            self.subject, self.container, self.syscall
        )?;
        for (i, v) in &self.args {
            write!(f, " arg{i}={v:#x}")?;
        }
        write!(f, ": {} -> {}", self.old, self.new)?;
        if let Certainty::ArgsNotRecorded { indexes } = &self.certainty {
            let names: Vec<String> = indexes.iter().map(|i| format!("arg{i}")).collect();
            write!(
                f,
                " if {} (not recorded) is in the changed range",
                names.join(", ")
            )?;
        }
        Ok(())
    }
}

/// A recording that may miss calls: its kernel maps were full.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Incomplete {
    pub subject: String,
    pub container: String,
    /// Calls with no room (0 when only argument values were cut).
    pub lost: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Against {
    pub broken: Vec<BrokenCall>,
    pub incomplete: Vec<Incomplete>,
}

fn number(arch: Arch, nr: u32) -> u32 {
    if arch == Arch::X32 {
        nr | X32_SYSCALL_BIT
    } else {
        nr
    }
}

fn covers_number(change: &Change, nr: u32) -> bool {
    match change.syscall {
        Syscall::Named { nr: n, .. } => n == nr,
        Syscall::Numbers { first, last } => (first..=last).contains(&nr),
    }
}

/// A recorded call in a change's region: the recorded values found in it
/// (index, value) and the indexes the change compares that were not kept.
struct InRegion {
    found: Vec<(u8, u64)>,
    unknown: Vec<u8>,
}

/// `None` when a recorded argument falls outside the change's region.
fn match_args(change: &Change, call: &RecordedSyscall) -> Option<InRegion> {
    let mut found = Vec::new();
    let mut unknown = Vec::new();
    for a in &change.args {
        match call.args.iter().find(|r| r.index == a.index) {
            Some(r) => {
                let v = r.values.iter().copied().find(|v| a.values.contains(*v))?;
                found.push((a.index, v));
            }
            None => unknown.push(a.index),
        }
    }
    Some(InRegion { found, unknown })
}

/// Every recorded call a harsher change of `diffs` covers, once per
/// (recording, container, arch, number, change), and the recordings that
/// may miss calls. Calls on an architecture neither filter names are not
/// judged: both filters stop them with their bad-arch action, so a container
/// recorded making them could not have run them under OLD either.
pub fn against(diffs: &[ProfileDiff], recordings: &[Recording]) -> Against {
    let mut out = Against::default();
    for rec in recordings {
        let subject = rec.subject();
        for c in &rec.containers {
            let cut = c
                .arches
                .iter()
                .flat_map(|a| &a.syscalls)
                .flat_map(|s| &s.args)
                .any(|a| !a.complete);
            if c.lost > 0 || cut {
                out.incomplete.push(Incomplete {
                    subject: subject.clone(),
                    container: c.name.clone(),
                    lost: c.lost,
                });
            }
            for a in &c.arches {
                for d in diffs.iter().filter(|d| d.arch == Some(a.arch)) {
                    for s in &a.syscalls {
                        let nr = number(a.arch, s.nr);
                        for change in d.changes.iter().filter(|ch| ch.harsher) {
                            if !covers_number(change, nr) {
                                continue;
                            }
                            let Some(InRegion {
                                found: args,
                                unknown,
                            }) = match_args(change, s)
                            else {
                                continue;
                            };
                            out.broken.push(BrokenCall {
                                subject: subject.clone(),
                                container: c.name.clone(),
                                arch: a.arch,
                                syscall: match &s.name {
                                    Some(name) => Syscall::Named {
                                        name: name.clone(),
                                        nr,
                                    },
                                    None => change.syscall.clone(),
                                },
                                args,
                                old: change.old,
                                new: change.new,
                                certainty: if unknown.is_empty() {
                                    Certainty::Recorded
                                } else {
                                    Certainty::ArgsNotRecorded { indexes: unknown }
                                },
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{ArgRange, ArgValues, Mode};
    use crate::lint::Runtime;
    use crate::oci_runtime::OciRuntime;
    use crate::recording::{RecordedArch, RecordedArg, RecordedContainer, FORMAT};

    fn mode() -> Mode {
        Mode {
            runtime: Runtime::Containerd,
            oci_runtime: OciRuntime::default(),
            no_new_privileges: false,
            native: Arch::X86_64,
        }
    }

    fn change(name: &str, nr: u32, args: Vec<ArgRange>, harsher: bool) -> Change {
        Change {
            syscall: Syscall::Named {
                name: name.into(),
                nr,
            },
            args,
            old: Action::Allow,
            new: if harsher {
                Action::Errno(1)
            } else {
                Action::Allow
            },
            harsher,
            sampled: false,
        }
    }

    fn recording(syscalls: Vec<RecordedSyscall>) -> Recording {
        Recording {
            format: FORMAT.into(),
            node: None,
            pod: None,
            started: String::new(),
            ended: String::new(),
            containers: vec![RecordedContainer {
                name: "app".into(),
                id: None,
                profile: None,
                arches: vec![RecordedArch {
                    arch: Arch::X86_64,
                    syscalls,
                }],
                lost: 0,
            }],
        }
    }

    fn call(nr: u32, args: Vec<RecordedArg>) -> RecordedSyscall {
        RecordedSyscall {
            nr,
            name: None,
            args,
        }
    }

    #[test]
    fn a_harsher_change_breaks_only_the_calls_in_its_region() {
        let diffs = vec![ProfileDiff {
            arch: Some(Arch::X86_64),
            mode: mode(),
            changes: vec![
                change("mkdir", 83, vec![], true),
                change(
                    "personality",
                    135,
                    vec![ArgRange {
                        index: 0,
                        values: ArgValues::Range { first: 8, last: 8 },
                    }],
                    true,
                ),
                change("getppid", 110, vec![], false),
            ],
        }];
        let arg = |values: Vec<u64>| {
            vec![RecordedArg {
                index: 0,
                values,
                complete: true,
            }]
        };
        // mkdir broken; personality(0) outside the region; getppid's change is not harsher.
        let r = recording(vec![
            call(83, vec![]),
            call(135, arg(vec![0])),
            call(110, vec![]),
        ]);
        let a = against(&diffs, &[r]);
        assert_eq!(a.broken.len(), 1, "{:?}", a.broken);
        assert_eq!(a.broken[0].syscall.to_string(), "mkdir (83)");
        assert_eq!(a.broken[0].certainty, Certainty::Recorded);
        // personality(8) recorded: broken, with its value named.
        let r = recording(vec![call(135, arg(vec![0, 8]))]);
        let a = against(&diffs, &[r]);
        assert_eq!(a.broken.len(), 1);
        assert_eq!(a.broken[0].args, vec![(0, 8)]);
        // personality with its argument not recorded: possibly.
        let r = recording(vec![call(135, vec![])]);
        let a = against(&diffs, &[r]);
        assert_eq!(
            a.broken[0].certainty,
            Certainty::ArgsNotRecorded { indexes: vec![0] }
        );
        assert!(a.broken[0]
            .to_string()
            .ends_with("if arg0 (not recorded) is in the changed range"));
        // Another arch's change breaks nothing recorded on x86_64.
        let mut other = diffs.clone();
        other[0].arch = Some(Arch::Aarch64);
        assert!(against(&other, &[recording(vec![call(83, vec![])])])
            .broken
            .is_empty());
    }

    #[test]
    fn an_incomplete_recording_is_named() {
        let mut r = recording(vec![call(
            135,
            vec![RecordedArg {
                index: 0,
                values: vec![1],
                complete: false,
            }],
        )]);
        assert_eq!(against(&[], std::slice::from_ref(&r)).incomplete.len(), 1);
        r.containers[0].arches[0].syscalls[0].args[0].complete = true;
        assert!(against(&[], std::slice::from_ref(&r)).incomplete.is_empty());
        r.containers[0].lost = 3;
        assert_eq!(against(&[], &[r]).incomplete[0].lost, 3);
    }
}
