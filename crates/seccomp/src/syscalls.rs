//! Syscall names and numbers per architecture, from libseccomp's tables
//! (`seccomp_syscall_resolve_name_arch`), remembered per thread.
//!
//! The library nodeproof links is bookworm's 2.5.4; a runtime linked with
//! another release resolves names with that release's table, so the lookups
//! that feed a prediction take the [`Libseccomp`] the runtime runs with:
//! 2.5.4 is the linked library, and 2.6.0 is 2.5.4 with the rows its table
//! changed ([`LIBSECCOMP_2_6_0_CHANGED`]).

use std::cell::RefCell;
use std::collections::HashMap;

use libseccomp::{ScmpArch, ScmpSyscall};

pub use crate::filter::Libseccomp;
use crate::filter::{Arch, Rule, SkippedRule};

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

impl Libseccomp {
    pub const ALL: [Libseccomp; 2] = [Libseccomp::V2_5_4, Libseccomp::V2_6_0];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The names whose numbers this release's table gives differently from
    /// 2.5.4's, sorted by name.
    fn changed(self) -> &'static [ChangedRow] {
        match self {
            Libseccomp::V2_5_4 => &[],
            Libseccomp::V2_6_0 => &LIBSECCOMP_2_6_0_CHANGED,
        }
    }

    /// Names this release's number-to-name lookup finds before another name
    /// with the same number, where 2.5.4's finds the other: libseccomp
    /// gives `switch_endian` and `sys_debug_setcontext` (PowerPC's) the same
    /// pseudo number, -10191, and 2.6.0's generated table is searched in
    /// another order.
    fn found_first(self) -> &'static [&'static str] {
        match self {
            Libseccomp::V2_5_4 => &[],
            Libseccomp::V2_6_0 => &["sys_debug_setcontext"],
        }
    }

    /// This release's numbers for `name` where they are not 2.5.4's.
    fn changed_row(self, name: &str) -> Option<&'static [i32; Arch::ALL.len()]> {
        let rows = self.changed();
        rows.binary_search_by(|(n, _)| (*n).cmp(name))
            .ok()
            .map(|i| &rows[i].1)
    }
}

