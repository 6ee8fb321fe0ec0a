//! The eBPF tracer against real runc containers: a busybox container whose
//! profile denies `mkdir` with `SCMP_ACT_ERRNO` makes exactly three denials,
//! and the tracer must count exactly three for that container, attributed
//! through runc's cgroup (a kubelet-shaped `cgroupsPath`) to the pod UID and
//! container id. Needs root (runc), CAP_BPF + CAP_PERFMON and the programs
//! built with clang; without them the test skips (fails under NODEPROOF_REQUIRE=1).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nodeproof_e2e::splice::{self, SpliceOracle, Verdict};
use nodeproof_testkit::{require, Need, TRACING};
use nodeproof_trace::{
    self, Action, CgroupResolver, NoPodLookup, OutputFormat, Strategy, TraceError, TraceOptions,
    Tracer, TracerConfig,
};
use serde_json::Value;

const PROFILE: &str = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}"#;
/// Three denied mkdirs, then a pause: runc removes the container's cgroup when
/// it exits, and the tracer resolves a cgroup id by walking the live hierarchy
/// (within one 100 ms poll of the sample), so the container must outlive that.
const SCRIPT: &str = "mkdir /tmp/a; mkdir /tmp/b; mkdir /tmp/c; sleep 1; true";
const MKDIR: i32 = 83;

/// A pod UID and a 64-hex container id unique to this run (time, process, index).
fn ids(n: u32) -> (String, String) {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let hex = format!("{nanos:016x}{:08x}{n:08x}", std::process::id());
    let uid = format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    );
    (uid, format!("{hex}{hex}"))
}

/// Runs the container under `strategy` (None: probed) and returns the JSON
/// lines `nodeproof trace -o json` would print, plus the strategy used.
fn trace_one_container(
    oracle: &Arc<SpliceOracle>,
    strategy: Option<Strategy>,
    nnp: bool,
    cgroups_path: &str,
) -> (Vec<Value>, Strategy) {
    let mut tracer = Tracer::start(&TracerConfig {
        strategy,
        ..TracerConfig::default()
    })
    .unwrap_or_else(|e: TraceError| panic!("{strategy:?} must load here: {e}"));
    let used = nodeproof_trace::EventSource::strategy(&tracer);
    let stop = Arc::new(AtomicBool::new(false));
    let container = {
        let (oracle, stop, path) = (oracle.clone(), stop.clone(), cgroups_path.to_string());
        std::thread::spawn(move || {
            let run = oracle.run_in_cgroup(PROFILE.as_bytes(), nnp, &["sh", "-c", SCRIPT], &path);
            // What the programs counted is in the maps already; one more poll drains samples.
            std::thread::sleep(Duration::from_millis(150));
            stop.store(true, Ordering::SeqCst);
            run
        })
    };
    let mut out = Vec::new();
    nodeproof_trace::run_with(
        &mut tracer,
        &TraceOptions {
            format: OutputFormat::Json,
            ..TraceOptions::default()
        },
        &mut out,
        &stop,
        CgroupResolver::host(),
        &NoPodLookup,
    )
    .expect("trace run");
    let run = container.join().expect("runc thread").expect("oracle");
    assert_eq!(
        run.verdict,
        Verdict::Accepted,
        "runc exit {}: {}",
        run.exit,
        run.stderr
    );
    let text = String::from_utf8(out).expect("utf-8 output");
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (lines, used)
}

