//! An arbitrary rule set through the native generator (`nodeproof-bpfgen`)
//! and through real libseccomp 2.5.4: the same program instruction for
//! instruction, or the same refusal (as `crates/bpfgen/tests/against_libseccomp/bpfgen_vs_libseccomp.rs`
//! compares them).

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nodeproof_bpfgen::libseccomp::compile as compile_with_libseccomp;
use nodeproof_bpfgen::{generate, GenError};
use nodeproof_seccomp::compiler::CompileError;
use nodeproof_seccomp::filter::{Action, Arch, CmpOp, Cond, FilterSpec, Rule, RuleOrigin};
use nodeproof_seccomp::syscalls::{syscall_name, Libseccomp};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum ActionIn {
    KillThread,
    KillProcess,
    Trap,
    Errno(u16),
    Trace(u16),
    Allow,
    Log,
    Notify,
}

impl From<ActionIn> for Action {
    fn from(a: ActionIn) -> Action {
        match a {
            ActionIn::KillThread => Action::KillThread,
            ActionIn::KillProcess => Action::KillProcess,
            ActionIn::Trap => Action::Trap,
            ActionIn::Errno(e) => Action::Errno(e),
            ActionIn::Trace(e) => Action::Trace(e),
            ActionIn::Allow => Action::Allow,
            ActionIn::Log => Action::Log,
            ActionIn::Notify => Action::Notify,
        }
    }
}

/// A syscall by its x86_64 number (from libseccomp's table), or one of the
/// names that are special somewhere: x86's multiplexed socketcall and ipc
/// families, x86-only calls, and a name no table has.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum SyscallIn {
    Number(u16),
    Special(u8),
}

const SPECIAL: [&str; 12] = [
    "socketcall",
    "ipc",
    "socket",
    "accept",
    "recvmmsg",
    "sendmmsg",
    "semop",
    "shmget",
    "mmap2",
    "_llseek",
    "arch_prctl",
    "no_such_syscall",
];