/// A name and its number on each of [`Arch::ALL`] (in that order), as
/// `seccomp_syscall_resolve_name_arch` gives it: a negative number is
/// libseccomp's pseudo number for a syscall the arch lacks, which a rule
/// still takes (non-strict), so it orders the filter's tree but never
/// reaches the program.
type ChangedRow = (&'static str, [i32; Arch::ALL.len()]);

/// Where trixie's libseccomp 2.6.0 resolves a name differently from
/// bookworm's 2.5.4 (Debian's, which carries the Linux 6.7-rc3 table
/// update): every name of either release's `src/syscalls.csv` resolved on
/// every arch with both libraries. 2.6.0's table is Linux 6.13's: eleven
/// x86_64 syscalls (statmount .. removexattrat, uretprobe), riscv64's
/// `riscv_hwprobe`, m68k's three (pseudo numbers everywhere modelled), and
/// x32's `map_shadow_stack`, a pseudo number in 2.5.4. Nothing else of
/// 2.6.0 changes the program: its `gen_bpf.c`, `db.c` and `hash.c` differ
/// from 2.5.4's in error paths, transactions and the precomputed program
/// only. `nodeproof-e2e`'s `libseccomp_2_6` test holds this table and the
/// native generator to the real library.
const LIBSECCOMP_2_6_0_CHANGED: [ChangedRow; 16] = [
    (
        "atomic_barrier",
        [
            -10247, -10247, -10247, -10247, -10247, -10247, -10247, -10247, -10247, -10247, -10247,
            -10247, -10247, -10247, -10247, -10247, -10247,
        ],
    ),
    (
        "atomic_cmpxchg_32",
        [
            -10248, -10248, -10248, -10248, -10248, -10248, -10248, -10248, -10248, -10248, -10248,
            -10248, -10248, -10248, -10248, -10248, -10248,
        ],
    ),
    (
        "getpagesize",
        [
            -10249, -10249, -10249, -10249, -10249, -10249, -10249, -10249, -10249, -10249, -10249,
            -10249, -10249, -10249, -10249, -10249, -10249,
        ],
    ),
    (
        "getxattrat",
        [
            464, 464, 1073742288, 464, 464, 4464, 5464, 6464, 4464, 5464, 6464, 464, 464, 464, 464,
            464, 464,
        ],
    ),
    (
        "listmount",
        [
            458, 458, 1073742282, 458, 458, 4458, 5458, 6458, 4458, 5458, 6458, 458, 458, 458, 458,
            458, 458,
        ],
    ),
    (
        "listxattrat",
        [
            465, 465, 1073742289, 465, 465, 4465, 5465, 6465, 4465, 5465, 6465, 465, 465, 465, 465,
            465, 465,
        ],
    ),
    (
        "lsm_get_self_attr",
        [
            459, 459, 1073742283, 459, 459, 4459, 5459, 6459, 4459, 5459, 6459, 459, 459, 459, 459,
            459, 459,
        ],
    ),
    (
        "lsm_list_modules",
        [
            461, 461, 1073742285, 461, 461, 4461, 5461, 6461, 4461, 5461, 6461, 461, 461, 461, 461,
            461, 461,
        ],
    ),
    (
        "lsm_set_self_attr",
        [
            460, 460, 1073742284, 460, 460, 4460, 5460, 6460, 4460, 5460, 6460, 460, 460, 460, 460,
            460, 460,
        ],
    ),
    (
        "map_shadow_stack",
        [
            453, 453, 1073742277, 453, 453, 4453, 5453, 6453, 4453, 5453, 6453, 453, 453, 453, 453,
            453, 453,
        ],
    ),
    (
        "mseal",
        [
            462, 462, 1073742286, 462, 462, 4462, 5462, 6462, 4462, 5462, 6462, 462, 462, 462, 462,
            462, 462,
        ],
    ),
    (
        "removexattrat",
        [
            466, 466, 1073742290, 466, 466, 4466, 5466, 6466, 4466, 5466, 6466, 466, 466, 466, 466,
            466, 466,
        ],
    ),
    (
        "riscv_hwprobe",
        [
            -10250, -10250, -10250, -10250, -10250, -10250, -10250, -10250, -10250, -10250, -10250,
            -10250, -10250, -10250, 258, -10250, -10250,
        ],
    ),
    (
        "setxattrat",
        [
            463, 463, 1073742287, 463, 463, 4463, 5463, 6463, 4463, 5463, 6463, 463, 463, 463, 463,
            463, 463,
        ],
    ),
    (
        "statmount",
        [
            457, 457, 1073742281, 457, 457, 4457, 5457, 6457, 4457, 5457, 6457, 457, 457, 457, 457,
            457, 457,
        ],
    ),
    (
        "uretprobe",
        [
            -10251, 335, 1073742159, -10251, -10251, -10251, -10251, -10251, -10251, -10251,
            -10251, -10251, -10251, -10251, -10251, -10251, -10251,
        ],
    ),
];

/// A syscall Linux added after bookworm's libseccomp 2.5.4 took its name
/// table (Debian's 2.5.4 carries the table of Linux 6.7-rc3), so a runtime
/// linked with it skips a rule naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewerSyscall {
    pub name: &'static str,
    /// The Linux release that added it, as (major, minor).
    pub linux: (u8, u8),
    /// The only architectures that have it; empty: every one.
    pub only_on: &'static [Arch],
    /// The first modelled libseccomp release that knows it; `None`: none does.
    pub known_from: Option<Libseccomp>,
}

impl NewerSyscall {
    /// Whether `lib`'s table knows the name.
    pub fn known_to(&self, lib: Libseccomp) -> bool {
        self.known_from.is_some_and(|first| lib >= first)
    }

