//! Arbitrary bytes as a seccomp profile: the JSON parser, the Go-decoder
//! mirror, the template evaluation and the whole lint pipeline (translate,
//! compile with the native generator, predict), then both renderings a user
//! sees. Nothing may panic, and nothing may grow without bound (libFuzzer's
//! `-rss_limit_mb`, `-timeout`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeproof_bpfgen::Native;
use nodeproof_seccomp::capability::CapabilitySet;
use nodeproof_seccomp::diagnostic::render_text;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Runtime};
use nodeproof_seccomp::oci_runtime::{CrunVersion, OciRuntime, RuncVersion};

/// The options an input is linted with, chosen by a hash of its bytes: the
/// seeds are plain profiles, so no byte of theirs is spent on options, and
/// one input always takes the same path (reproducible crashes).
fn options(data: &[u8]) -> LintOptions {
    let h = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    LintOptions {
        runtime: if h & 1 == 0 {
            Runtime::Containerd
        } else {
            Runtime::Crio
        },
        no_new_privileges: h & 2 != 0,
        arch: if h & 4 == 0 { Arch::X86_64 } else { Arch::X86 },
        // No stat of a listener socket: the same input gives the same report.
        check_listener: false,
        oci_runtime: match (h >> 3) & 3 {
            0 => OciRuntime::Runc(RuncVersion::V1_1_5),
            1 => OciRuntime::Runc(RuncVersion::V1_1_15),
            2 => OciRuntime::Crun(CrunVersion::V1_8),
            _ => OciRuntime::Crun(CrunVersion::V1_21),
        },
        // The CRI runtime's default, `runc spec`'s, or every capability kept.
        bounding_set: match (h >> 5) & 3 {
            0 | 1 => None,
            2 => Some(CapabilitySet::OCI_SPEC_DEFAULT),
            _ => Some(CapabilitySet::of(&(0..=40).collect::<Vec<u8>>())),
        },
    }
}

fuzz_target!(|data: &[u8]| {
    // Larger inputs only slow the fuzzer down (the scan's own cap is 4 MiB).
    if data.len() > 64 * 1024 {
        return;
    }
    let opts = options(data);
    let report = lint_source("fuzz.json", data, &opts, &Native);
    // What `profile lint -o json` and the text output print.
    serde_json::to_string(&report).expect("a report serializes");
    let mut text = String::new();
    render_text(&report.path, data, &report.diagnostics, &mut text);
});
