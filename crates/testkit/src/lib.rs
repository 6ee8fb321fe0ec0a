//! What nodeproof's tests need from the machine, said in one vocabulary.
//!
//! A test that needs root, runc, the shared seccomp corpus, BTF, a writable
//! cgroup2 hierarchy or a tool on PATH starts with
//!
//! ```no_run
//! use nodeproof_testkit::{require, Need};
//!
//! let Some(granted) = require(&[Need::Root, Need::Runc, Need::Corpus]) else {
//!     return;
//! };
//! let corpus = granted.corpus();
//! # let _ = corpus;
//! ```
//!
//! When every [`Need`] holds, it runs. When one does not:
//!
//! * with `NODEPROOF_REQUIRE=1` (CI) the test fails, naming what is missing:
//!   there, a skipped test is a test that did not run;
//! * otherwise it prints one line, `SKIPPED <test>: needs <what> (<how>)`, and
//!   records the skip under `<target>/nodeproof-skips/`, where `cargo xtask
//!   test` counts it instead of counting the test as passed.
//!
//! No dependencies, the agent least of all: whether a test can run here is
//! decided without the code under test, and xtask links this crate too.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Where [`Need::Runc`] looks for runc: Debian's package, then a manual install.
pub const RUNC_CANDIDATES: &[&str] = &["/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc"];
/// The static busybox the runc oracle's containers run (Debian's busybox-static).
pub const BUSYBOX: &str = "/bin/busybox";
/// The environment variable that turns a missing requirement into a failure.
pub const REQUIRE_ENV: &str = "NODEPROOF_REQUIRE";
/// The environment variable naming the seccomp corpus directory.
pub const CORPUS_ENV: &str = "NODEPROOF_CORPUS";

/// A Linux capability a test needs in its effective set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    Setgid,
    Setuid,
    Setpcap,
    SysAdmin,
    Perfmon,
    Bpf,
}

impl Cap {
    fn bit(self) -> u32 {
        match self {
            Cap::Setgid => 6,
            Cap::Setuid => 7,
            Cap::Setpcap => 8,
            Cap::SysAdmin => 21,
            Cap::Perfmon => 38,
            Cap::Bpf => 39,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Cap::Setgid => "CAP_SETGID",
            Cap::Setuid => "CAP_SETUID",
            Cap::Setpcap => "CAP_SETPCAP",
            Cap::SysAdmin => "CAP_SYS_ADMIN",
            Cap::Perfmon => "CAP_PERFMON",
            Cap::Bpf => "CAP_BPF",
        }
    }
}

/// What loading the tracer takes: the kernel's split of CAP_SYS_ADMIN for BPF.
pub const TRACING: Need = Need::Caps(&[Cap::Bpf, Cap::Perfmon]);

/// One thing a test needs from the machine it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Effective uid 0.
    Root,
    /// Every one of these capabilities in the effective set.
    Caps(&'static [Cap]),
    /// An executable of this name on PATH.
    Tool(&'static str),
    /// A runc from [`RUNC_CANDIDATES`] that answers `--version`.
    Runc,
    /// [`BUSYBOX`], the root filesystem of the runc oracle's containers.
    Busybox,
    /// containerd with its `ctr` client and runc shim on PATH (Debian's
    /// `containerd`), answering `--version`: the CRI oracle's runtime.
    Containerd,
    /// The shared seccomp corpus (see [`corpus_dir`]); [`Granted::corpus`] is its path.
    Corpus,
    /// The kernel's BTF at `/sys/kernel/btf/vmlinux`.
    Btf,
    /// A cgroup2 hierarchy this process can create cgroups in.
    Cgroup2,
    /// tracefs mounted and readable by root only (as it is by default).
    TracefsRootOnly,
    /// eBPF programs compiled into the binary under test: the caller passes
    /// `!nodeproof::trace::bpf::is_stub()`, which only the agent's build knows.
    EbpfPrograms { built: bool },
}

/// A requirement that does not hold: what is missing and how to get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub what: String,
    pub how: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.what, self.how)
    }
}

fn missing(what: impl Into<String>, how: impl Into<String>) -> Result<(), Missing> {
    Err(Missing {
        what: what.into(),
        how: how.into(),
    })
}