    /// `6.10`.
    pub fn linux_release(&self) -> String {
        format!("{}.{}", self.linux.0, self.linux.1)
    }
}

/// Syscalls newer than libseccomp 2.5.4's table, sorted by name. The
/// release each came with is the `x86_64_kver` column of libseccomp's
/// `src/syscalls.csv` (main, generated from Linux 6.16's syscall tables),
/// except `riscv_hwprobe` (riscv64 only; the csv's riscv64 column carries
/// no release: Linux 6.4, `arch/riscv/include/uapi/asm/unistd.h`) and
/// `file_getattr`/`file_setattr` (after that csv: Linux 6.17's
/// `syscall_64.tbl`, 468 and 469). `known_from` is what the 2.6.0 table
/// ([`LIBSECCOMP_2_6_0_CHANGED`], Linux 6.13's) resolves; a test holds both
/// tables to each other and to the linked 2.5.4.
pub const NEWER_THAN_2_5_4: [NewerSyscall; 15] = {
    const fn row(
        name: &'static str,
        linux: (u8, u8),
        only_on: &'static [Arch],
        known_from: Option<Libseccomp>,
    ) -> NewerSyscall {
        NewerSyscall {
            name,
            linux,
            only_on,
            known_from,
        }
    }
    const V26: Option<Libseccomp> = Some(Libseccomp::V2_6_0);
    [
        row("file_getattr", (6, 17), &[], None),
        row("file_setattr", (6, 17), &[], None),
        row("getxattrat", (6, 13), &[], V26),
        row("listmount", (6, 8), &[], V26),
        row("listxattrat", (6, 13), &[], V26),
        row("lsm_get_self_attr", (6, 8), &[], V26),
        row("lsm_list_modules", (6, 8), &[], V26),
        row("lsm_set_self_attr", (6, 8), &[], V26),
        row("mseal", (6, 10), &[], V26),
        row("open_tree_attr", (6, 15), &[], None),
        row("removexattrat", (6, 13), &[], V26),
        row("riscv_hwprobe", (6, 4), &[Arch::Riscv64], V26),
        row("setxattrat", (6, 13), &[], V26),
        row("statmount", (6, 8), &[], V26),
        row("uretprobe", (6, 11), &[Arch::X86_64, Arch::X32], V26),
    ]
};

/// The row of [`NEWER_THAN_2_5_4`] for `name`, if `lib` does not know it.
pub fn newer_than(lib: Libseccomp, name: &str) -> Option<&'static NewerSyscall> {
    NEWER_THAN_2_5_4
        .binary_search_by(|s| s.name.cmp(name))
        .ok()
        .map(|i| &NEWER_THAN_2_5_4[i])
        .filter(|s| !s.known_to(lib))
}

/// Every name `lib`'s table knows on some architecture, sorted: the numbers
/// 0..1100 of each arch (with its ABI's base) and libseccomp's pseudo
/// numbers, asked back for their names. Built once per release.
pub fn known_names(lib: Libseccomp) -> &'static [String] {
    static TABLES: [std::sync::OnceLock<Vec<String>>; Libseccomp::ALL.len()] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    TABLES[lib as usize].get_or_init(|| {
        let mut names = std::collections::BTreeSet::new();
        for arch in Arch::ALL {
            let base = match arch {
                Arch::X32 => 0x4000_0000,
                Arch::Mips | Arch::Mipsel => 4000,
                Arch::Mips64 | Arch::Mipsel64 => 5000,
                Arch::Mips64N32 | Arch::Mipsel64N32 => 6000,
                _ => 0,
            };
            names.extend((0..1100).filter_map(|n| syscall_name_in(lib, base + n, arch)));
        }
        // ARM's private calls (`__ARM_NR_BASE`, 0x0f0000: cacheflush, set_tls, ...).
        names.extend((0x0f_0000..0x0f_0010).filter_map(|n| syscall_name_in(lib, n, Arch::Arm)));
        // Pseudo numbers (`__PNR_*`) start at -10000, shared by every arch.
        names.extend((-10_400..-10_000).filter_map(|n| syscall_name_in(lib, n, Arch::X86_64)));
        names.extend(lib.changed().iter().map(|(n, _)| n.to_string()));
        names.into_iter().collect()
    })
}

