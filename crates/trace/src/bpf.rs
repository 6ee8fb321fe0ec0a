//! The eBPF objects built by `build/main.rs` from `bpf/`, embedded 8-byte
//! aligned (ELF64 headers and BPF instructions need it).

/// The nodeproof programs (all strategies; the loader picks which to attach).
pub static SECCOMP_TRACE: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/seccomp_trace.bpf.o"));

/// The classic-tracepoint programs only (`-DNP_CLASSIC_ONLY`): no task
/// storage, tp_btf or fexit, so kernels before 5.11 create its maps.
pub static SECCOMP_TRACE_CLASSIC: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/seccomp_trace_classic.bpf.o"));

/// An empty tp_btf sys_enter/sys_exit pair: the overhead floor the benchmark compares against.
pub static EMPTY_PAIR: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/empty.bpf.o"));

/// The syscall recorder of `nodeproof record` (`bpf/record.bpf.c`): a
/// sys_enter program on tp_btf and on the classic tracepoint, and its sets.
pub static RECORD: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/record.bpf.o"));

/// Every shared struct of the layout headers, one global each, and no
/// program: its BTF is clang's layout of them (see `abi`'s tests).
#[cfg(test)]
pub(crate) static LAYOUT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/layout.bpf.o"));

/// The program objects, named.
#[cfg(test)]
pub(crate) const PROGRAMS: [(&str, &[u8]); 4] = [
    ("seccomp_trace.bpf.o", SECCOMP_TRACE),
    ("seccomp_trace_classic.bpf.o", SECCOMP_TRACE_CLASSIC),
    ("empty.bpf.o", EMPTY_PAIR),
    ("record.bpf.o", RECORD),
];

/// True when the build had no clang and embedded empty stubs.
pub const fn is_stub() -> bool {
    cfg!(nodeproof_bpf_stub)
}
