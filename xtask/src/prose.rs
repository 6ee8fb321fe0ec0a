//! A rule over the repository's own text: a comment or a document says why,
//! never "issue 28", "the issue's case" or "the article's rule". Issue
//! numbers belong to a tracker, and the articles the project was conceived
//! from to its authors; a reader has neither, and the reason is what they
//! need (CONTRIBUTING.md, "Layout").

/// `(line number, line)` of each place in `text` that points at an issue
/// or an article instead of saying the reason: `issue 5`, `issue #19`,
/// `the issue's`, `the article`, `the articles'`.
pub fn issue_references(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let lower = line.to_lowercase();
            lower.contains("the issue's")
                || lower.contains("the article")
                || lower.contains("article's")
                || lower.contains("articles'")
                || lower.match_indices("issue ").any(|(at, m)| {
                    let rest = lower[at + m.len()..].trim_start_matches('#');
                    rest.starts_with(|c: char| c.is_ascii_digit())
                })
        })
        .map(|(n, line)| (n + 1, line.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_and_possessive_references_are_found_and_other_uses_are_not() {
        let text = "a\n// Issue 28, item 5: x\nsee issue #19\nthe issue's node\n\
                    an issue with the disk\nissues 3 of them\nthe articles' alert\n\
                    fn article(kind: &str)\n";
        let found: Vec<usize> = issue_references(text).into_iter().map(|(n, _)| n).collect();
        assert_eq!(found, [2, 3, 4, 7]);
    }

    /// The repository's own text files (not `target/`, not `.git/`).
    fn text_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = e.path();
            let name = e.file_name();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if name != "target" && name != ".git" {
                    text_files(&path, out);
                }
            } else if path
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| ["rs", "md", "toml", "yaml", "sh"].contains(&x))
            {
                out.push(path);
            }
        }
    }

    #[test]
    fn no_file_of_the_repository_points_at_an_issue() {
        let root = crate::root();
        let mut files = Vec::new();
        text_files(&root, &mut files);
        assert!(
            files.len() > 100,
            "{} files under {}",
            files.len(),
            root.display()
        );
        let mut found = Vec::new();
        for path in files {
            let rel = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .display()
                .to_string();
            // This file states the rule with examples of what it refuses.
            if rel == "xtask/src/prose.rs" {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for (n, line) in issue_references(&text) {
                found.push(format!("{rel}:{n}: {line}"));
            }
        }
        found.sort();
        assert!(
            found.is_empty(),
            "say the reason instead of the issue:\n{}",
            found.join("\n")
        );
    }
}