/// The known name closest to `name` by edit distance, for a "did you
/// mean": at most 1 edit for names under 5 characters, 2 otherwise.
pub fn closest_name(lib: Libseccomp, name: &str) -> Option<&'static str> {
    let limit = if name.chars().count() < 5 { 1 } else { 2 };
    known_names(lib)
        .iter()
        .map(String::as_str)
        .chain(NEWER_THAN_2_5_4.iter().map(|s| s.name))
        .map(|known| (crate::decode::edit_distance(name, known), known))
        .filter(|&(d, _)| d <= limit)
        .min()
        .map(|(_, known)| known)
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

/// The syscall number libseccomp 2.5.4's `seccomp_syscall_resolve_name_arch`
/// gives, possibly a negative pseudo number; `None` when the name is unknown.
pub fn resolve_syscall(name: &str, arch: Arch) -> Option<i32> {
    resolve_syscall_in(Libseccomp::V2_5_4, name, arch)
}

/// [`resolve_syscall`] with the table of `lib`.
pub fn resolve_syscall_in(lib: Libseccomp, name: &str, arch: Arch) -> Option<i32> {
    if let Some(row) = lib.changed_row(name) {
        return known(row[arch as usize]);
    }
    RESOLVED.with(|cache| number_on(row(&mut cache.borrow_mut(), name), name, arch))
}

/// libseccomp's `__NR_SCMP_ERROR`: a name the arch's table lacks.
const SCMP_ERROR: i32 = -1;

fn known(nr: i32) -> Option<i32> {
    (nr != SCMP_ERROR).then_some(nr)
}

