//! The tracer on the kernels fleets run: Debian's stock cloud kernels 5.10
//! (bullseye), 6.1 (bookworm) and 6.12 (trixie), each booted once under qemu
//! TCG (crates/vmtest) with an initramfs holding the nodeproof binary and the
//! static denial workload `support/np_wl.c`. In the guest, `nodeproof trace`
//! runs once probing (which strategy it picks, and the refusals it logs) and
//! once forced to each strategy; every run that loads must count exactly the
//! workload's own denials: ERRNO with three errnos (threads and a fork + exec
//! included), KILL_PROCESS, KILL_THREAD, TRAP, nested filters, USER_NOTIF
//! answered with an error, every filter installed after the tracer attached,
//! and none for a busy confined-but-allowed and unconfined workload; the
//! cgroup creation feed must attach under each. Under
//! fexit and tp_btf, bpf_prog_info's run_cnt shows which tasks each program
//! runs for. Then `nodeproof run` must answer /readyz and name the same
//! strategy in its metrics. Kernels are fetched with apt into target/kernels/
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
# Starts `nodeproof trace $2...` into /tmp/$1.{out,err}; T is its pid, alive once loaded.
start() {
  name=$1; shift
  NODEPROOF_LOG=info /bin/nodeproof trace "$@" -o json >/tmp/$name.out 2>/tmp/$name.err &
  T=$!
  i=0
  while ! grep -q "strategy loaded" /tmp/$name.err; do
    kill -0 $T 2>/dev/null || break
    i=$((i+1)); [ $i -gt 600 ] && break
    sleep 0.2
  done
}
run() {
  if [ "$1" = auto ]; then start $1; else start $1 --strategy $1; fi
  if kill -0 $T 2>/dev/null; then
    /bin/np_wl errno; /bin/np_wl kill; /bin/np_wl kill; /bin/np_wl trap
    /bin/np_wl killthread; /bin/np_wl nested; /bin/np_wl notify; /bin/np_busy busy
    sleep 1
    kill -INT $T
  fi
  wait $T
  echo "@@ status $1 $?"
  echo "@@ stderr $1"; cat /tmp/$1.err
  echo "@@ summary $1"; grep '"summary"' /tmp/$1.out
  echo "@@ end $1"
}
for s in auto fexit tp_btf tracepoint; do run $s; done
# Run counts of one program (name prefix $2) of strategy $1: before, after an
# unconfined getppid loop, after a confined one.
echo 1 > /proc/sys/kernel/bpf_stats_enabled
runcnt() {
  start runcnt-$1 --strategy $1
  if kill -0 $T 2>/dev/null; then
    A=$(/bin/np_runcnt $2); /bin/np_busy unconfined
    B=$(/bin/np_runcnt $2); /bin/np_busy confined
    C=$(/bin/np_runcnt $2)
    echo "@@ runcnt $1 $A $B $C"
    kill -INT $T
  fi
  wait $T
}
runcnt fexit np_fexit_
runcnt tp_btf np_btf_enter
# The daemon: /readyz answers 200 and the strategy metric names the one in use.
ip link set lo up
mkdir -p /tmp/seccomp
printf '[seccomp]\nroot = "/tmp/seccomp"\n[report]\nkubeconfig = "/nonexistent"\n[daemon]\nlisten = "127.0.0.1:9464"\n' >/tmp/config.toml
NODE_NAME=vm /bin/nodeproof run --config /tmp/config.toml >/tmp/daemon.log 2>&1 &
D=$!
i=0
until wget -q -O /dev/null http://127.0.0.1:9464/readyz 2>/dev/null; do
  i=$((i+1)); [ $i -gt 600 ] && break
  kill -0 $D 2>/dev/null || break
  sleep 0.2
done
[ $i -le 600 ] && kill -0 $D 2>/dev/null && echo "@@ readyz ok"
wget -q -O - http://127.0.0.1:9464/metrics | grep '^nodeproof_seccomp_tracing_strategy{.*} 1' | sed 's/.*strategy="\([a-z_]*\)".*/@@ daemon-strategy \1/'
kill -TERM $D; wait $D
echo "@@ daemon-log"; tail -n 20 /tmp/daemon.log; echo "@@ end daemon"
# Each run's own status is on its "@@ status" line; a refused strategy's is not the script's.
exit 0
"#;

