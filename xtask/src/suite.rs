//! The test suite's runner: every test binary of the workspace built once
//! (`cargo test --no-run`), then run as a pool of processes, longest first.
//!
//! Why not `cargo test --workspace`: it runs the ~45 binaries one after
//! another, so the wall time is their sum, while most of them spend it
//! waiting (a guest kernel booting, a daemon's interval, a runc container,
//! the soak's faults), and it stops at the first binary that fails.
//! The pool runs one at a time unless `NODEPROOF_TEST_JOBS` says more
//! (see `test_suite` in main.rs for what several at once measured and broke).
//! cargo-nextest does the same, but it is one more tool to fetch and build
//! on every fresh clone (minutes of compiling, for about 150 lines here).
//!
//! Each binary runs in its package's directory with the environment cargo
//! gives a test at run time (`CARGO`, `CARGO_MANIFEST_DIR`,
//! `CARGO_PKG_NAME`, `CARGO_CRATE_NAME`); its output goes to
//! `target/test-logs/<package>.<target>.log` and is printed whole when it
//! fails. Each binary's wall time is kept in `target/test-times.tsv`, and
//! the next run starts the longest first.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// One test executable cargo built.
#[derive(Debug, Clone)]
pub struct Binary {
    pub package: String,
    /// The target's name (`gate_controller`, or the crate's for `--lib`).
    pub target: String,
    /// `lib`, `bin`, `test`, `example`, `bench`.
    pub kind: String,
    pub exe: PathBuf,
    pub manifest_dir: PathBuf,
}

impl Binary {
    /// `package::target`, unique in the workspace.
    pub fn key(&self) -> String {
        match self.kind.as_str() {
            "test" => format!("{}::{}", self.package, self.target),
            kind => format!("{}::{}({kind})", self.package, self.target),
        }
    }
}