impl SyscallIn {
    fn name(self) -> String {
        match self {
            SyscallIn::Number(n) => syscall_name(i32::from(n % 460), Arch::X86_64)
                .unwrap_or_else(|| "no_such_syscall".into()),
            SyscallIn::Special(i) => SPECIAL[usize::from(i) % SPECIAL.len()].into(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum OpIn {
    Ne,
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
    MaskedEq,
}

impl From<OpIn> for CmpOp {
    fn from(o: OpIn) -> CmpOp {
        match o {
            OpIn::Ne => CmpOp::Ne,
            OpIn::Lt => CmpOp::Lt,
            OpIn::Le => CmpOp::Le,
            OpIn::Eq => CmpOp::Eq,
            OpIn::Ge => CmpOp::Ge,
            OpIn::Gt => CmpOp::Gt,
            OpIn::MaskedEq => CmpOp::MaskedEq,
        }
    }
}

/// Values near the edges the generator splits on (32-bit halves, all ones)
/// as often as arbitrary ones.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum ValueIn {
    Small(u8),
    HighWord(u8, u8),
    NearMax(u8),
    Low32Max,
    Any(u64),
}

impl From<ValueIn> for u64 {
    fn from(v: ValueIn) -> u64 {
        match v {
            ValueIn::Small(n) => u64::from(n % 8),
            ValueIn::HighWord(hi, lo) => (u64::from(hi % 4) << 32) | u64::from(lo % 4),
            ValueIn::NearMax(n) => u64::MAX - u64::from(n % 4),
            ValueIn::Low32Max => 0xffff_ffff,
            ValueIn::Any(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct CondIn {
    /// 0..=6: 6 is out of range, a refusal both must agree on.
    index: u8,
    op: OpIn,
    value: ValueIn,
    value_two: ValueIn,
}

#[derive(Arbitrary, Debug, Clone)]
struct RuleIn {
    syscall: SyscallIn,
    action: ActionIn,
    conds: Vec<CondIn>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum NativeIn {
    X86_64,
    X86,
    X32,
}

#[derive(Arbitrary, Debug, Clone)]
struct Input {
    default_action: ActionIn,
    native: NativeIn,
    arches: Vec<u8>,
    rules: Vec<RuleIn>,
}

/// At most this many rules and conditions per rule: libseccomp's cost grows
/// fast with both, and larger filters are what the seeded tests cover.
const MAX_RULES: usize = 32;
const MAX_CONDS: usize = 6;

fn spec(input: &Input) -> (FilterSpec, Arch) {
    let rules = input
        .rules
        .iter()
        .take(MAX_RULES)
        .enumerate()
        .map(|(i, r)| Rule {
            syscall: r.syscall.name(),
            action: r.action.into(),
            conds: r
                .conds
                .iter()
                .take(MAX_CONDS)
                .enumerate()
                .map(|(k, c)| {
                    let mut op = CmpOp::from(c.op);
                    // libseccomp's tree merge is exponential in chained
                    // range checks (a run of GT/GE/LT/LE conditions); past
                    // the third condition only equality-like ones, as the
                    // seeded test does, or libFuzzer's -timeout fires in libseccomp.
                    if k >= 3 && !matches!(op, CmpOp::Eq | CmpOp::MaskedEq | CmpOp::Ne) {
                        op = CmpOp::Eq;
                    }
                    Cond {
                        index: c.index % 7,
                        op,
                        value: c.value.into(),
                        value_two: c.value_two.into(),
                    }
                })
                .collect(),
            origin: RuleOrigin {
                pointer: format!("/syscalls/{i}").into(),
                name_index: 0,
            },
        })
        .collect();
    let arches = input
        .arches
        .iter()
        .take(4)
        .map(|&a| Arch::ALL[usize::from(a) % Arch::ALL.len()])
        .collect();
    let native = match input.native {
        NativeIn::X86_64 => Arch::X86_64,
        NativeIn::X86 => Arch::X86,
        NativeIn::X32 => Arch::X32,
    };
    (
        FilterSpec {
            default_action: input.default_action.into(),
            arches,
            rules,
            listener_path: None,
            // The oracle is the libseccomp nodeproof links.
            libseccomp: Libseccomp::V2_5_4,
        },
        native,
    )
}

fuzz_target!(|input: Input| {
    let (spec, native) = spec(&input);
    // NP_FUZZ_TIMES=1: the rule set and each compiler's time, for an input
    // libFuzzer reports as slow.
    let times = std::env::var_os("NP_FUZZ_TIMES").is_some();
    if times {
        eprintln!("{spec:#?} native {native}");
    }
    let started = std::time::Instant::now();
    let ours = generate(&spec, native);
    if times {
        eprintln!(
            "native generator: {:?} in {:?}",
            ours.as_ref().map(|c| c.program.len()),
            started.elapsed()
        );
    }
    match ours {
        // libseccomp would never return on this rule set (the generator
        // detects the cycle libseccomp builds); nothing to compare against.
        Err(GenError::Refused(CompileError::RuleAddLoops { .. } | CompileError::ExportLoops)) => {
            return
        }
        // Compiled by libseccomp itself in the product: nothing to compare.
        Err(GenError::Unsupported { .. }) => return,
        _ => {}
    }
    let started = std::time::Instant::now();
    let theirs = compile_with_libseccomp(&spec, native);
    if times {
        eprintln!(
            "libseccomp: {:?} in {:?}",
            theirs.as_ref().map(|c| c.program.len()),
            started.elapsed()
        );
    }
    match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => {
            if let Some(i) = (0..ours.program.len().max(theirs.program.len()))
                .find(|&i| ours.program.get(i) != theirs.program.get(i))
            {
                panic!(
                    "programs differ at instruction {i} (native {} insns, libseccomp {}): native {:?} libseccomp {:?}\n{spec:#?} native {native}",
                    ours.program.len(),
                    theirs.program.len(),
                    ours.program.get(i),
                    theirs.program.get(i),
                );
            }
            assert_eq!(ours, theirs, "{spec:#?} native {native}");
        }
        (Err(GenError::Refused(ours)), Err(theirs)) => {
            assert_eq!(
                ours, theirs,
                "different refusals\n{spec:#?} native {native}"
            );
        }
        (ours, theirs) => panic!(
            "native {:?} but libseccomp {:?}\n{spec:#?} native {native}",
            ours.map(|c| c.program.len()),
            theirs.map(|c| c.program.len()),
        ),
    }
});
