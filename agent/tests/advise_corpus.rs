//! `advise` round trip on every corpus profile that lints ok: the patch for a
//! set of denials must keep the outcome `ok` and let every denied syscall run.
//! And for every profile `advise` takes (corpus and `profiles/`): the printed
//! patch, applied to the file as read, gives exactly the printed profile.

use std::path::{Path, PathBuf};

use nodeproof::advise::{advise, render, Denied};
use nodeproof_bpfgen::Native;
use nodeproof_seccomp::lint::{lint_source, LintOptions, Outcome};

#[path = "support/corpus.rs"]
mod corpus;
use corpus::{corpus_dir, json_files};

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
    let denied = denied();
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

#[test]
fn the_printed_patch_applied_to_the_file_gives_the_printed_profile() {
    let mut files = Vec::new();
    json_files(&corpus_dir(), &mut files);
    let from_corpus = files.len();
    json_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles"),
        &mut files,
    );
    assert!(
        files.len() > from_corpus,
        "no profile under profiles/ ({} from the corpus)",
        from_corpus
    );
    files.sort();
    let opts = LintOptions {
        check_listener: false,
        ..LintOptions::default()
    };
    let denied = denied();
    let (mut checked, mut adds, mut removes, mut refused) = (0, 0, 0, Vec::<PathBuf>::new());
    let mut failures = Vec::new();
    for f in &files {
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