/// One trace run in the guest.
#[derive(Debug, Default)]
struct Run {
    status: Option<i32>,
    stderr: String,
    summary: Option<serde_json::Value>,
    /// A program's run_cnt before, after 20000 unconfined and after 20000 confined syscalls.
    runcnt: Option<[u64; 3]>,
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
                "runcnt" => {
                    let n: Vec<u64> = words
                        .next()
                        .unwrap_or("")
                        .split(' ')
                        .filter_map(|w| w.parse().ok())
                        .collect();
                    runs.entry(name.to_string()).or_default().runcnt = n.try_into().ok();
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

/// What np_wl does (see support/np_wl.c) as `strategy` counts it; np_busy
/// must have no row at all.
fn expected_counts(strategy: &str) -> BTreeMap<(String, String, String, i64), u64> {
    // The pairing strategies tell a notified call answered with an error by
    // the supervisor's RECV, even answered at once; fexit sees only __secure_computing's -1 and
    // the errno in ax (see the top comment of crates/trace/bpf/seccomp_trace.bpf.c).
    let notify = if strategy == "fexit" {
        "errno"
    } else {
        "notify-error"
    };
    [
        ("mkdir", "errno", 1, 16), // 5 + 2 threads × 4 + a forked and exec'd child's 3
        ("rmdir", "errno", 13, 3),
        ("chmod", "errno", 28, 2),
        ("symlink", "kill", 0, 2), // two processes, killed at their first call
        ("link", "trap", 0, 3),
        ("rename", "kill", 0, 1),  // KILL_THREAD: one thread
        ("unlink", "errno", 1, 2), // nested: the first filter
        ("mknod", "errno", 17, 2), // nested: the second filter
        ("chdir", notify, 5, 2),
    ]
    .into_iter()
    .map(|(sc, act, errno, n)| (("np_wl".into(), sc.into(), act.into(), errno), n))
    .collect()
}

/// Per kernel: the strategy probing picks, and each refused strategy with
/// the reason and a phrase of its detail.
struct Expect {
    chosen: &'static str,
    /// fexit loads its variant without task storage (np_fexit_compat).
    fexit_fallback: bool,
    refused: &'static [(&'static str, &'static str, &'static str)],
}

/// Builds `support/<name>.c` static into `dir`.
fn build_static(dir: &Path, name: &str, libs: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let src = repo().join(format!("agent/tests/support/{name}.c"));
    let st = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .args(libs)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc -static failed on {}", src.display());
    out
}

/// The fexit program runs only for tasks with seccomp work (the kernel calls
/// __secure_computing only when SYSCALL_WORK_SECCOMP is set): an unconfined
/// loop adds no run, a confined one at least one per syscall. tp_btf's
/// sys_enter runs for every task's every syscall: the contrast.
fn assert_run_counts(
    suite: Suite,
    runs: &BTreeMap<String, Run>,
    fexit_loads: bool,
    tp_btf_loads: bool,
) {
    const CALLS: u64 = 20000;
    let fexit = runs.get("fexit").and_then(|r| r.runcnt);
    let tp_btf = runs.get("tp_btf").and_then(|r| r.runcnt);
    eprintln!(
        "{}: run_cnt [before, after {CALLS} unconfined getppid, after {CALLS} confined]: fexit {fexit:?}, tp_btf enter {tp_btf:?}",
        suite.name()
    );
    if !fexit_loads {
        assert_eq!(fexit, None);
        return;
    }
    let [a, b, c] = fexit.expect("fexit run counts");
    assert_eq!(b - a, 0, "fexit ran for an unconfined task");
    assert!(
        c - b >= CALLS,
        "fexit ran {} times for {CALLS} confined calls",
        c - b
    );
    if !tp_btf_loads {
        assert_eq!(tp_btf, None);
        return;
    }
    let [a, b, _] = tp_btf.expect("tp_btf run counts");
    assert!(b - a >= CALLS, "tp_btf sys_enter ran {} times", b - a);
}

