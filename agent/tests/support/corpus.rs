//! The shared seccomp corpus: where it is, and its profiles.

use std::path::{Path, PathBuf};

/// `NODEPROOF_CORPUS`, else `<workspace>/../shared/seccomp-corpus`.
pub fn corpus_dir() -> PathBuf {
    std::env::var_os("NODEPROOF_CORPUS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/seccomp-corpus"),
        PathBuf::from,
    )
}

/// Every profile under `dir` (runc's recorded results left out).
pub fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            json_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "json")
            && p.file_name().is_some_and(|n| n != "runc-results.json")
        {
            out.push(p);
        }
    }
}