#[test]
fn runc_container_denials_are_exact_and_attributed_to_the_pod() {
    let needs = [
        splice::ORACLE,
        &[
            TRACING,
            Need::EbpfPrograms {
                built: !nodeproof_trace::bpf::is_stub(),
            },
        ],
    ]
    .concat();
    let Some(_) = require(&needs) else {
        return;
    };
    let oracle = Arc::new(SpliceOracle::runc(splice::default_oracle_dir()).expect("oracle"));
    // The probed strategy in both runc seccomp modes (noNewPrivileges decides
    // whether runc init runs under the filter), then every other strategy that loads.
    let mut runs: Vec<(Option<Strategy>, bool)> = vec![(None, true), (None, false)];
    runs.extend(
        [Strategy::TpBtf, Strategy::Tracepoint]
            .into_iter()
            .filter(|s| {
                Tracer::start(&TracerConfig {
                    strategy: Some(*s),
                    ..TracerConfig::default()
                })
                .is_ok()
            })
            .map(|s| (Some(s), true)),
    );
    for (n, (strategy, nnp)) in runs.into_iter().enumerate() {
        let (uid, cid) = ids(n as u32);
        let cgroups_path = format!("/kubepods/burstable/pod{uid}/{cid}");
        let _cleanup = PodCgroups(format!("kubepods/burstable/pod{uid}"));
        let (lines, used) = trace_one_container(&oracle, strategy, nnp, &cgroups_path);
        let what = format!("strategy {used} nnp={nnp}");
        let (summary, samples) = lines.split_last().expect("a summary line");
        assert_eq!(summary["strategy"], used.as_str(), "{what}");

        let ours: Vec<&Value> = summary["summary"]
            .as_array()
            .expect("summary rows")
            .iter()
            .filter(|r| r["container_id"] == cid.as_str())
            .collect();
        let total: u64 = ours.iter().map(|r| r["count"].as_u64().unwrap()).sum();
        assert_eq!(total, 3, "{what}: rows {ours:#?}\nall: {summary}");
        for r in &ours {
            assert_eq!(r["syscall"], "mkdir", "{what}: {r}");
            assert_eq!(r["nr"], MKDIR, "{what}: {r}");
            assert_eq!(r["errno"], libc_eperm(), "{what}: {r}");
            assert_eq!(r["action"], Action::Errno.as_str(), "{what}: {r}");
            assert_eq!(r["pod_uid"], uid.as_str(), "{what}: {r}");
            assert_eq!(r["cgroup"], cgroups_path.as_str(), "{what}: {r}");
        }
        // Nothing else may be attributed to this pod (runc init's own syscalls included).
        let pod_rows = summary["summary"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["pod_uid"] == uid.as_str())
            .count();
        assert_eq!(pod_rows, ours.len(), "{what}: {summary}");
        let our_samples: Vec<&Value> = samples
            .iter()
            .filter(|s| s["container_id"] == cid.as_str())
            .collect();
        assert_eq!(our_samples.len(), 3, "{what}: {samples:#?}");
        for s in our_samples {
            assert_eq!(s["comm"], "mkdir", "{what}: {s}");
            assert_eq!(s["pod_uid"], uid.as_str(), "{what}: {s}");
            assert_eq!(s["cgroup"], cgroups_path.as_str(), "{what}: {s}");
        }
        eprintln!("{what}: 3 denials counted and attributed to pod {uid}");
    }
}

/// EPERM, runc's default `errnoRet` for `SCMP_ACT_ERRNO`.
fn libc_eperm() -> i64 {
    1
}

/// runc removes the container's cgroup but leaves the parents it created:
/// remove this test's (empty) pod cgroup from every hierarchy on drop.
/// `kubepods/burstable` itself stays: a real kubelet may own it.
struct PodCgroups(String);

impl Drop for PodCgroups {
    fn drop(&mut self) {
        let mut roots = vec![std::path::PathBuf::from("/sys/fs/cgroup")];
        if let Ok(dirs) = std::fs::read_dir("/sys/fs/cgroup") {
            roots.extend(dirs.flatten().map(|d| d.path()));
        }
        for root in roots {
            let pod = root.join(&self.0);
            if let Ok(children) = std::fs::read_dir(&pod) {
                for c in children.flatten().filter(|c| c.path().is_dir()) {
                    let _ = std::fs::remove_dir(c.path());
                }
                let _ = std::fs::remove_dir(&pod);
            }
        }
    }
}
