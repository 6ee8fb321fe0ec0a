//! Builds the eBPF programs in `bpf/` with clang into OUT_DIR; the
//! agent embeds the objects (see `src/bpf.rs`). Without clang (a
//! `cargo check` host) it writes empty stub objects and sets
//! `cfg(nodeproof_bpf_stub)`, so the library still type-checks and the loader
//! reports the missing programs at run time instead of failing the build.
//!
//! Either way it generates the Rust side of the layout the programs share
//! with user space from the C headers ([`LAYOUT_HEADERS`], see `layout.rs`);
//! that needs no clang.

mod layout;

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (object, source, extra clang flags): the classic-tracepoint object is the
/// same source without the programs and maps that need tp_btf, fexit or task storage.
const OBJECTS: &[(&str, &str, &[&str])] = &[
    ("seccomp_trace", "seccomp_trace", &[]),
    (
        "seccomp_trace_classic",
        "seccomp_trace",
        &["-DNP_CLASSIC_ONLY"],
    ),
    ("empty", "empty", &[]),
    ("record", "record", &[]),
];

/// The headers that define what crosses the boundary (ring-buffer records,
/// map keys and values, their constants), each generated into
/// OUT_DIR/<stem>.rs. With clang, `layout.bpf.o` holds every struct of them
/// in its BTF for the crate's layout test.
const LAYOUT_HEADERS: &[&str] = &["np_trace.h", "np_record.h"];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(nodeproof_bpf_stub)");
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let src = manifest.join("bpf");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo::rerun-if-changed={}", src.display());
    println!("cargo::rerun-if-env-changed=NODEPROOF_CLANG");
    println!("cargo::rerun-if-env-changed=NODEPROOF_BPF_STUB");

    let clang = env::var("NODEPROOF_CLANG").unwrap_or_else(|_| "clang".to_string());
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => Some("x86"),
        _ => None,
    };
    let forced_stub = env::var_os("NODEPROOF_BPF_STUB").is_some();
    let have_clang = !forced_stub
        && Command::new(&clang)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);

    let headers: Vec<(&str, layout::Header)> = LAYOUT_HEADERS
        .iter()
        .map(|file| {
            let path = src.join(file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let header = layout::Header::parse(&text).unwrap_or_else(|e| {
                panic!("{}: {e} (the layout generator reads a small C subset: crates/trace/build/layout.rs)", path.display())
            });
            let stem = file.trim_end_matches(".h");
            std::fs::write(out.join(format!("{stem}.rs")), header.to_rust(file))
                .expect("write the generated layout");
            (*file, header)
        })
        .collect();
    let anchors: Vec<(&str, &layout::Header)> = headers.iter().map(|(f, h)| (*f, h)).collect();
    std::fs::write(
        out.join("layout.bpf.c"),
        layout::Header::anchors_c(&anchors),
    )
    .expect("write layout.bpf.c");

    match (have_clang, arch) {
        (true, Some(arch)) => {
            for (name, source, flags) in OBJECTS {
                compile(
                    &clang,
                    arch,
                    &src,
                    &src.join(format!("{source}.bpf.c")),
                    &out,
                    name,
                    flags,
                );
            }
            compile(
                &clang,
                arch,
                &src,
                &out.join("layout.bpf.c"),
                &out,
                "layout",
                &[],
            );
        }
        (have_clang, arch) => {
            println!(
                "cargo::warning=eBPF programs not built (clang found: {have_clang}, supported target arch: {}); `nodeproof trace` will report it",
                arch.is_some()
            );
            println!("cargo::rustc-cfg=nodeproof_bpf_stub");
            for name in OBJECTS.iter().map(|(name, _, _)| *name).chain(["layout"]) {
                std::fs::write(out.join(format!("{name}.bpf.o")), b"").expect("write stub object");
            }
        }
    }
}

/// Compiles `input` with the headers of `src` into OUT_DIR/<name>.bpf.o.
fn compile(
    clang: &str,
    arch: &str,
    src: &Path,
    input: &Path,
    out: &Path,
    name: &str,
    flags: &[&str],
) {
    let output = out.join(format!("{name}.bpf.o"));
    let status = Command::new(clang)
        // -mcpu=v3: BPF atomics (cmpxchg) and 32-bit jumps; kernels >= 5.1 run it.
        .args([
            "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-mcpu=v3",
        ])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .args(flags)
        .arg("-I")
        .arg(src)
        .arg("-c")
        .arg(input)
        .arg("-o")
        .arg(&output)
        .status()
        .unwrap_or_else(|e| panic!("running {clang} for {}: {e}", input.display()));
    // A present clang that fails is a real error in the C code: fail loudly.
    assert!(status.success(), "{clang} failed on {}", input.display());
}