impl Need {
    /// `Ok` when this requirement holds here.
    pub fn check(&self) -> Result<(), Missing> {
        match *self {
            Need::Root => match status_field("Uid:").and_then(|l| nth_number(&l, 1)) {
                Some(0) => Ok(()),
                Some(uid) => missing(
                    format!("root instead of uid {uid}"),
                    "run the tests as root, e.g. `sudo -E cargo xtask test`",
                ),
                None => missing(
                    "root (no Uid: line in /proc/self/status)",
                    "run the tests as root with /proc mounted",
                ),
            },
            Need::Caps(caps) => {
                let eff = effective_capabilities();
                let lacking: Vec<&str> = caps
                    .iter()
                    .filter(|c| eff & (1u64 << c.bit()) == 0)
                    .map(|c| c.name())
                    .collect();
                if lacking.is_empty() {
                    Ok(())
                } else {
                    missing(
                        lacking.join(" + "),
                        "run the tests as root, or grant the test process these capabilities",
                    )
                }
            }
            Need::Tool(tool) => {
                if on_path(tool).is_some() {
                    Ok(())
                } else {
                    missing(
                        format!("`{tool}` on PATH"),
                        format!("apt-get install {}", package_of(tool)),
                    )
                }
            }
            Need::Runc => {
                let Some(runc) = RUNC_CANDIDATES.iter().map(Path::new).find(|p| p.is_file()) else {
                    return missing(
                        format!("runc at one of {}", RUNC_CANDIDATES.join(", ")),
                        "apt-get install runc",
                    );
                };
                match std::process::Command::new(runc).arg("--version").output() {
                    Ok(o) if o.status.success() => Ok(()),
                    Ok(o) => missing(
                        format!(
                            "a working runc (`{} --version`: {})",
                            runc.display(),
                            o.status
                        ),
                        "apt-get install --reinstall runc",
                    ),
                    Err(e) => missing(
                        format!("a working runc (cannot run {}: {e})", runc.display()),
                        "apt-get install --reinstall runc",
                    ),
                }
            }
            Need::Containerd => {
                for tool in ["containerd", "ctr", "containerd-shim-runc-v2"] {
                    if on_path(tool).is_none() {
                        return missing(format!("`{tool}` on PATH"), "apt-get install containerd");
                    }
                }
                match std::process::Command::new("containerd")
                    .arg("--version")
                    .output()
                {
                    Ok(o) if o.status.success() => Ok(()),
                    Ok(o) => missing(
                        format!(
                            "a working containerd (`containerd --version`: {})",
                            o.status
                        ),
                        "apt-get install --reinstall containerd",
                    ),
                    Err(e) => missing(
                        format!("a working containerd (cannot run it: {e})"),
                        "apt-get install --reinstall containerd",
                    ),
                }
            }
            Need::Busybox => {
                if Path::new(BUSYBOX).is_file() {
                    Ok(())
                } else {
                    missing(BUSYBOX, "apt-get install busybox-static")
                }
            }
            Need::Corpus => {
                let dir = corpus_dir();
                // runc's recorded verdicts are what makes a directory the corpus.
                if dir.join("runc-results.json").is_file() {
                    Ok(())
                } else {
                    missing(
                        format!("the seccomp corpus at {}", dir.display()),
                        format!("set {CORPUS_ENV} or put ../shared beside the checkout"),
                    )
                }
            }
            Need::Btf => {
                if Path::new("/sys/kernel/btf/vmlinux").is_file() {
                    Ok(())
                } else {
                    missing(
                        "kernel BTF at /sys/kernel/btf/vmlinux",
                        "a kernel built with CONFIG_DEBUG_INFO_BTF=y",
                    )
                }
            }
            Need::Cgroup2 => {
                if writable_cgroup2() {
                    Ok(())
                } else {
                    missing(
                        "a writable cgroup2 hierarchy",
                        "run as root with cgroup2 mounted at /sys/fs/cgroup or /sys/fs/cgroup/unified",
                    )
                }
            }
            Need::TracefsRootOnly => {
                use std::os::unix::fs::PermissionsExt;
                let root_only = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
                    .iter()
                    .filter_map(|d| std::fs::metadata(d).ok())
                    .any(|m| m.permissions().mode() & 0o005 == 0);
                if root_only {
                    Ok(())
                } else {
                    missing(
                        "tracefs readable by root only",
                        "mount it: `mount -t tracefs nodev /sys/kernel/tracing` (`cargo xtask test` does, as root)",
                    )
                }
            }
            Need::EbpfPrograms { built } => {
                if built {
                    Ok(())
                } else {
                    missing(
                        "the eBPF programs (this build has empty stubs)",
                        "apt-get install clang, then rebuild",
                    )
                }
            }
        }
    }
}