/// The test executables of one `cargo test --no-run --message-format=json`
/// output: its `compiler-artifact` messages with an `executable` and the
/// `test` profile.
pub fn parse_artifacts(json_lines: &str) -> Vec<Binary> {
    let mut out: Vec<Binary> = Vec::new();
    for line in json_lines.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let manifest = PathBuf::from(msg["manifest_path"].as_str().unwrap_or_default());
        let package =
            package_name(msg["package_id"].as_str().unwrap_or_default()).unwrap_or_else(|| {
                manifest
                    .parent()
                    .and_then(Path::file_name)
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let kind = msg["target"]["kind"][0]
            .as_str()
            .unwrap_or("test")
            .to_string();
        let b = Binary {
            package,
            target: msg["target"]["name"].as_str().unwrap_or_default().into(),
            kind,
            exe: exe.into(),
            manifest_dir: manifest.parent().map(Path::to_path_buf).unwrap_or_default(),
        };
        // A target listed twice (fresh, then rebuilt) is one binary.
        if !out.iter().any(|o| o.key() == b.key()) {
            out.push(b);
        }
    }
    out
}

/// The package's name from a cargo package id: `path+file:///w/agent#nodeproof@0.1.0`
/// (cargo ≥ 1.77), `path+file:///w/crates/seccomp#0.1.0` (the name is the
/// directory's), or the older `nodeproof 0.1.0 (path+file:///w/agent)`.
fn package_name(id: &str) -> Option<String> {
    if let Some((url, frag)) = id.rsplit_once('#') {
        return Some(match frag.split_once('@') {
            Some((name, _)) => name.to_string(),
            None => url.rsplit('/').next()?.to_string(),
        });
    }
    id.split_whitespace().next().map(String::from)
}

/// Wall times of earlier runs, by [`Binary::key`].
pub fn read_times(path: &Path) -> BTreeMap<String, f64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('\t')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn write_times(path: &Path, times: &BTreeMap<String, f64>) -> std::io::Result<()> {
    let text: String = times
        .iter()
        .map(|(k, v)| format!("{k}\t{v:.1}\n"))
        .collect();
    std::fs::write(path, text)
}

/// The order to start binaries in: longest known first; a binary never
/// timed goes by `first_guess` (in that order) and then in cargo's order,
/// ahead of the short ones already timed, so an unknown long one is not
/// the pool's tail.
pub fn order(
    binaries: &[Binary],
    times: &BTreeMap<String, f64>,
    first_guess: &[&str],
) -> Vec<Binary> {
    let guess = |b: &Binary| first_guess.iter().position(|g| b.key() == *g);
    let mut v: Vec<(u8, f64, usize, Binary)> = binaries
        .iter()
        .enumerate()
        .map(|(i, b)| match (times.get(&b.key()), guess(b)) {
            (Some(t), _) => (1, -t, i, b.clone()),
            (None, Some(g)) => (0, g as f64, i, b.clone()),
            (None, None) => (1, -60.0, i, b.clone()),
        })
        .collect();
    // Timed or not, what is expected to take longest starts first.
    v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    v.into_iter().map(|(_, _, _, b)| b).collect()
}

/// What one binary did.
#[derive(Debug)]
pub struct Outcome {
    pub binary: Binary,
    pub ok: bool,
    pub status: String,
    pub wall: Duration,
    pub log: PathBuf,
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
}

struct Running {
    binary: Binary,
    child: Child,
    started: Instant,
    log: PathBuf,
}

/// The test binary `b` with libtest's `args`, run as cargo runs it: in its
/// package's directory, with the variables cargo sets for a test.
fn command(b: &Binary, args: &[String], cargo: &str) -> Command {
    let mut c = Command::new(&b.exe);
    c.args(args)
        .current_dir(&b.manifest_dir)
        .env("CARGO", cargo)
        .env("CARGO_MANIFEST_DIR", &b.manifest_dir)
        .env("CARGO_PKG_NAME", &b.package)
        .env("CARGO_CRATE_NAME", b.target.replace('-', "_"))
        .stdin(Stdio::null());
    c
}

/// Runs `binaries` (in the given order) at most `jobs` at a time, each
/// with `args` (libtest's), printing a line as each ends and its whole log
/// when it fails. Times are recorded in `times_file`.
pub fn run_pool(
    binaries: Vec<Binary>,
    jobs: usize,
    args: &[String],
    logs: &Path,
    times_file: &Path,
) -> Result<Vec<Outcome>> {
    std::fs::create_dir_all(logs).with_context(|| format!("creating {}", logs.display()))?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut queue: std::collections::VecDeque<Binary> = binaries.into();
    let mut running: Vec<Running> = Vec::new();
    let mut done: Vec<Outcome> = Vec::new();
    let total = queue.len();
    while !queue.is_empty() || !running.is_empty() {
        while running.len() < jobs.max(1) {
            let Some(b) = queue.pop_front() else { break };
            let log = logs.join(format!("{}.{}.{}.log", b.package, b.target, b.kind));
            let file = std::fs::File::create(&log)
                .with_context(|| format!("creating {}", log.display()))?;
            let child = command(&b, args, &cargo)
                .stdout(file.try_clone()?)
                .stderr(file)
                .spawn()
                .with_context(|| format!("starting {}", b.exe.display()))?;
            running.push(Running {
                binary: b,
                child,
                started: Instant::now(),
                log,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut i = 0;
        while i < running.len() {
            let Some(status) = running[i].child.try_wait()? else {
                i += 1;
                continue;
            };
            let r = running.swap_remove(i);
            let text = std::fs::read_to_string(&r.log).unwrap_or_default();
            let mut totals = Totals::default();
            for line in text.lines() {
                totals.add(line);
            }
            let o = Outcome {
                ok: status.success(),
                status: status.to_string(),
                wall: r.started.elapsed(),
                log: r.log,
                passed: totals.passed,
                failed: totals.failed,
                ignored: totals.ignored,
                binary: r.binary,
            };
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "[{:>2}/{total}] {} {} ({} passed, {} failed; {:.1} s)",
                done.len() + 1,
                if o.ok { "ok    " } else { "FAILED" },
                o.binary.key(),
                o.passed,
                o.failed,
                o.wall.as_secs_f64()
            )?;
            if !o.ok {
                writeln!(
                    out,
                    "---- {} ({}): {}",
                    o.binary.key(),
                    o.status,
                    o.log.display()
                )?;
                out.write_all(text.as_bytes())?;
                writeln!(out, "---- end of {}", o.binary.key())?;
            }
            done.push(o);
        }
    }
    let mut times = read_times(times_file);
    for o in &done {
        times.insert(o.binary.key(), o.wall.as_secs_f64());
    }
    write_times(times_file, &times).with_context(|| format!("writing {}", times_file.display()))?;
    Ok(done)
}

/// `cargo test ARGS --no-run --message-format=json-render-diagnostics`:
/// builds every test binary (diagnostics on stderr as usual) and returns
/// them.
pub fn build(cargo_args: &[&str], root: &Path) -> Result<Vec<Binary>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut args: Vec<&str> = cargo_args.to_vec();
    args.extend(["--no-run", "--message-format=json-render-diagnostics"]);
    eprintln!("+ cargo {}", args.join(" "));
    let mut child = Command::new(cargo)
        .args(&args)
        .current_dir(root)
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo")?;
    let mut json = String::new();
    for line in BufReader::new(child.stdout.take().context("cargo's stdout")?).lines() {
        json.push_str(&line.context("reading cargo's output")?);
        json.push('\n');
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(parse_artifacts(&json))
}

/// What the suite left running: live processes in a cgroup of the tests'
/// own (`nodeproof-*`: the runtime oracles' containers, the CRI sandbox
/// parent, the tracer tests' cgroups), as `pid comm cgroup`; and those
/// cgroups still there. Zombies are not counted: this machine's PID 1 does
/// not reap what is handed to it, so they outlive any test.
pub fn leftovers() -> (Vec<String>, Vec<String>) {
    let mut processes = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dir = e.path();
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default();
        let Some(ours) = cgroup
            .lines()
            .filter_map(|l| l.splitn(3, ':').nth(2))
            .find(|p| p.split('/').any(|seg| seg.starts_with("nodeproof-")))
        else {
            continue;
        };
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // `pid (comm) S ...`: the state follows the last ')'.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next());
        if state == Some("Z") {
            continue;
        }
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        processes.push(format!("{pid} {} {ours}", comm.trim()));
    }
    let mut cgroups = Vec::new();
    for h in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let top = h.path();
        let dirs = if top.join("cgroup.procs").exists() {
            vec![top]
        } else {
            Vec::new()
        };
        for d in dirs {
            for c in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let name = c.file_name().to_string_lossy().into_owned();
                if name.starts_with("nodeproof-") && c.path().is_dir() {
                    cgroups.push(c.path().display().to_string());
                }
            }
        }
    }
    // A unified-only host: the tree itself is the one hierarchy.
    if std::path::Path::new("/sys/fs/cgroup/cgroup.procs").exists() {
        for c in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = c.file_name().to_string_lossy().into_owned();
            if name.starts_with("nodeproof-") && c.path().is_dir() {
                cgroups.push(c.path().display().to_string());
            }
        }
    }
    processes.sort();
    cgroups.sort();
    cgroups.dedup();
    (processes, cgroups)
}

