//! Syscall names and numbers per architecture, from libseccomp's tables
//! (`seccomp_syscall_resolve_name_arch`), remembered per thread.

use std::cell::RefCell;
use std::collections::HashMap;

use libseccomp::{ScmpArch, ScmpSyscall};

use crate::compiler::SkippedRule;
use crate::filter::{Arch, Rule};

/// libseccomp's name for an architecture.
pub fn scmp_arch(arch: Arch) -> ScmpArch {
    match arch {
        Arch::X86 => ScmpArch::X86,
        Arch::X86_64 => ScmpArch::X8664,
        Arch::X32 => ScmpArch::X32,
        Arch::Arm => ScmpArch::Arm,
        Arch::Aarch64 => ScmpArch::Aarch64,
        Arch::Mips => ScmpArch::Mips,
        Arch::Mips64 => ScmpArch::Mips64,
        Arch::Mips64N32 => ScmpArch::Mips64N32,
        Arch::Mipsel => ScmpArch::Mipsel,
        Arch::Mipsel64 => ScmpArch::Mipsel64,
        Arch::Mipsel64N32 => ScmpArch::Mipsel64N32,
        Arch::Ppc => ScmpArch::Ppc,
        Arch::Ppc64 => ScmpArch::Ppc64,
        Arch::Ppc64Le => ScmpArch::Ppc64Le,
        Arch::Riscv64 => ScmpArch::Riscv64,
        Arch::S390 => ScmpArch::S390,
        Arch::S390X => ScmpArch::S390X,
    }
}

type NumberRow = [i32; Arch::ALL.len()];
const NOT_LOOKED_UP: i32 = i32::MIN;
const UNKNOWN: i32 = i32::MIN + 1;

/// Names index their rows, so a hit is one hash lookup.
#[derive(Default)]
struct NameCache {
    index: HashMap<Box<str>, usize, Fnv>,
    rows: Vec<NumberRow>,
}
type Fnv = std::hash::BuildHasherDefault<crate::fnv::Fnv>;

thread_local! {
    /// libseccomp's name tables never change; lint asks for the same names
    /// over and over (every rule, every prediction, every arch of runc's
    /// ENOSYS stub), so remember the answers, all arches of a name together.
    static RESOLVED: RefCell<NameCache> = RefCell::new(Default::default());
}

/// The syscall number libseccomp's `seccomp_syscall_resolve_name_arch` gives,
/// possibly a negative pseudo number; `None` when the name is unknown.
pub fn resolve_syscall(name: &str, arch: Arch) -> Option<i32> {
    RESOLVED.with(|cache| number_on(row(&mut cache.borrow_mut(), name), name, arch))
}

/// For each of `arches`, the largest syscall number above 0 among `names`
/// (runc's ENOSYS stub asks this of every name: one lookup per name).
pub fn max_syscall_numbers<'a>(
    names: impl IntoIterator<Item = &'a str>,
    arches: &[Arch],
) -> Vec<Option<i32>> {
    let mut max = vec![None; arches.len()];
    RESOLVED.with(|cache| {
        let mut cache = cache.borrow_mut();
        for name in names {
            let row = row(&mut cache, name);
            for (m, &arch) in max.iter_mut().zip(arches) {
                if let Some(nr) = number_on(row, name, arch).filter(|&nr| nr > 0) {
                    *m = Some(m.map_or(nr, |v: i32| v.max(nr)));
                }
            }
        }
    });
    max
}

/// Names remembered per thread before the cache starts over: libseccomp
/// knows about 500, so only profiles full of made-up names reach it, and a
/// long-running agent must not grow with them.
const MAX_CACHED_NAMES: usize = 1 << 16;

fn row<'c>(cache: &'c mut NameCache, name: &str) -> &'c mut NumberRow {
    let i = match cache.index.get(name) {
        Some(&i) => i,
        None => {
            if cache.rows.len() >= MAX_CACHED_NAMES {
                cache.index.clear();
                cache.rows.clear();
            }
            cache.rows.push([NOT_LOOKED_UP; Arch::ALL.len()]);
            cache.index.insert(name.into(), cache.rows.len() - 1);
            cache.rows.len() - 1
        }
    };
    &mut cache.rows[i]
}

fn number_on(row: &mut NumberRow, name: &str, arch: Arch) -> Option<i32> {
    let slot = &mut row[arch as usize];
    if *slot == NOT_LOOKED_UP {
        *slot = ScmpSyscall::from_name_by_arch(name, scmp_arch(arch))
            .ok()
            .map_or(UNKNOWN, i32::from);
    }
    (*slot != UNKNOWN).then_some(*slot)
}

/// The name libseccomp knows for syscall `nr` on `arch`.
pub fn syscall_name(nr: i32, arch: Arch) -> Option<String> {
    ScmpSyscall::from(nr).get_name_by_arch(scmp_arch(arch)).ok()
}

/// The number a rule is added with, or the rule runc skips.
///
/// runc resolves on its own native arch; a name unknown there is skipped.
/// libseccomp then translates rule numbers from the *host* numbering to each
/// filter arch, so this is the host number even when cross-compiling
/// (libseccomp's name table is shared by all arches, so a name known on
/// `native` is known on the host too).
pub fn rule_number(rule: &Rule, native: Arch, host: Arch) -> Result<i32, SkippedRule> {
    let on_native = resolve_syscall(&rule.syscall, native);
    on_native
        .and_then(|nr| {
            if native == host {
                Some(nr)
            } else {
                resolve_syscall(&rule.syscall, host)
            }
        })
        .ok_or_else(|| SkippedRule {
            syscall: rule.syscall.clone(),
            action: rule.action,
            origin: rule.origin.clone(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_cache_starts_over_instead_of_growing() {
        for i in 0..MAX_CACHED_NAMES + 10 {
            assert_eq!(resolve_syscall(&format!("made_up_{i}"), Arch::X86_64), None);
        }
        let cached = RESOLVED.with(|c| c.borrow().rows.len());
        assert!(
            (1..=MAX_CACHED_NAMES).contains(&cached),
            "{cached} names cached"
        );
        assert_eq!(resolve_syscall("read", Arch::X86_64), Some(0));
        assert_eq!(resolve_syscall("read", Arch::X86), Some(3));
    }
}
