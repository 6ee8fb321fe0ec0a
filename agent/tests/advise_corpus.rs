//! `advise` round trip on every profile that lints ok: the patch for a set of
//! denials must keep the outcome `ok` and let every denied syscall run. The
//! project's own profiles always; the shared corpus where it is present.

use std::path::PathBuf;

use nodeproof::profile::advise::{advise, Denied};
use nodeproof::profile::lint::{lint_source, LintOptions, Outcome};
use nodeproof_testkit::{own_profiles_dir, profiles_in, require, Need};

/// (profile, mode) pairs that lint ok and were checked, and the failures.
fn round_trip(files: &[PathBuf]) -> (Vec<String>, Vec<String>) {
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
    let (mut checked, mut failures) = (Vec::new(), Vec::new());
    for nnp in [true, false] {
        let opts = LintOptions {
            no_new_privileges: nnp,
            check_listener: false,
            ..LintOptions::default()
        };
        for f in files {
            let src = std::fs::read(f).unwrap();
            let name = f.to_string_lossy();
            if lint_source(&name, &src, &opts).outcome != Outcome::Ok {
                continue;
            }
            checked.push(format!("{name} nnp={nnp}"));
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
    (checked, failures)
}

/// profiles/ documents that each of its profiles lints ok in both modes:
/// every one is checked, none is passed over.
#[test]
fn own_profiles_round_trip() {
    let files = profiles_in(&own_profiles_dir());
    assert!(
        !files.is_empty(),
        "no profiles under {}",
        own_profiles_dir().display()
    );
    let (checked, failures) = round_trip(&files);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        checked.len(),
        2 * files.len(),
        "a profile of profiles/ does not lint ok: only {checked:?} did"
    );
}

#[test]
fn corpus_round_trip() {
    let Some(granted) = require(&[Need::Corpus]) else {
        return;
    };
    let files = profiles_in(granted.corpus());
    let (checked, failures) = round_trip(&files);
    eprintln!(
        "FIGURE advise round trip: {} (profile, mode) pairs that lint ok, {} failures",
        checked.len(),
        failures.len()
    );
    assert!(!checked.is_empty(), "no corpus profile lints ok");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