/// For each of `arches`, the largest syscall number above 0 among `names`
/// as `lib` resolves them (runc's ENOSYS stub asks this of every name: one
/// lookup per name).
pub fn max_syscall_numbers<'a>(
    lib: Libseccomp,
    names: impl IntoIterator<Item = &'a str>,
    arches: &[Arch],
) -> Vec<Option<i32>> {
    let mut max = vec![None; arches.len()];
    RESOLVED.with(|cache| {
        let mut cache = cache.borrow_mut();
        for name in names {
            let changed = lib.changed_row(name);
            let row = row(&mut cache, name);
            for (m, &arch) in max.iter_mut().zip(arches) {
                let nr = match changed {
                    Some(changed) => known(changed[arch as usize]),
                    None => number_on(row, name, arch),
                };
                if let Some(nr) = nr.filter(|&nr| nr > 0) {
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

/// The name libseccomp 2.5.4 knows for syscall `nr` on `arch`.
pub fn syscall_name(nr: i32, arch: Arch) -> Option<String> {
    ScmpSyscall::from(nr).get_name_by_arch(scmp_arch(arch)).ok()
}

/// [`syscall_name`] with the table of `lib`: `seccomp_syscall_resolve_num_arch`
/// gives the name whose number on `arch` is `nr`, pseudo numbers included,
/// with or without the ABI's base ([`raw_number`]).
pub fn syscall_name_in(lib: Libseccomp, nr: i32, arch: Arch) -> Option<String> {
    let raw = raw_number(arch, nr);
    let numbered = |row: &[i32; Arch::ALL.len()]| {
        let n = row[arch as usize];
        n != SCMP_ERROR && raw_number(arch, n) == raw
    };
    if let Some(&name) = lib.found_first().iter().find(|&&name| {
        lib.changed_row(name)
            .map_or(resolve_syscall(name, arch), |row| known(row[arch as usize]))
            .is_some_and(|n| raw_number(arch, n) == raw)
    }) {
        return Some(name.to_string());
    }
    if let Some((name, _)) = lib.changed().iter().find(|(_, row)| numbered(row)) {
        return Some((*name).to_string());
    }
    // 2.5.4's name for `nr`, unless `lib` numbers that name differently.
    syscall_name(nr, arch).filter(|name| lib.changed_row(name).is_none())
}

/// The number an ABI's table keys a syscall by: x32's without the x32 bit
/// (`x32_syscall_resolve_num_munge`), the MIPS ABIs' without their base
/// (`mips*_syscall_resolve_num_raw`), pseudo numbers as they are. The
/// number-to-name lookup takes a number with or without it.
fn raw_number(arch: Arch, nr: i32) -> i32 {
    const X32_SYSCALL_BIT: i32 = 0x4000_0000;
    let base = match arch {
        Arch::X32 if nr >= 0 => return nr & !X32_SYSCALL_BIT,
        Arch::Mips | Arch::Mipsel => 4000,
        Arch::Mips64 | Arch::Mipsel64 => 5000,
        Arch::Mips64N32 | Arch::Mipsel64N32 => 6000,
        _ => return nr,
    };
    if nr >= base {
        nr - base
    } else {
        nr
    }
}

/// The number a rule is added with, or the rule runc skips.
///
/// runc resolves on its own native arch; a name unknown there is skipped.
/// libseccomp then translates rule numbers from the *host* numbering to each
/// filter arch, so this is the host number even when cross-compiling
/// (libseccomp's name table is shared by all arches, so a name known on
/// `native` is known on the host too).
pub fn rule_number(
    lib: Libseccomp,
    rule: &Rule,
    native: Arch,
    host: Arch,
) -> Result<i32, SkippedRule> {
    let on_native = resolve_syscall_in(lib, &rule.syscall, native);
    on_native
        .and_then(|nr| {
            if native == host {
                Some(nr)
            } else {
                resolve_syscall_in(lib, &rule.syscall, host)
            }
        })
        .ok_or_else(|| SkippedRule {
            syscall: rule.syscall.clone(),
            action: rule.action,
            origin: rule.origin.clone(),
        })
}

/// The syscall name libseccomp sees. runc resolves names with libseccomp-golang's
/// `GetSyscallFromName` (and patchbpf with `GetSyscallFromNameByArch`), both of
/// which pass `C.CString(name)` to `seccomp_syscall_resolve_name*`: C reads up to
/// the first NUL, so `"execve\u0000x"` is `execve` and `"\u0000execve"` is ``.
pub fn c_string_name(name: &str) -> &str {
    name.split('\0').next().unwrap_or(name)
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

    #[test]
    fn libseccomp_2_6_resolves_what_2_5_4_does_not() {
        let v26 = Libseccomp::V2_6_0;
        assert_eq!(resolve_syscall("mseal", Arch::X86_64), None);
        assert_eq!(resolve_syscall_in(v26, "mseal", Arch::X86_64), Some(462));
        assert_eq!(
            resolve_syscall_in(v26, "mseal", Arch::X32),
            Some(0x4000_0000 + 462)
        );
        assert_eq!(
            resolve_syscall_in(v26, "uretprobe", Arch::X86),
            Some(-10251)
        );
        assert_eq!(resolve_syscall_in(v26, "read", Arch::X86_64), Some(0));
        assert_eq!(resolve_syscall_in(v26, "no_such", Arch::X86_64), None);
        // map_shadow_stack: a pseudo number on x32 in 2.5.4, a real one in 2.6.0.
        assert_eq!(resolve_syscall("map_shadow_stack", Arch::X32), Some(-10245));
        assert_eq!(
            syscall_name(-10245, Arch::X32).as_deref(),
            Some("map_shadow_stack")
        );
        assert_eq!(syscall_name_in(v26, -10245, Arch::X32), None);
        assert_eq!(
            syscall_name_in(v26, 0x4000_0000 + 453, Arch::X32).as_deref(),
            Some("map_shadow_stack")
        );
        assert_eq!(
            syscall_name_in(v26, 462, Arch::X86_64).as_deref(),
            Some("mseal")
        );
        assert_eq!(
            syscall_name_in(v26, 0, Arch::X86_64).as_deref(),
            Some("read")
        );
        assert_eq!(
            max_syscall_numbers(v26, ["read", "mseal"], &[Arch::X86_64, Arch::X86]),
            [Some(462), Some(462)]
        );
        // 2.5.4 does not know mseal, and read's 0 is not above 0.
        assert_eq!(
            max_syscall_numbers(Libseccomp::V2_5_4, ["read", "mseal"], &[Arch::X86_64]),
            [None]
        );
    }

    #[test]
    fn the_2_6_table_is_sorted_and_differs_from_2_5_4_on_every_row() {
        let rows = Libseccomp::V2_6_0.changed();
        assert!(rows.windows(2).all(|w| w[0].0 < w[1].0), "sorted by name");
        for (name, row) in rows {
            let differs = Arch::ALL
                .iter()
                .any(|&a| resolve_syscall(name, a) != known(row[a as usize]));
            assert!(differs, "{name} is 2.5.4's already");
        }
    }

    #[test]
    fn the_newer_syscalls_are_the_ones_2_5_4_lacks_and_2_6_0_has() {
        let rows = &NEWER_THAN_2_5_4;
        assert!(
            rows.windows(2).all(|w| w[0].name < w[1].name),
            "sorted by name"
        );
        for s in rows {
            let arches: &[Arch] = if s.only_on.is_empty() {
                &Arch::ALL
            } else {
                s.only_on
            };
            for &a in Arch::ALL.iter() {
                assert_eq!(
                    resolve_syscall(s.name, a),
                    None,
                    "2.5.4 knows {} on {a}",
                    s.name
                );
            }
            let in_2_6 = arches
                .iter()
                .all(|&a| resolve_syscall_in(Libseccomp::V2_6_0, s.name, a).is_some_and(|n| n > 0));
            assert_eq!(in_2_6, s.known_to(Libseccomp::V2_6_0), "{}", s.name);
            assert!(s.linux >= (6, 4), "{} is older than 2.5.4's table", s.name);
        }
        // Every real syscall 2.6.0 added over 2.5.4 is in the table.
        for (name, row) in Libseccomp::V2_6_0.changed() {
            let real_new = Arch::ALL
                .iter()
                .any(|&a| row[a as usize] > 0 && resolve_syscall(name, a).is_none());
            assert_eq!(
                real_new,
                newer_than(Libseccomp::V2_5_4, name).is_some(),
                "{name}"
            );
        }
        assert_eq!(
            newer_than(Libseccomp::V2_5_4, "mseal").map(|s| s.linux),
            Some((6, 10))
        );
        assert_eq!(newer_than(Libseccomp::V2_6_0, "mseal"), None);
        assert!(newer_than(Libseccomp::V2_6_0, "open_tree_attr").is_some());
        assert_eq!(newer_than(Libseccomp::V2_5_4, "read"), None);
    }

    #[test]
    fn misspelled_names_get_the_closest_known_one() {
        let v254 = Libseccomp::V2_5_4;
        let names = known_names(v254);
        for real in [
            "read",
            "openat",
            "cacheflush",
            "map_shadow_stack",
            "_llseek",
        ] {
            assert!(names.iter().any(|n| n == real), "{real} missing");
        }
        assert!(!names.iter().any(|n| n == "mseal"));
        assert!(names.len() > 400, "{} names", names.len());
        assert_eq!(closest_name(v254, "opennat"), Some("openat"));
        assert_eq!(closest_name(v254, "mkdri"), Some("mkdir"));
        assert_eq!(closest_name(v254, "msael"), Some("mseal"));
        assert_eq!(closest_name(v254, "no_such_call"), None);
        assert_eq!(closest_name(v254, "xyz"), None);
    }
}