fn matrix(suite: Suite, expect: Expect) {
    let mut n = needs();
    n.push(Need::Tool("gcc"));
    if require(&n).is_none() {
        return;
    }
    let cache = nodeproof_testkit::target_dir().join("kernels");
    let kernel = suite
        .kernel(&cache)
        .unwrap_or_else(|e| panic!("fetching {}'s kernel: {e}", suite.name()));
    let work = cache.join(format!("run-{}", suite.name()));
    std::fs::create_dir_all(&work).unwrap();
    let wl = build_static(&work, "np_wl", &["-lseccomp", "-lpthread"]);
    let runcnt = build_static(&work, "np_runcnt", &[]);
    let fs = Initramfs::new(&work.join("root")).unwrap();
    fs.add_binary(Path::new(env!("CARGO_BIN_EXE_nodeproof")), "/bin/nodeproof")
        .unwrap();
    fs.add_file(&wl, "/bin/np_wl").unwrap();
    // The same program under another name: its comm tells its rows apart.
    fs.add_file(&wl, "/bin/np_busy").unwrap();
    fs.add_file(&runcnt, "/bin/np_runcnt").unwrap();
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
    assert_eq!(
        counts(auto.summary.as_ref().unwrap()),
        expected_counts(expect.chosen)
    );
    let logged: Vec<&str> = auto
        .stderr
        .lines()
        .filter(|l| l.contains("strategy refused"))
        .collect();
    // Probing logs the refusals of the strategies tried before the chosen one.
    let rank = |s: &str| STRATEGIES.iter().position(|x| *x == s);
    let before: Vec<_> = expect
        .refused
        .iter()
        .filter(|(s, _, _)| rank(s) < rank(expect.chosen))
        .collect();
    assert_eq!(logged.len(), before.len(), "{}", auto.stderr);
    for (s, reason, phrase) in before {
        assert!(
            logged
                .iter()
                .any(|l| l.contains(&format!("refused={s}: {reason}")) && l.contains(phrase)),
            "probing must log {s}'s {reason} refusal: {}",
            auto.stderr
        );
    }

    // The daemon reaches ready with the same strategy as `nodeproof trace`.
    assert!(
        guest.output.lines().any(|l| l.trim_end() == "@@ readyz ok"),
        "the daemon never answered /readyz: {}",
        show()
    );
    let daemon_strategy = guest
        .output
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("@@ daemon-strategy "));
    eprintln!(
        "{}: the daemon is ready, tracing with {daemon_strategy:?}",
        suite.name()
    );
    assert_eq!(daemon_strategy, Some(expect.chosen), "{}", show());

    let loads = |strategy: &str| !expect.refused.iter().any(|(s, _, _)| *s == strategy);
    assert_run_counts(suite, &runs, loads("fexit"), loads("tp_btf"));

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
                if s == "fexit" {
                    assert_eq!(
                        run.stderr.contains("loaded its fallback variant"),
                        expect.fexit_fallback,
                        "{}",
                        run.stderr
                    );
                }
                // The cgroup creation feed (short-lived containers' attribution)
                // attaches under every strategy that loads.
                assert!(
                    !run.stderr.contains("cgroup creation feed not attached"),
                    "{s} on {}: {}",
                    suite.name(),
                    run.stderr
                );
                let got = counts(summary);
                eprintln!("{}: {s} counts {got:?}", suite.name());
                assert_eq!(got, expected_counts(s), "{s} on {}", suite.name());
            }
        }
    }
}

#[test]
fn bullseye_5_10() {
    matrix(
        Suite::Bullseye,
        Expect {
            chosen: "fexit",
            fexit_fallback: true,
            refused: &[("tp_btf", "KernelUnsupported", "task storage")],
        },
    );
}

#[test]
fn bookworm_6_1() {
    matrix(
        Suite::Bookworm,
        Expect {
            chosen: "fexit",
            fexit_fallback: false,
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
            fexit_fallback: false,
            refused: &[],
        },
    );
}
