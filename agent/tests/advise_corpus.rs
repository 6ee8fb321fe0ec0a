//! `advise` round trip on every profile that lints ok: the patch for a set of
//! denials must keep the outcome `ok` and let every denied syscall run. The
//! project's own profiles always; the shared corpus where it is present.
//! And for every profile `advise` takes: the printed patch, applied to the
//! file as read, gives exactly the printed profile.

use std::path::PathBuf;

use nodeproof::advise::{advise, render, Denied};
use nodeproof_bpfgen::Native;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome};
use nodeproof_testkit::{own_profiles_dir, profiles_in, require, Need};

/// A mix: ordinary calls, ones most profiles deny, and dangerous ones.
const DENIED: [&str; 7] = [
    "mkdir",
    "chmod",
    "mount",
    "ptrace",
    "bpf",
    "unshare",
    "personality",
];

fn denied() -> Vec<Denied> {
    DENIED
        .iter()
        .map(|s| Denied {
            syscall: s.to_string(),
            count: 4,
            action: nodeproof_trace::Action::Errno,
            errno: 1,
        })
        .collect()
}

/// (profile, mode) pairs that lint ok and were checked, and the failures.
fn round_trip(files: &[PathBuf]) -> (Vec<String>, Vec<String>) {
    let denied = denied();
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
            if lint_source(&name, &src, &opts, &Native).outcome != Outcome::Ok {
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

/// The two JSON documents of `render`'s text: the patch and the patched profile.
fn printed_documents(text: &str) -> (String, String) {
    let mut patch = Vec::new();
    let mut patched = Vec::new();
    let mut at = 0;
    for line in text.lines() {
        if line.starts_with("# JSON Patch") {
            at = 1;
        } else if line.starts_with("# patched profile") {
            at = 2;
        } else if line.starts_with('#') || line.starts_with("warning: ") {
            // Pretty-printed JSON never starts a line with either.
            if at == 2 {
                at = 3;
            }
        } else if at == 1 {
            patch.push(line);
        } else if at == 2 {
            patched.push(line);
        }
    }
    (patch.join("\n"), patched.join("\n"))
}

/// Applies `patch_json` (as printed) to the file's bytes and returns the
/// result serialized the way `advise` prints it, or why it did not apply.
fn apply_printed(src: &[u8], patch_json: &str, pretty: bool) -> Result<String, String> {
    let mut doc: serde_json::Value = serde_json::from_slice(src).map_err(|e| e.to_string())?;
    let patch: json_patch::Patch = serde_json::from_str(patch_json).map_err(|e| e.to_string())?;
    json_patch::patch(&mut doc, &patch).map_err(|e| e.to_string())?;
    Ok(if pretty {
        serde_json::to_string_pretty(&doc).unwrap()
    } else {
        serde_json::to_string(&doc).unwrap()
    })
}

/// (profiles checked, add and remove operations seen, profiles advise refused, failures).
fn printed_patch_applies(files: &[PathBuf]) -> (usize, usize, usize, Vec<PathBuf>, Vec<String>) {
    let opts = LintOptions {
        check_listener: false,
        ..LintOptions::default()
    };
    let denied = denied();
    let (mut checked, mut adds, mut removes, mut refused) = (0, 0, 0, Vec::<PathBuf>::new());
    let mut failures = Vec::new();
    for f in files {
        let src = std::fs::read(f).unwrap();
        let name = f.to_string_lossy();
        // Profiles that are not JSON objects with a `syscalls` array are
        // refused by `advise` (and say why); nothing is printed to check.
        let a = match advise(&name, &src, &denied, &opts) {
            Ok(a) => a,
            Err(_) => {
                refused.push(f.clone());
                continue;
            }
        };
        checked += 1;
        for op in a.patch.iter() {
            match op {
                json_patch::PatchOperation::Add(_) => adds += 1,
                json_patch::PatchOperation::Remove(_) => removes += 1,
                other => failures.push(format!("{name}: unexpected operation {other}")),
            }
        }
        // `-o json`: the whole advice as one document.
        let printed: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        let want = serde_json::to_string(&printed["patched"]).unwrap();
        match apply_printed(&src, &printed["patch"].to_string(), false) {
            Ok(got) if got == want => {}
            Ok(got) => failures.push(format!("{name} (json): applied\n{got}\nprinted\n{want}")),
            Err(e) => failures.push(format!("{name} (json): {e}")),
        }
        // Text output: the two pretty-printed documents under their headers.
        let (patch_text, patched_text) = printed_documents(&render(&a));
        match apply_printed(&src, &patch_text, true) {
            Ok(got) if got == patched_text => {}
            Ok(got) => failures.push(format!(
                "{name} (text): applied\n{got}\nprinted\n{patched_text}"
            )),
            Err(e) => failures.push(format!("{name} (text): {e}")),
        }
    }
    (checked, adds, removes, refused, failures)
}

#[test]
fn own_profiles_printed_patch_applies() {
    let files = profiles_in(&own_profiles_dir());
    let (checked, adds, _, refused, failures) = printed_patch_applies(&files);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(checked, files.len(), "advise refused {refused:?}");
    assert!(adds > 0, "no add operation went through the check");
}

#[test]
fn corpus_printed_patch_applies() {
    let Some(granted) = require(&[Need::Corpus]) else {
        return;
    };
    let files = profiles_in(granted.corpus());
    let (checked, adds, removes, refused, failures) = printed_patch_applies(&files);
    eprintln!(
        "FIGURE advise patch check: {checked} profiles ({adds} add, {removes} remove operations), \
         {} refused by advise, {} failures",
        refused.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The check means something only if real patches went through it.
    assert!(checked >= files.len() / 2, "advise refused {refused:?}");
    assert!(
        adds > 0 && removes > 0,
        "{adds} add, {removes} remove operations"
    );
}
