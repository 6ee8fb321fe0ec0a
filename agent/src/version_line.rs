//! The line `nodeproof --version` prints after the name: the version, the
//! commit and whether its tree had changes. Shared by build.rs (which
//! computes it once per build) and the library's tests.

/// From the package version and `NODEPROOF_REVISION` as `cargo xtask` sets
/// it for the builds it makes (`<commit>` or `<commit>-dirty`; empty when
/// built otherwise, e.g. by `cargo build` or `cargo test`).
pub fn version_line(version: &str, revision: &str) -> String {
    let revision = revision.trim();
    if revision.is_empty() {
        return format!("{version} (commit unknown: built without cargo xtask)");
    }
    match revision.strip_suffix("-dirty") {
        Some(commit) => format!("{version} (commit {commit}, with uncommitted changes)"),
        None => format!("{version} (commit {revision}, clean tree)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_commit_and_a_dirty_tree() {
        assert_eq!(
            version_line("0.1.0", "0123abc"),
            "0.1.0 (commit 0123abc, clean tree)"
        );
        assert_eq!(
            version_line("0.1.0", "0123abc-dirty\n"),
            "0.1.0 (commit 0123abc, with uncommitted changes)"
        );
        assert_eq!(
            version_line("0.1.0", ""),
            "0.1.0 (commit unknown: built without cargo xtask)"
        );
    }
}