/// Mount points in `mountinfo` (a /proc/PID/mountinfo text) that the tests
/// made: under `target` (the CRI oracle's state, the nspawn root, the
/// kernels' guests) or with a `nodeproof-` path segment (the tests' own
/// directories elsewhere).
pub fn leftover_mounts(mountinfo: &str, target: &Path) -> Vec<String> {
    let target = target.to_string_lossy();
    let mut out: Vec<String> = nodeproof_testkit::mount_points(mountinfo)
        .into_iter()
        .filter(|p| {
            p == target.as_ref()
                || p.starts_with(&format!("{target}/"))
                || p.split('/').any(|seg| seg.starts_with("nodeproof-"))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Removes each cgroup in `cgroups` with what is under it, deepest first;
/// rmdir(2) on a cgroup succeeds only when no process is in it, so nothing
/// running is touched. Returns those still there. The CRI oracle lives in a
/// static that no destructor ends, so its binary's last pod parent
/// (`nodeproof-cri` in every v1 hierarchy) was left to the next run.
pub fn remove_empty_cgroups(cgroups: &[String]) -> Vec<String> {
    fn remove(dir: &std::path::Path) {
        for c in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if c.file_type().is_ok_and(|t| t.is_dir()) {
                remove(&c.path());
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    cgroups
        .iter()
        .filter(|c| {
            let dir = std::path::Path::new(c.as_str());
            remove(dir);
            dir.exists()
        })
        .cloned()
        .collect()
}

/// The sums of libtest's `test result:` lines.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
}

impl Totals {
    /// Adds `line` when it is a `test result: ok. 3 passed; 0 failed; ...` line.
    pub fn add(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        let count = |what: &str| {
            rest.split(';').find_map(|field| {
                let n = field.trim().strip_suffix(what)?;
                n.trim().rsplit(' ').next()?.parse::<usize>().ok()
            })
        };
        self.passed += count(" passed").unwrap_or(0);
        self.failed += count(" failed").unwrap_or(0);
        self.ignored += count(" ignored").unwrap_or(0);
    }

    /// `N passed, F failed, M skipped`: libtest counts a test that returned
    /// early as passed, so the skipped ones come off `passed`.
    pub fn summary(&self, skipped: usize) -> String {
        let mut s = format!(
            "{} passed, {} failed, {skipped} skipped",
            self.passed.saturating_sub(skipped),
            self.failed
        );
        if self.ignored > 0 {
            s += &format!(", {} ignored", self.ignored);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_of_the_tests_are_those_under_target_or_named_for_them() {
        let info = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:51 / /w/target/nodeproof-cri/c1/rootfs rw shared:40 - overlay overlay rw
91 22 0:52 / /tmp/nodeproof-oracle\\040x/shm rw shared:41 - tmpfs shm rw
92 22 0:53 / /w/targets rw shared:42 - tmpfs t rw
93 22 0:23 / /sys/kernel/tracing rw shared:7 - tracefs tracefs rw
";
        assert_eq!(
            leftover_mounts(info, Path::new("/w/target")),
            [
                "/tmp/nodeproof-oracle x/shm",
                "/w/target/nodeproof-cri/c1/rootfs"
            ]
        );
    }

    /// Directories stand in for cgroups: rmdir refuses a non-empty one as
    /// it refuses a cgroup with a process in it.
    #[test]
    fn empty_cgroup_trees_are_removed_and_busy_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("nodeproof-cri");
        std::fs::create_dir_all(empty.join("pod1/c1")).unwrap();
        std::fs::create_dir_all(empty.join("pod2")).unwrap();
        let busy = dir.path().join("nodeproof-busy");
        std::fs::create_dir_all(busy.join("pod3")).unwrap();
        std::fs::write(busy.join("pod3/cgroup.procs"), "42\n").unwrap();
        let all = [empty.display().to_string(), busy.display().to_string()];
        let kept = remove_empty_cgroups(&all);
        assert!(!empty.exists());
        assert_eq!(kept, [busy.display().to_string()]);
        assert!(busy.join("pod3/cgroup.procs").exists());
    }

    fn artifact(id: &str, name: &str, kind: &str, exe: Option<&str>, test: bool) -> String {
        serde_json::json!({"reason": "compiler-artifact", "package_id": id,
            "manifest_path": "/w/agent/Cargo.toml",
            "target": {"name": name, "kind": [kind]},
            "profile": {"test": test}, "executable": exe})
        .to_string()
    }

    #[test]
    fn only_test_executables_are_taken_once_each() {
        let lines = [
            artifact(
                "path+file:///w/agent#nodeproof@0.1.0",
                "cli",
                "test",
                Some("/t/cli-1"),
                true,
            ),
            artifact(
                "path+file:///w/agent#nodeproof@0.1.0",
                "nodeproof",
                "bin",
                Some("/t/np"),
                false,
            ),
            artifact(
                "path+file:///w/crates/seccomp#0.1.0",
                "seccomp",
                "lib",
                None,
                false,
            ),
            artifact(
                "path+file:///w/agent#nodeproof@0.1.0",
                "nodeproof",
                "bin",
                Some("/t/np-2"),
                true,
            ),
            artifact(
                "path+file:///w/agent#nodeproof@0.1.0",
                "cli",
                "test",
                Some("/t/cli-1"),
                true,
            ),
            "not json".into(),
            serde_json::json!({"reason": "build-finished", "success": true}).to_string(),
        ]
        .join("\n");
        let bins = parse_artifacts(&lines);
        let keys: Vec<String> = bins.iter().map(Binary::key).collect();
        assert_eq!(keys, ["nodeproof::cli", "nodeproof::nodeproof(bin)"]);
        assert_eq!(bins[0].manifest_dir, Path::new("/w/agent"));
        assert_eq!(bins[0].exe, Path::new("/t/cli-1"));
    }

    #[test]
    fn package_names_from_every_id_format() {
        assert_eq!(
            package_name("path+file:///w/agent#nodeproof@0.1.0").as_deref(),
            Some("nodeproof")
        );
        assert_eq!(
            package_name("path+file:///w/crates/xtask#0.1.0").as_deref(),
            Some("xtask")
        );
        assert_eq!(
            package_name("nodeproof 0.1.0 (path+file:///w/agent)").as_deref(),
            Some("nodeproof")
        );
    }

    #[test]
    fn the_longest_start_first_and_the_untimed_guesses_before_all() {
        let b = |t: &str| Binary {
            package: "p".into(),
            target: t.into(),
            kind: "test".into(),
            exe: PathBuf::new(),
            manifest_dir: PathBuf::new(),
        };
        let bins = vec![b("quick"), b("slow"), b("new"), b("guessed"), b("mid")];
        let times: BTreeMap<String, f64> =
            [("p::quick", 1.0), ("p::slow", 300.0), ("p::mid", 30.0)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
        let got: Vec<String> = order(&bins, &times, &["p::guessed"])
            .into_iter()
            .map(|b| b.target)
            .collect();
        // Untimed and unguessed counts as a minute: after `slow`, before `mid`.
        assert_eq!(got, ["guessed", "slow", "new", "mid", "quick"]);
    }

    #[test]
    fn times_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.tsv");
        let times: BTreeMap<String, f64> =
            [("a::b".to_string(), 12.5), ("c::d(lib)".to_string(), 0.75)].into();
        write_times(&p, &times).unwrap();
        let back = read_times(&p);
        assert_eq!(back["a::b"], 12.5);
        assert_eq!(back["c::d(lib)"], 0.8);
        assert!(read_times(&dir.path().join("none")).is_empty());
    }
}
