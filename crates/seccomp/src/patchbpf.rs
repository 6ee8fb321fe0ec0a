//! runc's `-ENOSYS` stub (libcontainer/seccomp/patchbpf), prepended to the
//! program libseccomp exports: on each architecture the filter covers, a
//! syscall numbered above the largest one the profile names fails with
//! ENOSYS instead of taking the default action, so programs fall back from
//! syscalls newer than the profile. It changes what the loaded filter does
//! and how long it is, so predictions run on stub + program, like the kernel.

use std::collections::BTreeMap;

use crate::cbpf::{op, SockFilter};
use crate::filter::Arch;
use crate::model::Seccomp;
use crate::syscalls::c_string_name;
use crate::syscalls::{max_syscall_numbers, Libseccomp};

const ENOSYS: u32 = 38;
const RET_ERRNO_ENOSYS: u32 = 0x0005_0000 | ENOSYS;
const X32_BIT: u32 = 1 << 30;
const OFFSET_ARCH: u32 = 4;
const OFFSET_NR: u32 = 0;
const JGT: u16 = op::JGT_K;
const JEQ: u16 = op::JEQ_K;
const JSET: u16 = op::JSET_K;

fn ins(code: u16, k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

fn ja(skip: u32) -> SockFilter {
    ins(op::JA, skip, 0, 0)
}

/// The stub runc 1.1.5 prepends, or nothing when it adds none (permissive
/// default action, or defaultErrnoRet already ENOSYS). With no listed
/// architecture or no syscall named on one it is a 4-instruction no-op.
/// Names are resolved with libseccomp 2.5.4, which runc 1.1.5 links.
pub fn enosys_stub(profile: &Seccomp) -> Vec<SockFilter> {
    enosys_stub_in(profile, Libseccomp::V2_5_4)
}

/// [`enosys_stub`] with names resolved by `lib` (runc resolves them with
/// libseccomp-golang, through the libseccomp it is linked with).
pub fn enosys_stub_in(profile: &Seccomp, lib: Libseccomp) -> Vec<SockFilter> {
    stub(profile, listed_arches(profile), lib)
}

/// The stub runc 1.1.6 and later prepend: as 1.1.5's, with a section for
/// the native architecture whether or not the profile lists it
/// (findLastSyscalls loops over the listed architectures and the native one).
pub fn enosys_stub_with_native(
    profile: &Seccomp,
    native: Arch,
    lib: Libseccomp,
) -> Vec<SockFilter> {
    let mut arches = listed_arches(profile);
    if !arches.contains(&native) {
        arches.push(native);
    }
    stub(profile, arches, lib)
}

fn stub(profile: &Seccomp, arches: Vec<Arch>, lib: Libseccomp) -> Vec<SockFilter> {
    if !patches(profile) {
        return Vec::new();
    }
    // runc 1.1.5's findLastSyscalls loops over `config.Architectures` only:
    // the native architecture libseccomp adds to every filter gets no section
    // unless the profile lists it (runc 1.1.6 added it implicitly), and with
    // no `architectures` the stub covers nothing.
    let mut last: BTreeMap<u32, BTreeMap<Arch, u32>> = BTreeMap::new();
    // findLastSyscalls resolves each name with GetSyscallFromNameByArch: a C string, cut at a NUL.
    let names = profile.syscalls.iter().flat_map(|r| r.names.iter());
    let largest = max_syscall_numbers(lib, names.map(|n| c_string_name(n)), &arches);
    for (arch, largest) in arches.into_iter().zip(largest) {
        // An arch with no syscall keeps its (empty) audit-arch entry: runc
        // deletes only the arch from the inner map, so it still gets a jump.
        let entry = last.entry(arch.audit_arch()).or_default();
        if let Some(nr) = largest {
            entry.insert(arch, nr as u32);
        }
    }
    // generateEnosysStub has no early return: with nothing to cover it still
    // emits the arch load, the fall-through jumps and the ENOSYS return.
    generate(&last)
}

/// generatePatch's early returns: runc patches only a filter whose default
/// action denies, unless that denial already answers ENOSYS.
fn patches(profile: &Seccomp) -> bool {
    profile.default_errno_ret != Some(u64::from(ENOSYS))
        && !matches!(
            profile.default_action.as_str(),
            "SCMP_ACT_ALLOW" | "SCMP_ACT_LOG" | "SCMP_ACT_TRACE"
        )
}

fn listed_arches(profile: &Seccomp) -> Vec<Arch> {
    profile
        .architectures
        .iter()
        .filter_map(|a| Arch::from_scmp_name(a))
        .collect()
}

/// Whether runc would give the native architecture an -ENOSYS section had the
/// profile listed it, but does not because `architectures` leaves it out: on
/// the node, syscalls newer than the profile then take the default action.
pub fn native_left_out(profile: &Seccomp, native: Arch) -> bool {
    if !patches(profile) || listed_arches(profile).contains(&native) {
        return false;
    }
    let names = profile.syscalls.iter().flat_map(|r| r.names.iter());
    max_syscall_numbers(
        Libseccomp::V2_5_4,
        names.map(|n| c_string_name(n)),
        &[native],
    )[0]
    .is_some()
}

fn generate(last: &BTreeMap<u32, BTreeMap<Arch, u32>>) -> Vec<SockFilter> {
    // Built back to front, like runc, because jumps count from the end.
    let mut tail = vec![ja(1), ins(op::RET_K, RET_ERRNO_ENOSYS, 0, 0)];
    let mut jump_table: BTreeMap<u32, u32> = BTreeMap::new();
    let x86_64_audit = Arch::X86_64.audit_arch();
    for (&audit, maxes) in last {
        if maxes.is_empty() {
            // "No syscalls found for this arch -- skip it and move on."
            continue;
        }
        let base_enosys = (tail.len() - 1) as u32;
        let base_filter = base_enosys + 1;
        let mut section = vec![ins(op::LD_W_ABS, OFFSET_NR, 0, 0)];
        if maxes.len() == 1 {
            let (&arch, &nr) = maxes.iter().next().expect("one entry");
            let mut sec_tail = if base_enosys < 255 {
                vec![ins(JGT, nr, (base_enosys + 1) as u8, 0), ja(base_filter)]
            } else {
                // jle nr,1 ; ret ENOSYS ; ja filter
                vec![
                    ins(JGT, nr, 0, 1),
                    ins(op::RET_K, RET_ERRNO_ENOSYS, 0, 0),
                    ja(base_filter),
                ]
            };
            if audit == x86_64_audit {
                let skip = (sec_tail.len() - 1) as u8;
                let prefix = if arch == Arch::X32 {
                    ins(JSET, X32_BIT, 0, skip)
                } else {
                    ins(JSET, X32_BIT, skip, 0)
                };
                sec_tail.insert(0, prefix);
            }
            section.extend(sec_tail);
        } else {
            let x86 = maxes.get(&Arch::X86_64).copied().unwrap_or(0);
            let x32 = maxes.get(&Arch::X32).copied().unwrap_or(0);
            if base_enosys < 254 {
                section.extend([
                    ins(JSET, X32_BIT, 1, 0),
                    ins(JGT, x86, (base_enosys + 2) as u8, 1),
                    ins(JGT, x32, (base_enosys + 1) as u8, 0),
                    ja(base_filter),
                ]);
            } else {
                section.extend([
                    ins(JSET, X32_BIT, 1, 0),
                    ins(JGT, x86, 1, 2),
                    ins(JGT, x32, 0, 1),
                    ins(op::RET_K, RET_ERRNO_ENOSYS, 0, 0),
                    ja(base_filter),
                ]);
            }
        }
        section.extend(tail);
        tail = section;
        jump_table.insert(audit, tail.len() as u32);
    }
    let mut program = vec![ja(tail.len() as u32)];
    program.extend(tail);
    // Every audit arch gets a jump, also one without a section: its table
    // entry is Go's zero value, so it jumps over the whole stub into the filter.
    for &audit in last.keys() {
        let from_end = jump_table.get(&audit).copied().unwrap_or(0);
        let jump = program.len() as u32 - from_end;
        if jump <= 255 {
            program.insert(0, ins(JEQ, audit, jump as u8, 0));
        } else {
            program.splice(0..0, [ins(JEQ, audit, 0, 1), ja(jump)]);
        }
    }
    program.insert(0, ins(op::LD_W_ABS, OFFSET_ARCH, 0, 0));
    program
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cbpf::{run, SeccompData};
    use crate::model::SyscallRule;

    fn profile(default: &str, errno: Option<u64>, arches: &[&str], names: &[&str]) -> Seccomp {
        Seccomp {
            default_action: default.into(),
            default_errno_ret: errno,
            architectures: arches.iter().map(|s| s.to_string()).collect(),
            syscalls: vec![SyscallRule {
                names: names.iter().map(|s| s.to_string()).collect(),
                action: "SCMP_ACT_ALLOW".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// The stub followed by a filter that returns ALLOW for everything.
    fn verdict(stub: &[SockFilter], arch: Arch, nr: u32) -> u32 {
        let mut prog = stub.to_vec();
        prog.push(ins(op::RET_K, 0x7fff_0000, 0, 0));
        run(
            &prog,
            &SeccompData::new(nr as i32, arch.audit_arch(), [0; 6]),
        )
        .unwrap()
    }

    #[test]
    fn syscalls_above_the_largest_named_get_enosys() {
        // read=0, mkdir=83 on x86_64; mkdir=39, read=3 on i386.
        let p = profile(
            "SCMP_ACT_ERRNO",
            None,
            &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
            &["read", "mkdir"],
        );
        let stub = enosys_stub(&p);
        assert_eq!(verdict(&stub, Arch::X86_64, 83), 0x7fff_0000);
        assert_eq!(verdict(&stub, Arch::X86_64, 84), RET_ERRNO_ENOSYS);
        assert_eq!(verdict(&stub, Arch::X86_64, 435), RET_ERRNO_ENOSYS);
        assert_eq!(verdict(&stub, Arch::X86, 39), 0x7fff_0000);
        assert_eq!(verdict(&stub, Arch::X86, 40), RET_ERRNO_ENOSYS);
        assert_eq!(verdict(&stub, Arch::X32, X32_BIT | 83), 0x7fff_0000);
        assert_eq!(verdict(&stub, Arch::X32, X32_BIT | 600), RET_ERRNO_ENOSYS);
        // Unknown arches fall through to the filter.
        assert_eq!(verdict(&stub, Arch::Aarch64, 9999), 0x7fff_0000);
    }

    #[test]
    fn names_are_read_up_to_a_nul() {
        // mkdir=83 on x86_64: "mkdir\0x" is mkdir, "\0mkdir" is no syscall.
        let arches = &["SCMP_ARCH_X86_64"];
        let stub = enosys_stub(&profile(
            "SCMP_ACT_ERRNO",
            None,
            arches,
            &["read", "mkdir\0x"],
        ));
        assert_eq!(verdict(&stub, Arch::X86_64, 83), 0x7fff_0000);
        assert_eq!(verdict(&stub, Arch::X86_64, 84), RET_ERRNO_ENOSYS);
        let stub = enosys_stub(&profile(
            "SCMP_ACT_ERRNO",
            None,
            arches,
            &["write", "\0mkdir"],
        ));
        assert_eq!(verdict(&stub, Arch::X86_64, 1), 0x7fff_0000);
        assert_eq!(verdict(&stub, Arch::X86_64, 2), RET_ERRNO_ENOSYS);
    }

    #[test]
    fn no_stub_when_runc_adds_none() {
        assert!(enosys_stub(&profile("SCMP_ACT_ALLOW", None, &[], &["mkdir"])).is_empty());
        assert!(enosys_stub(&profile("SCMP_ACT_LOG", None, &[], &["mkdir"])).is_empty());
        assert!(enosys_stub(&profile("SCMP_ACT_ERRNO", Some(38), &[], &["mkdir"])).is_empty());
        // Nothing to cover is still a stub: load arch, jump, jump, ret ENOSYS.
        for p in [
            profile("SCMP_ACT_ERRNO", None, &[], &["mkdir"]),
            profile("SCMP_ACT_ERRNO", None, &["SCMP_ARCH_X86_64"], &[]),
            profile("SCMP_ACT_ERRNO", None, &[], &["no_such_syscall"]),
        ] {
            let stub = enosys_stub(&p);
            let no_op = if p.architectures.is_empty() { 4 } else { 5 };
            assert_eq!(stub.len(), no_op, "{p:?}");
            assert_eq!(verdict(&stub, Arch::X86_64, 999), 0x7fff_0000);
        }
        assert!(!enosys_stub(&profile(
            "SCMP_ACT_KILL",
            None,
            &["SCMP_ARCH_X86_64"],
            &["mkdir"]
        ))
        .is_empty());
    }

    #[test]
    fn only_listed_architectures_get_a_section() {
        // No `architectures`: runc's loop has nothing to cover, native included.
        let none = profile("SCMP_ACT_KILL", None, &[], &["read", "mkdir"]);
        assert_eq!(enosys_stub(&none).len(), 4);
        assert_eq!(verdict(&enosys_stub(&none), Arch::X86_64, 334), 0x7fff_0000);
        assert!(native_left_out(&none, Arch::X86_64));
        // Only x86 listed: i386 syscalls above mkdir get ENOSYS, x86_64 ones fall through.
        let x86 = profile(
            "SCMP_ACT_KILL",
            None,
            &["SCMP_ARCH_X86"],
            &["read", "mkdir"],
        );
        let stub = enosys_stub(&x86);
        assert_eq!(verdict(&stub, Arch::X86, 40), RET_ERRNO_ENOSYS);
        assert_eq!(verdict(&stub, Arch::X86_64, 334), 0x7fff_0000);
        assert!(native_left_out(&x86, Arch::X86_64));
        // x32 shares x86_64's audit arch, but its section skips x86_64 syscalls.
        let x32 = profile(
            "SCMP_ACT_KILL",
            None,
            &["SCMP_ARCH_X32"],
            &["read", "mkdir"],
        );
        let stub = enosys_stub(&x32);
        assert_eq!(verdict(&stub, Arch::X32, X32_BIT | 334), RET_ERRNO_ENOSYS);
        assert_eq!(verdict(&stub, Arch::X86_64, 334), 0x7fff_0000);
        assert!(native_left_out(&x32, Arch::X86_64));
        let native = profile("SCMP_ACT_KILL", None, &["SCMP_ARCH_X86_64"], &["mkdir"]);
        assert!(!native_left_out(&native, Arch::X86_64));
        // Nothing to leave out when runc patches nothing anyway.
        let allow = profile("SCMP_ACT_LOG", None, &[], &["mkdir"]);
        assert!(!native_left_out(&allow, Arch::X86_64));
        let enosys = profile("SCMP_ACT_ERRNO", Some(38), &[], &["mkdir"]);
        assert!(!native_left_out(&enosys, Arch::X86_64));
    }
}
