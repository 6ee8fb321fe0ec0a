//! What the binary generates from its clap definitions, read by the tools
//! that will read it on a node: the completion scripts by their shells
//! (parsed, and bash's asked to complete), the man pages by groff and man.

use std::path::Path;
use std::process::{Command, Output};

use nodeproof_testkit::{require, Need};

fn nodeproof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(args)
        .env("NODEPROOF_LOG", "off")
        .output()
        .expect("run nodeproof")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The `gen-files` tree in a fresh directory.
fn gen_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    stdout(&nodeproof(&[
        "gen-files",
        "--out",
        dir.path().to_str().unwrap(),
    ]));
    dir
}

/// The visible subcommands `nodeproof --help` lists (clap's "Commands:"
/// block), read from the binary's own help rather than from its source.
fn subcommands(args: &[&str]) -> Vec<String> {
    let mut help_args = args.to_vec();
    help_args.push("--help");
    let help = stdout(&nodeproof(&help_args));
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// A shell's own syntax check (`-n`: read, not run) on its script.
fn parses_in(shell: &'static str, file: &str) {
    let Some(_) = require(&[Need::Tool(shell)]) else {
        return;
    };
    let dir = gen_files();
    let script = dir.path().join("completions").join(file);
    let out = Command::new(shell).arg("-n").arg(&script).output().unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{shell} -n {}: {:?}\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_bash_completion_parses() {
    parses_in("bash", "nodeproof");
}

#[test]
fn the_zsh_completion_parses() {
    parses_in("zsh", "_nodeproof");
}

#[test]
fn the_fish_completion_parses() {
    parses_in("fish", "nodeproof.fish");
}

#[test]
fn bash_completes_subcommands_and_flag_values() {
    let Some(_) = require(&[Need::Tool("bash")]) else {
        return;
    };
    let dir = gen_files();
    let script = dir.path().join("completions/nodeproof");
    // What bash-completion does on <TAB>: COMP_WORDS/COMP_CWORD set, the
    // function `complete -F` registered called, COMPREPLY read back.
    let complete = |words: &str| -> Vec<String> {
        let cmd = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}; \
             f=$(complete -p nodeproof | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p'); \
             \"$f\" nodeproof \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let out = Command::new("bash").args(["-c", &cmd]).output().unwrap();
        stdout(&out).lines().map(str::to_owned).collect()
    };
    let top = complete("nodeproof ''");
    for sub in subcommands(&[]) {
        assert!(top.contains(&sub), "no {sub} in {top:?}");
    }
    assert_eq!(complete("nodeproof pro"), ["profile"]);
    let outputs = complete("nodeproof check -o ''");
    assert!(
        outputs.contains(&"text".to_owned()) && outputs.contains(&"json".to_owned()),
        "{outputs:?}"
    );
}

#[test]
fn completions_need_no_readable_config() {
    // A broken /etc/nodeproof/config.toml must not break <TAB>.
    let out = nodeproof(&[
        "--config",
        "/nonexistent/config.toml",
        "completions",
        "bash",
    ]);
    assert!(stdout(&out).contains("complete -F"));
    assert_eq!(
        nodeproof(&["completions", "tcsh"]).status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// groff with every warning on (`-ww`), output discarded (`-z`): a page
/// that renders with an empty stderr.
fn renders_cleanly(page: &Path) {
    let out = Command::new("groff")
        .args(["-ww", "-z", "-man"])
        .arg(page)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "groff on {}: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_man_page_renders_and_every_reference_exists() {
    let Some(_) = require(&[Need::Tool("groff")]) else {
        return;
    };
    let dir = gen_files();
    let man = dir.path().join("man");
    let pages: Vec<String> = std::fs::read_dir(&man)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // One page per visible subcommand, at every depth.
    let mut expected = vec!["nodeproof.8".to_owned()];
    for sub in subcommands(&[]) {
        expected.push(format!("nodeproof-{sub}.8"));
        for subsub in subcommands(&[&sub]) {
            expected.push(format!("nodeproof-{sub}-{subsub}.8"));
        }
    }
    for page in &expected {
        assert!(pages.contains(page), "no {page} in {pages:?}");
    }
    assert!(
        !pages.iter().any(|p| p.contains("gen-files")),
        "the hidden packaging step has a page: {pages:?}"
    );
    for page in &pages {
        let path = man.join(page);
        renders_cleanly(&path);
        // Every `nodeproof-x(8)` a page refers to is a page of the set.
        let roff = std::fs::read_to_string(&path).unwrap().replace("\\-", "-");
        for word in roff.split_whitespace() {
            if let Some(name) = word.strip_suffix("(8)") {
                assert!(
                    pages.contains(&format!("{name}.8")),
                    "{page} refers to {word}, which is not generated"
                );
            }
        }
    }
}

#[test]
fn man_shows_nodeproof_8_naming_every_subcommand() {
    let Some(_) = require(&[Need::Tool("man")]) else {
        return;
    };
    let dir = gen_files();
    let out = Command::new("man")
        .arg("-l")
        .arg(dir.path().join("man/nodeproof.8"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    // man hyphenates and formats: compare with the formatting undone.
    let text = stdout(&out).replace('\u{2010}', "-");
    assert!(text.contains("NAME") && text.contains("SYNOPSIS"), "{text}");
    for sub in subcommands(&[]) {
        assert!(
            text.contains(&format!("nodeproof-{sub}(8)")),
            "nodeproof(8) does not name {sub}:\n{text}"
        );
    }
}

/// `--version` names the version and the commit; a test build is not one of
/// cargo xtask's, so its commit is unknown and says why (agent/build.rs).
#[test]
fn version_names_the_version_and_the_commit() {
    let out = nodeproof(&["--version"]);
    assert!(out.status.success());
    let line = stdout(&out);
    let want = format!("nodeproof {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&want), "{line}");
    let revision = option_env!("NODEPROOF_REVISION").unwrap_or("");
    if revision.is_empty() {
        assert!(
            line.contains("commit unknown: built without cargo xtask"),
            "{line}"
        );
    } else {
        assert!(line.contains(revision.trim_end_matches("-dirty")), "{line}");
    }
}
