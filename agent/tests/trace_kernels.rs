//! The tracer on the kernels fleets run: Debian's stock cloud kernels 5.10
//! (bullseye), 6.1 (bookworm) and 6.12 (trixie), each booted once under qemu
//! TCG (crates/vmtest) with an initramfs holding the nodeproof binary and the
//! static denial workload `support/np_wl.c`. In the guest, `nodeproof trace`
//! runs once probing (which strategy it picks, and the refusals it logs) and
//! once forced to each strategy; every run that loads must count exactly the
//! workload's own denials: ERRNO with three errnos (threads and a fork
//! included), KILL_PROCESS, TRAP, and none for a busy confined-but-allowed and
//! unconfined workload. Kernels are fetched with apt into target/kernels/
//! (first run only). Needs root, qemu-system-x86_64 and cpio (`cargo xtask
//! setup`); skips with one line without them, fails under NODEPROOF_REQUIRE=1.

use nodeproof_testkit::{require, Need};
use nodeproof_vmtest::{boot, Initramfs, Suite};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Generous for TCG: a boot is about a minute, each trace run loads the
/// programs in an unoptimised binary.
const BOOT_TIMEOUT: Duration = Duration::from_secs(420);

const STRATEGIES: [&str; 3] = ["fexit", "tp_btf", "tracepoint"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn needs() -> Vec<Need> {
    let mut n = vec![Need::Root, Need::Busybox];
    n.extend(nodeproof_vmtest::TOOLS.iter().map(|t| Need::Tool(t)));
    n.push(Need::EbpfPrograms {
        built: !nodeproof_trace::bpf::is_stub(),
    });
    n
}

/// The guest script: one probing run, then each strategy forced; each run's
/// stderr (the refusals, at info) and final JSON summary between markers.
const SCRIPT: &str = r#"
echo "@@ kernel $(uname -r)"
run() {
  if [ "$1" = auto ]; then S=""; else S="--strategy $1"; fi
  NODEPROOF_LOG=info /bin/nodeproof trace $S -o json >/tmp/out.$1 2>/tmp/err.$1 &
  T=$!
  i=0
  while ! grep -q "strategy loaded" /tmp/err.$1; do
    kill -0 $T 2>/dev/null || break
    i=$((i+1)); [ $i -gt 600 ] && break
    sleep 0.2
  done
  if kill -0 $T 2>/dev/null; then
    /bin/np_wl errno; /bin/np_wl kill; /bin/np_wl kill; /bin/np_wl trap; /bin/np_busy busy
    sleep 1
    kill -INT $T
  fi
  wait $T
  echo "@@ status $1 $?"
  echo "@@ stderr $1"; cat /tmp/err.$1
  echo "@@ summary $1"; grep '"summary"' /tmp/out.$1
  echo "@@ end $1"
}
for s in auto fexit tp_btf tracepoint; do run $s; done
"#;

/// One trace run in the guest.
#[derive(Debug, Default)]
struct Run {
    status: Option<i32>,
    stderr: String,
    summary: Option<serde_json::Value>,
}

fn parse(output: &str) -> BTreeMap<String, Run> {
    let mut runs: BTreeMap<String, Run> = BTreeMap::new();
    let mut section: Option<(String, &str)> = None;
    for line in output.lines() {
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix("@@ ") {
            let mut words = rest.splitn(3, ' ');
            let (kind, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            match kind {
                "status" => {
                    runs.entry(name.to_string()).or_default().status =
                        words.next().and_then(|s| s.parse().ok());
                }
                "stderr" => section = Some((name.to_string(), "stderr")),
                "summary" => section = Some((name.to_string(), "summary")),
                _ => section = None,
            }
            continue;
        }
        let Some((name, part)) = &section else {
            continue;
        };
        let run = runs.entry(name.clone()).or_default();
        match *part {
            "stderr" => {
                run.stderr.push_str(&strip_ansi(line));
                run.stderr.push('\n');
            }
            _ => run.summary = serde_json::from_str(line).ok().or(run.summary.take()),
        }
    }
    runs
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// (comm, syscall, action, errno) → count, over every process.
fn counts(summary: &serde_json::Value) -> BTreeMap<(String, String, String, i64), u64> {
    let mut m = BTreeMap::new();
    for r in summary["summary"].as_array().into_iter().flatten() {
        let key = (
            r["comm"].as_str().unwrap_or("").to_string(),
            r["syscall"].as_str().unwrap_or("").to_string(),
            r["action"].as_str().unwrap_or("").to_string(),
            r["errno"].as_i64().unwrap_or(-1),
        );
        *m.entry(key).or_default() += r["count"].as_u64().unwrap_or(0);
    }
    m
}

/// What np_wl does (see support/np_wl.c); np_busy must have no row at all.
fn expected_counts() -> BTreeMap<(String, String, String, i64), u64> {
    [
        ("mkdir", "errno", 1, 16), // 5 + 2 threads × 4 + a forked child's 3
        ("rmdir", "errno", 13, 3),
        ("chmod", "errno", 28, 2),
        ("symlink", "kill", 0, 2), // two processes, killed at their first call
        ("link", "trap", 0, 3),
    ]
    .into_iter()
    .map(|(sc, act, errno, n)| (("np_wl".into(), sc.into(), act.into(), errno), n))
    .collect()
}

/// Per kernel: the strategy probing picks, and each refused strategy with
/// the reason and a phrase of its detail.
struct Expect {
    chosen: &'static str,
    refused: &'static [(&'static str, &'static str, &'static str)],
}

fn build_workload(dir: &Path) -> PathBuf {
    let out = dir.join("np_wl");
    let src = repo().join("agent/tests/support/np_wl.c");
    let st = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .args(["-lseccomp", "-lpthread"])
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc -static failed on {}", src.display());
    out
}

fn matrix(suite: Suite, expect: Expect) {
    let mut n = needs();
    n.push(Need::Tool("gcc"));
    if require(&n).is_none() {
        return;
    }
    let cache = repo().join("target/kernels");
    let kernel = suite
        .kernel(&cache)
        .unwrap_or_else(|e| panic!("fetching {}'s kernel: {e}", suite.name()));
    let work = cache.join(format!("run-{}", suite.name()));
    std::fs::create_dir_all(&work).unwrap();
    let wl = build_workload(&work);
    let fs = Initramfs::new(&work.join("root")).unwrap();
    fs.add_binary(Path::new(env!("CARGO_BIN_EXE_nodeproof")), "/bin/nodeproof")
        .unwrap();
    fs.add_file(&wl, "/bin/np_wl").unwrap();
    // The same program under another name: its comm tells its rows apart.
    fs.add_file(&wl, "/bin/np_busy").unwrap();
    fs.set_script(SCRIPT).unwrap();
    let initrd = work.join("initrd.cpio.gz");
    fs.pack(&initrd).unwrap();
    let _ = std::fs::remove_dir_all(work.join("root"));

    let guest = boot(&kernel, &initrd, BOOT_TIMEOUT)
        .unwrap_or_else(|e| panic!("{} ({}): {e}", suite.name(), suite.series()));
    let runs = parse(&guest.output);
    eprintln!(
        "{} ({}): guest ran {:.0?}",
        suite.name(),
        suite.series(),
        guest.wall
    );
    let show = || format!("guest output:\n{}", guest.output);
    assert_eq!(guest.status, 0, "{}", show());

    // Probing: the chosen strategy, and the refusals it logged on the way.
    let auto = runs.get("auto").unwrap_or_else(|| panic!("{}", show()));
    let chosen = auto.summary.as_ref().map(|s| s["strategy"].clone());
    eprintln!("{}: probing picked {chosen:?}", suite.name());
    for line in auto.stderr.lines().filter(|l| l.contains("refused")) {
        eprintln!("  {line}");
    }
    assert_eq!(
        chosen,
        Some(serde_json::Value::from(expect.chosen)),
        "{}",
        show()
    );
    assert_eq!(counts(auto.summary.as_ref().unwrap()), expected_counts());
    let logged: Vec<&str> = auto
        .stderr
        .lines()
        .filter(|l| l.contains("strategy refused"))
        .collect();
    assert_eq!(logged.len(), expect.refused.len(), "{}", auto.stderr);
    for (s, reason, phrase) in expect.refused {
        assert!(
            logged
                .iter()
                .any(|l| l.contains(&format!("refused={s}: {reason}")) && l.contains(phrase)),
            "probing must log {s}'s {reason} refusal: {}",
            auto.stderr
        );
    }

    for s in STRATEGIES {
        let run = runs
            .get(s)
            .unwrap_or_else(|| panic!("no run {s}: {}", show()));
        match expect.refused.iter().find(|(r, _, _)| *r == s) {
            Some((_, reason, phrase)) => {
                assert_ne!(run.status, Some(0), "{s} must be refused: {}", show());
                let line = run
                    .stderr
                    .lines()
                    .find(|l| l.contains(&format!("{s}: {reason}")))
                    .unwrap_or_else(|| panic!("{s}: no {reason} refusal: {}", run.stderr));
                assert!(line.contains(phrase), "{s}: {line}");
                eprintln!("{}: {s} refused: {line}", suite.name());
            }
            None => {
                assert_eq!(run.status, Some(0), "{s}: {}", show());
                let summary = run.summary.as_ref().expect("a summary");
                assert_eq!(summary["strategy"], s);
                assert_eq!(summary["lost_counts"], 0);
                let got = counts(summary);
                eprintln!("{}: {s} counts {got:?}", suite.name());
                assert_eq!(got, expected_counts(), "{s} on {}", suite.name());
            }
        }
    }
}

#[test]
fn bullseye_5_10() {
    matrix(
        Suite::Bullseye,
        Expect {
            chosen: "tracepoint",
            refused: &[
                ("fexit", "KernelUnsupported", "task storage"),
                ("tp_btf", "KernelUnsupported", "task storage"),
            ],
        },
    );
}

#[test]
fn bookworm_6_1() {
    matrix(
        Suite::Bookworm,
        Expect {
            chosen: "fexit",
            refused: &[],
        },
    );
}

#[test]
fn trixie_6_12() {
    matrix(
        Suite::Trixie,
        Expect {
            chosen: "fexit",
            refused: &[],
        },
    );
}