/// What a test was granted; [`Granted::corpus`] when it required [`Need::Corpus`].
#[derive(Debug)]
pub struct Granted {
    corpus: Option<PathBuf>,
}

impl Granted {
    /// The seccomp corpus directory.
    ///
    /// # Panics
    /// When the test did not require [`Need::Corpus`]: a path that was never
    /// checked would bring back the silent skips this crate replaces.
    pub fn corpus(&self) -> &Path {
        self.corpus
            .as_deref()
            .expect("Granted::corpus without require(&[Need::Corpus, ..])")
    }
}

/// Every requirement of `needs` that does not hold here, in order.
pub fn missing_of(needs: &[Need]) -> Vec<Missing> {
    needs.iter().filter_map(|n| n.check().err()).collect()
}

/// `Some` when every requirement holds. Otherwise, with `NODEPROOF_REQUIRE=1`,
/// panics naming what is missing; without it, prints one `SKIPPED` line,
/// records the skip for `cargo xtask test` and returns `None`.
///
/// The test is named after the libtest thread that runs it (the test target's
/// name where there is none, as in a `harness = false` bench).
#[must_use = "a test that ignores `None` runs without what it needs"]
#[track_caller] // a failure points at the test, not here
pub fn require(needs: &[Need]) -> Option<Granted> {
    let lacking = missing_of(needs);
    if lacking.is_empty() {
        return Some(Granted {
            corpus: needs.contains(&Need::Corpus).then(corpus_dir),
        });
    }
    let target = target_name();
    let thread = std::thread::current();
    let test = match thread.name() {
        Some(name) if name != "main" => name.to_string(),
        _ => target.clone(),
    };
    let skip = Skip {
        target,
        test,
        needs: lacking
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    };
    // libtest captures `eprintln!` and shows it only for failed tests; a
    // write to the stderr handle itself is not captured, so the line shows.
    skip_or_fail(&skip, strict(), &skips_dir(), &mut std::io::stderr().lock());
    None
}

/// The missing-requirement half of [`require`], with its inputs explicit.
#[track_caller]
fn skip_or_fail(skip: &Skip, strict: bool, dir: &Path, out: &mut dyn Write) {
    if strict {
        panic!(
            "{} needs {}: {REQUIRE_ENV}=1 makes a missing requirement a failure",
            skip.test, skip.needs
        );
    }
    // One write of the whole line: parallel tests' output lands between writes.
    let _ = out.write_all(format!("{}\n", skip.line()).as_bytes());
    if let Err(e) = record(dir, skip) {
        // An uncounted skip would pass as a passed test: refuse that.
        panic!("{}; recording it failed: {e}", skip.line());
    }
}

/// `NODEPROOF_REQUIRE`: `1` fails on a missing requirement, unset/empty/`0` skips.
///
/// # Panics
/// On any other value, rather than guess which was meant.
fn strict() -> bool {
    match std::env::var(REQUIRE_ENV).as_deref() {
        Ok("1") => true,
        Ok("" | "0") | Err(std::env::VarError::NotPresent) => false,
        Ok(other) => panic!("{REQUIRE_ENV}={other:?}: use 1 (fail when missing) or 0"),
        Err(e) => panic!("{REQUIRE_ENV}: {e}"),
    }
}

/// A recorded skip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    /// The test target (`advise_corpus`, `nodeproof` for the library's unit tests).
    pub target: String,
    /// The test as libtest names it.
    pub test: String,
    /// What is missing and how to get it, `what (how)`, comma-separated.
    pub needs: String,
}

impl Skip {
    /// `SKIPPED <test>: needs <what> (<how>)`.
    pub fn line(&self) -> String {
        format!("SKIPPED {}: needs {}", self.test, self.needs)
    }

    fn to_record(&self) -> String {
        // Tabs and newlines cannot be in a test name; keep them out of the rest.
        let clean = |s: &str| s.replace(['\t', '\n'], " ");
        format!(
            "{}\t{}\t{}\n",
            clean(&self.target),
            clean(&self.test),
            clean(&self.needs)
        )
    }

