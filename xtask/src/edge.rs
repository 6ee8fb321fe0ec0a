//! A rule over the workspace: kube-rs is called from one crate, the edge to
//! the API server (`nodeproof-apiclient`), so that every request the agent
//! and its tools make, and every kube-rs error they map, is in one place
//! (docs/architecture.md, the crate table). Checked on the manifests
//! (`cargo metadata`) and on the sources under each package's `src/`.

use std::path::{Path, PathBuf};

/// kube-rs's crates: the client, and what builds on it.
const KUBE_RS: &[&str] = &["kube", "kube-client", "kube-runtime", "kube-lease-manager"];

/// The edge crate.
const EDGE: &str = "nodeproof-apiclient";

/// Packages other than the edge that may depend on kube-rs, and why.
const MAY_DEPEND: &[(&str, &str)] = &[
    (
        "nodeproof-testapi",
        "tests only: the test API server may check what it serves with kube-rs",
    ),
    (
        "nodeproof-e2e",
        "tests only: end-to-end tests may drive a cluster with kube-rs",
    ),
];

/// Source paths (relative to the root) outside the edge that may name
/// kube-rs, and why. A path ending in `/` is a directory.
const MAY_USE: &[(&str, &str)] = &[
    ("crates/testapi/src/", "tests only: the test API server"),
    ("tests/src/", "tests only: the end-to-end tests' support"),
    (
        "xtask/src/edge.rs",
        "this rule's own text: the paths it looks for",
    ),
];

/// The lines of `text` (1-based, as written) that name a kube-rs crate
/// as a path (`kube::`, `kube_runtime::`, `kube_client::`,
/// `kube_lease_manager::`), code only: what follows `//` is a comment.
/// kube-core's pure types (`kube_core::`) are not kube-rs's client.
fn kube_rs_uses(text: &str) -> Vec<(usize, String)> {
    const PATHS: &[&str] = &[
        "kube::",
        "kube_runtime::",
        "kube_client::",
        "kube_lease_manager::",
    ];
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or("");
            PATHS.iter().any(|p| {
                code.match_indices(p).any(|(at, _)| {
                    !code[..at]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
            }) || code.trim_start().starts_with("use kube;")
                || code.contains("extern crate kube")
        })
        .map(|(n, line)| (n + 1, line.trim().to_string()))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

fn allowed_use(relative: &str) -> bool {
    MAY_USE.iter().any(|(p, _)| {
        if p.ends_with('/') {
            relative.starts_with(p)
        } else {
            relative == *p
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_edge_crate_depends_on_kube_rs() {
        let metadata = crate::metadata("Cargo.toml").unwrap();
        let mut wrong = Vec::new();
        for p in metadata["packages"].as_array().unwrap() {
            let name = p["name"].as_str().unwrap();
            if name == EDGE || MAY_DEPEND.iter().any(|(n, _)| *n == name) {
                continue;
            }
            for d in p["dependencies"].as_array().unwrap() {
                let dep = d["name"].as_str().unwrap();
                // Dev-dependencies are the tests': they may drive the test API server with kube-rs.
                if KUBE_RS.contains(&dep) && d["kind"].as_str() != Some("dev") {
                    wrong.push(format!("{name} depends on {dep}"));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{wrong:?}: call the API server through {EDGE} (crates/apiclient), \
             or list the crate in xtask/src/edge.rs's MAY_DEPEND with the reason"
        );
        // The edge is what it says: it depends on kube-rs.
        let edge = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == EDGE)
            .expect("the edge crate is a workspace member");
        assert!(edge["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["name"] == "kube"));
    }

    #[test]
    fn only_the_edge_crate_names_kube_rs_in_its_sources() {
        let root = crate::root();
        let metadata = crate::metadata("Cargo.toml").unwrap();
        let mut wrong = Vec::new();
        let mut scanned = 0;
        for p in metadata["packages"].as_array().unwrap() {
            if p["name"] == EDGE {
                continue;
            }
            let manifest = Path::new(p["manifest_path"].as_str().unwrap());
            let dir = manifest.parent().unwrap();
            let mut files = Vec::new();
            // The library and binaries; tests/, benches/ and examples/ are the tests'.
            rust_files(&dir.join("src"), &mut files);
            files.push(dir.join("build.rs"));
            for f in files {
                let Ok(text) = std::fs::read_to_string(&f) else {
                    continue;
                };
                scanned += 1;
                let relative = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
                if allowed_use(&relative) {
                    continue;
                }
                for (n, line) in kube_rs_uses(&text) {
                    wrong.push(format!("{relative}:{n}: {line}"));
                }
            }
        }
        assert!(scanned > 100, "only {scanned} files read");
        assert!(
            wrong.is_empty(),
            "kube-rs named outside {EDGE}:\n{}\nmove the call into crates/apiclient, \
             or list the path in xtask/src/edge.rs's MAY_USE with the reason",
            wrong.join("\n")
        );
    }

    #[test]
    fn a_kube_rs_path_is_told_from_comments_and_other_crates() {
        let text = "use kube::api::{Api, ListParams};\n\
                    // kube::Error is mapped by the edge\n\
                    let e: nodeproof_apiclient::Error = x;\n\
                    use kube_core::ResourceExt;\n\
                    let b = kube::runtime::watcher::DefaultBackoff::default(); // kube::\n\
                    fn f(c: &kube::Client) {}\n\
                    let s = \"kube_client=off\";\n\
                    use kube_runtime::watcher;\n\
                    use kube;\n";
        let found: Vec<usize> = kube_rs_uses(text).into_iter().map(|(n, _)| n).collect();
        assert_eq!(found, [1, 5, 6, 8, 9]);
    }

    #[test]
    fn an_exception_is_a_directory_or_one_file() {
        assert!(allowed_use("crates/testapi/src/lib.rs"));
        assert!(allowed_use("xtask/src/edge.rs"));
        assert!(!allowed_use("xtask/src/edge_more.rs"));
        assert!(!allowed_use("crates/cluster/src/gate/controller.rs"));
        assert!(!allowed_use(
            "crates/cluster/src/device_taints/controller.rs"
        ));
        assert!(!allowed_use("crates/report/src/events.rs"));
        assert!(!allowed_use("crates/cluster/src/check/read.rs"));
        assert!(!allowed_use("agent/src/pods/watch.rs"));
        // Only the test crates and this file are excepted.
        for (path, _) in MAY_USE {
            assert!(
                path.starts_with("crates/testapi/")
                    || path.starts_with("tests/")
                    || *path == "xtask/src/edge.rs",
                "{path}"
            );
        }
        for (name, _) in MAY_DEPEND {
            assert!(
                matches!(*name, "nodeproof-testapi" | "nodeproof-e2e"),
                "{name}"
            );
        }
        // Every exception gives its reason.
        for (what, why) in MAY_DEPEND.iter().chain(MAY_USE) {
            assert!(!why.trim().is_empty(), "{what}");
        }
    }
}
