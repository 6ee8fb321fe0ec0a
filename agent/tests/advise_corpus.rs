//! `advise` round trip on every corpus profile that lints ok: the patch for a
//! set of denials must keep the outcome `ok` and let every denied syscall run.

use nodeproof::advise::{advise, Denied};
use nodeproof_bpfgen::Native;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome};

#[path = "support/corpus.rs"]
mod corpus;
use corpus::{corpus_dir, json_files};

#[test]
fn corpus_round_trip() {
    let dir = corpus_dir();
    let mut files = Vec::new();
    json_files(&dir, &mut files);
    if files.is_empty() {
        eprintln!("SKIPPED corpus_round_trip: no corpus at {}", dir.display());
        return;
    }
    files.sort();
    // A mix: ordinary calls, ones most profiles deny, and dangerous ones.
    let denied: Vec<Denied> = [
        "mkdir",
        "chmod",
        "mount",
        "ptrace",
        "bpf",
        "unshare",
        "personality",
    ]
    .iter()
    .map(|s| Denied {
        syscall: s.to_string(),
        count: 4,
        action: "errno".into(),
        errno: 1,
    })
    .collect();
    let (mut checked, mut failures) = (0, Vec::new());
    for nnp in [true, false] {
        let opts = LintOptions {
            no_new_privileges: nnp,
            check_listener: false,
            ..LintOptions::default()
        };
        for f in &files {
            let src = std::fs::read(f).unwrap();
            let name = f.to_string_lossy();
            if lint_source(&name, &src, &opts, &Native).outcome != Outcome::Ok {
                continue;
            }
            checked += 1;
            match advise(&name, &src, &denied, &opts) {
                Ok(a) if a.outcome == Outcome::Ok && a.still_denied.is_empty() => {}
                Ok(a) => failures.push(format!(
                    "{name} nnp={nnp}: outcome {}, still denied {:?}, patch {:?}",
                    a.outcome.as_str(),
                    a.still_denied,
                    a.patch
                )),
                Err(e) => failures.push(format!("{name} nnp={nnp}: {e}")),
            }
        }
    }
    eprintln!(
        "FIGURE advise round trip: {checked} (profile, mode) pairs that lint ok, {} failures",
        failures.len()
    );
    assert!(checked > 0, "no corpus profile lints ok");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