    fn from_record(text: &str) -> Option<Skip> {
        let mut fields = text.trim_end_matches('\n').splitn(3, '\t');
        Some(Skip {
            target: fields.next()?.to_string(),
            test: fields.next()?.to_string(),
            needs: fields.next()?.to_string(),
        })
    }
}

/// The workspace root: this crate lives at `<workspace>/crates/testkit`.
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/testkit is two levels below the workspace root")
}

/// The seccomp corpus: `NODEPROOF_CORPUS`, else `<workspace>/../shared/seccomp-corpus`.
pub fn corpus_dir() -> PathBuf {
    std::env::var_os(CORPUS_ENV).map_or_else(
        || {
            workspace_root()
                .parent()
                .unwrap_or(Path::new("/"))
                .join("shared/seccomp-corpus")
        },
        PathBuf::from,
    )
}

/// The project's own example profiles, `<workspace>/profiles`.
pub fn own_profiles_dir() -> PathBuf {
    workspace_root().join("profiles")
}

/// Every profile under `dir`, recursively and sorted (runc's recorded
/// `runc-results.json` left out); empty when `dir` cannot be read.
pub fn profiles_in(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "json")
                && p.file_name().is_some_and(|n| n != "runc-results.json")
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// Where skips are recorded: `<target dir>/nodeproof-skips` ([`target_dir`]).
/// One file per skip, so parallel test processes never write to the same file.
pub fn skips_dir() -> PathBuf {
    target_dir().join("nodeproof-skips")
}

/// The target directory cargo built the running executable into, wherever
/// it is (`CARGO_TARGET_DIR`, `build.target-dir` in a cargo config,
/// `--target-dir`): derived from this executable's path as cargo lays it
/// out ([`target_dir_of`]), never assumed to be `<workspace>/target`.
/// Scratch space the tests keep between runs (caches, oracles' state) lives
/// under it, and the binaries of the same build beside [`profile_dir`].
pub fn target_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().ok();
        exe.as_deref()
            .and_then(target_dir_of)
            .or_else(|| {
                // Not an executable of a cargo target directory (rustdoc runs
                // doctests from a temporary directory): the variable, then
                // cargo's default.
                std::env::var_os("CARGO_TARGET_DIR").map(|t| workspace_root().join(t))
            })
            .unwrap_or_else(|| workspace_root().join("target"))
    })
    .clone()
}

/// The profile directory (`<target>/debug`) the running executable was built
/// in: where cargo puts the workspace's binaries (`nodeproof`) of that build.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().ok();
    exe.as_deref()
        .and_then(profile_dir_of)
        .unwrap_or_else(|| target_dir().join("debug"))
}

/// `<target>/<profile>` for an executable cargo built: a test or bench is
/// `<target>/<profile>/deps/<name>-<hash>`, an example
/// `<target>/<profile>/examples/<name>`, a binary `<target>/<profile>/<name>`;
/// `None` unless the directory above holds cargo's `CACHEDIR.TAG`, which cargo
/// writes at the top of every target directory.
pub fn profile_dir_of(exe: &Path) -> Option<PathBuf> {
    let mut dir = exe.parent()?;
    if dir
        .file_name()
        .is_some_and(|n| n == "deps" || n == "examples")
    {
        dir = dir.parent()?;
    }
    // `<target>/<profile>`, or `<target>/<triple>/<profile>` with `--target`.
    dir.ancestors()
        .skip(1)
        .take(2)
        .any(|t| t.join("CACHEDIR.TAG").is_file())
        .then(|| dir.to_path_buf())
}

/// The target directory of an executable cargo built (see [`profile_dir_of`]).
pub fn target_dir_of(exe: &Path) -> Option<PathBuf> {
    let profile = profile_dir_of(exe)?;
    profile
        .ancestors()
        .skip(1)
        .take(2)
        .find(|t| t.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
}

/// Writes `skip` as a file of its own under `dir`.
pub fn record(dir: &Path, skip: &Skip) -> std::io::Result<()> {
    static N: AtomicU32 = AtomicU32::new(0);
    std::fs::create_dir_all(dir)?;
    let name = format!(
        "{}.{}.{}.skip",
        skip.target
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    // Written under a temporary name and renamed: a reader never sees half a record.
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?
        .write_all(skip.to_record().as_bytes())?;
    std::fs::rename(&tmp, dir.join(name))
}

/// The skips recorded under `dir`, sorted by target and test.
pub fn recorded_skips(dir: &Path) -> std::io::Result<Vec<Skip>> {
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for e in rd {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "skip") {
            let text = std::fs::read_to_string(&p)?;
            out.push(Skip::from_record(&text).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("not a skip record: {}", p.display()),
                )
            })?);
        }
    }
    out.sort_by(|a, b| (&a.target, &a.test).cmp(&(&b.target, &b.test)));
    Ok(out)
}

