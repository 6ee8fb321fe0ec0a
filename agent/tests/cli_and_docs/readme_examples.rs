//! The examples of the README, CONTRIBUTING.md and docs/ are the binary's
//! output: every fenced block after a
//! `<!-- example: exit N: nodeproof ARGS -->` line is what `nodeproof ARGS`,
//! run in the repository root, prints on standard output, and N its exit
//! status. In an expected line, `⋯` stands for any text (what this machine's
//! runtime, kernel and GPUs make of it); a line that is only `⋯` stands for
//! any number of lines. Everything else must match exactly, so an example
//! that drifts from what the binary prints fails here.

use std::path::{Path, PathBuf};
use std::process::Command;

const ANY: &str = "⋯";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One marked example: where, the arguments, the exit status, the block.
#[derive(Debug)]
struct Example {
    file: String,
    line: usize,
    args: Vec<String>,
    exit: i32,
    expected: Vec<String>,
}

/// Splits a command line as a POSIX shell would for the examples' needs:
/// blanks separate words, single quotes keep theirs.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(!quoted, "unclosed quote in {line:?}");
    if started {
        out.push(word);
    }
    out
}

fn examples(file: &str, text: &str) -> Vec<Example> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(rest) = l
            .strip_prefix("<!-- example: exit ")
            .and_then(|r| r.strip_suffix(" -->"))
        else {
            continue;
        };
        let (exit, command) = rest
            .split_once(": ")
            .unwrap_or_else(|| panic!("{file}:{}: `exit N: nodeproof ARGS`", i + 1));
        let mut args = words(command);
        assert_eq!(
            args.first().map(String::as_str),
            Some("nodeproof"),
            "{file}:{}",
            i + 1
        );
        args.remove(0);
        assert!(
            lines.get(i + 1).is_some_and(|f| f.starts_with("```")),
            "{file}:{}: the example's block must follow its marker",
            i + 1
        );
        let end = (i + 2..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .unwrap_or_else(|| panic!("{file}:{}: unclosed block", i + 2));
        found.push(Example {
            file: file.to_string(),
            line: i + 1,
            args,
            exit: exit.parse().expect("exit status"),
            expected: lines[i + 2..end].iter().map(|s| s.to_string()).collect(),
        });
    }
    found
}

/// One line against a pattern whose `⋯` match any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split(ANY).collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The lines against the patterns; a pattern line of `⋯` alone takes any number of lines.
fn lines_match(patterns: &[String], lines: &[&str]) -> bool {
    match patterns.split_first() {
        None => lines.is_empty(),
        Some((p, rest)) if p == ANY => (0..=lines.len()).any(|k| lines_match(rest, &lines[k..])),
        Some((p, rest)) => {
            lines.first().is_some_and(|l| line_matches(p, l)) && lines_match(rest, &lines[1..])
        }
    }
}

#[test]
fn the_patterns_match_what_they_say_and_nothing_else() {
    assert!(line_matches("a ⋯ b", "a x y b"));
    assert!(line_matches("a ⋯", "a "));
    assert!(!line_matches("a ⋯ b", "a x y c"));
    assert!(line_matches("…literal", "…literal"));
    let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&p(&["x", "⋯", "z"]), &["x", "y1", "y2", "z"]));
    assert!(lines_match(&p(&["x", "⋯", "z"]), &["x", "z"]));
    assert!(!lines_match(&p(&["x", "z"]), &["x", "y", "z"]));
    assert_eq!(words("a 'b c' d''"), ["a", "b c", "d"]);
}

/// The documents that may hold examples: the README, CONTRIBUTING.md and docs/*.md.
fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.splice(
        0..0,
        ["README.md".to_string(), "CONTRIBUTING.md".to_string()],
    );
    docs
}

#[test]
fn every_documented_example_is_what_the_binary_prints() {
    let mut found = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(repo().join(&doc)).unwrap();
        found.extend(examples(&doc, &text));
    }
    assert!(found.len() >= 4, "{found:?}");
    assert!(
        found.iter().any(|e| e.file == "README.md"),
        "the README's first screen shows what nodeproof finds"
    );
    let mut wrong = Vec::new();
    for ex in &found {
        let out = Command::new(env!("CARGO_BIN_EXE_nodeproof"))
            .args(&ex.args)
            .current_dir(repo())
            .env("NODEPROOF_LOG", "off")
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        if out.status.code() != Some(ex.exit) || !lines_match(&ex.expected, &lines) {
            wrong.push(format!(
                "{}:{}: nodeproof {}: exit {:?} (the example says {}), printed:\n{stdout}{}",
                ex.file,
                ex.line,
                ex.args.join(" "),
                out.status.code(),
                ex.exit,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// docs/README.md is the one index: it links every document of docs/.
#[test]
fn the_docs_index_links_every_document() {
    let index = std::fs::read_to_string(repo().join("docs/README.md")).unwrap();
    for doc in documents() {
        let Some(name) = doc.strip_prefix("docs/") else {
            continue;
        };
        if name != "README.md" {
            assert!(
                index.contains(&format!("]({name})")),
                "docs/README.md does not link {name}"
            );
        }
    }
}