/// Forgets every recorded skip (before a test run).
pub fn clear_skips(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The running test target: the executable's name without cargo's `-<hash>`.
fn target_name() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    strip_hash(&stem).to_string()
}

fn strip_hash(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name
        }
        _ => stem,
    }
}

/// The line of /proc/self/status starting with `key`, without it.
fn status_field(key: &str) -> Option<String> {
    // thread-self: capabilities can differ between the threads of a process.
    std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::to_string)
}

/// The `n`th (0-based) whitespace-separated number of `line`.
fn nth_number(line: &str, n: usize) -> Option<u32> {
    line.split_whitespace().nth(n)?.parse().ok()
}

fn effective_capabilities() -> u64 {
    status_field("CapEff:")
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

fn on_path(tool: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The Debian package that ships `tool` (`cargo xtask setup` installs them).
fn package_of(tool: &str) -> &str {
    match tool {
        "systemd-nspawn" => "systemd-container",
        "systemd-analyze" | "systemd-sysusers" | "systemd-tmpfiles" | "systemctl" => "systemd",
        "nsenter" | "unshare" | "setpriv" => "util-linux",
        "pgrep" => "procps",
        "setfacl" => "acl",
        "timeout" | "sha256sum" => "coreutils",
        "cc" => "gcc",
        "busybox" => "busybox-static",
        "qemu-system-x86_64" => "qemu-system-x86",
        // Debian ships promtool only in the server's package.
        "promtool" => "prometheus",
        other => other,
    }
}

/// Whether a cgroup can be made (and removed) under the cgroup2 hierarchy
/// the kernel tests use: /sys/fs/cgroup/unified on hybrid hosts, else
/// /sys/fs/cgroup itself.
fn writable_cgroup2() -> bool {
    static N: AtomicU32 = AtomicU32::new(0);
    let Some(base) = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.join("cgroup.controllers").exists())
    else {
        return false;
    };
    let probe = base.join(format!(
        "nodeproof-probe-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&probe).is_ok() && std::fs::remove_dir(&probe).is_ok()
}

/// The mount points of a `/proc/PID/mountinfo` text (its fifth field),
/// unescaped: mountinfo writes space, tab, newline and backslash as octal
/// (fs/proc_namespace.c, `show_mountinfo` → `mangle`). What the tests'
/// harnesses and the suite's end check to find mounts left behind.
pub fn mount_points(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| {
            p.replace("\\040", " ")
                .replace("\\011", "\t")
                .replace("\\012", "\n")
                .replace("\\134", "\\")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("testkit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn records_round_trip_one_file_each() {
        let dir = scratch("records");
        let a = Skip {
            target: "lint_vs_runc".into(),
            test: "corpus_predictions_match_live_runc".into(),
            needs: "the seccomp corpus at /x (set NODEPROOF_CORPUS or put ../shared beside the checkout)".into(),
        };
        let b = Skip {
            target: "advise_corpus".into(),
            test: "tab\tin name".into(),
            needs: "root (run as root)".into(),
        };
        record(&dir, &a).unwrap();
        record(&dir, &b).unwrap();
        record(&dir, &a).unwrap();
        let got = recorded_skips(&dir).unwrap();
        let b_clean = Skip {
            test: "tab in name".into(),
            ..b
        };
        assert_eq!(got, vec![b_clean, a.clone(), a]);
        clear_skips(&dir).unwrap();
        assert_eq!(recorded_skips(&dir).unwrap(), vec![]);
        clear_skips(&dir).unwrap();
    }

    #[test]
    fn a_missing_tool_says_which_package_ships_it() {
        let m = Need::Tool("systemd-nspawn-nodeproof-none")
            .check()
            .unwrap_err();
        assert_eq!(m.what, "`systemd-nspawn-nodeproof-none` on PATH");
        assert_eq!(package_of("systemd-nspawn"), "systemd-container");
        assert_eq!(package_of("qemu-system-x86_64"), "qemu-system-x86");
        assert_eq!(package_of("promtool"), "prometheus");
        assert!(Need::Tool("sh").check().is_ok());
    }

    #[test]
    fn the_line_names_the_test_and_every_missing_need() {
        let s = Skip {
            target: "t".into(),
            test: "corpus_round_trip".into(),
            needs: [
                Missing {
                    what: "root".into(),
                    how: "run as root".into(),
                },
                Missing {
                    what: "runc".into(),
                    how: "apt-get install runc".into(),
                },
            ]
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        };
        assert_eq!(
            s.line(),
            "SKIPPED corpus_round_trip: needs root (run as root), runc (apt-get install runc)"
        );
    }

    #[test]
    fn cargo_hashes_are_stripped_from_target_names() {
        assert_eq!(
            strip_hash("advise_corpus-0123456789abcdef"),
            "advise_corpus"
        );
        assert_eq!(
            strip_hash("nodeproof_testkit-fedcba9876543210"),
            "nodeproof_testkit"
        );
        assert_eq!(strip_hash("lint-vs-runc"), "lint-vs-runc");
    }

    #[test]
    fn granted_corpus_only_when_required() {
        let g = Granted { corpus: None };
        assert!(std::panic::catch_unwind(|| g.corpus().to_path_buf()).is_err());
        let g = Granted {
            corpus: Some("/c".into()),
        };
        assert_eq!(g.corpus(), Path::new("/c"));
    }

    fn sample() -> Skip {
        Skip {
            target: "lint_vs_runc".into(),
            test: "corpus_predictions_match_live_runc".into(),
            needs: "runc (apt-get install runc)".into(),
        }
    }

    #[test]
    #[should_panic(
        expected = "corpus_predictions_match_live_runc needs runc (apt-get install runc): NODEPROOF_REQUIRE=1"
    )]
    fn strict_mode_fails_instead_of_skipping() {
        let dir = scratch("strict");
        skip_or_fail(&sample(), true, &dir, &mut Vec::new());
    }

    #[test]
    fn lenient_mode_records_the_skip() {
        let dir = scratch("lenient");
        let mut out = Vec::new();
        skip_or_fail(&sample(), false, &dir, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "SKIPPED corpus_predictions_match_live_runc: needs runc (apt-get install runc)\n"
        );
        assert_eq!(recorded_skips(&dir).unwrap(), vec![sample()]);
        clear_skips(&dir).unwrap();
    }

    #[test]
    fn nothing_required_is_granted() {
        assert!(require(&[]).is_some());
    }
}

#[cfg(test)]
mod target_dir_tests {
    use super::*;

    #[test]
    fn the_target_dir_is_where_cargo_put_the_executable_not_the_workspace() {
        let t = tempfile_dir();
        let target = t.join("elsewhere/tgt");
        for d in [
            "debug/deps",
            "debug/examples",
            "x86_64-unknown-linux-gnu/debug/deps",
        ] {
            std::fs::create_dir_all(target.join(d)).unwrap();
        }
        std::fs::write(
            target.join("CACHEDIR.TAG"),
            "Signature: 8a477f597d28d172789f06886806bc55\n",
        )
        .unwrap();
        let test = target.join("debug/deps/apiserver-0123abcd");
        assert_eq!(profile_dir_of(&test), Some(target.join("debug")));
        assert_eq!(target_dir_of(&test), Some(target.clone()));
        assert_eq!(
            target_dir_of(&target.join("debug/xtask")),
            Some(target.clone())
        );
        assert_eq!(
            target_dir_of(&target.join("debug/examples/e")),
            Some(target.clone())
        );
        let triple = target.join("x86_64-unknown-linux-gnu/debug/deps/t-1");
        assert_eq!(
            profile_dir_of(&triple),
            Some(target.join("x86_64-unknown-linux-gnu/debug"))
        );
        assert_eq!(target_dir_of(&triple), Some(target.clone()));
        // Not under a target directory (rustdoc's temporary doctest binary).
        assert_eq!(target_dir_of(&t.join("rustdoctest/rust_out")), None);
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn this_test_runs_from_the_target_dir_cargo_chose() {
        // Whatever CARGO_TARGET_DIR says, this executable lies under it.
        let exe = std::env::current_exe().unwrap();
        assert!(
            exe.starts_with(target_dir()),
            "{} under {}",
            exe.display(),
            target_dir().display()
        );
        assert!(target_dir().join("CACHEDIR.TAG").is_file());
    }

    fn tempfile_dir() -> PathBuf {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "nodeproof-testkit-target-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
