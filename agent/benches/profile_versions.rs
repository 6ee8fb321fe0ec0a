//! What naming a denial's profile change costs the agent: the memory of the
//! versions kept (100 profiles × 8 versions of the project's RuntimeDefault
//! profile, each compiled as the node loads it: heap counted by this
//! bench's allocator, against the budget's own count and the state file's
//! size) and the time to attribute one Event (a container restarted after
//! an edit, its first denial of a call: the version at its start looked
//! up, the version before judged on the number, the Event's message made;
//! every container new, so no judgement comes from the cache), beside the
//! same Events without versions.
//!
//! `cargo bench -p nodeproof --bench profile_versions`: 3 runs, each printed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nodeproof::judge::versions::{ProfileVersions, MAX_BYTES, MAX_VERSIONS};
use nodeproof::pods::denials::{DenialAggregator, PodIndex};
use nodeproof_bpfgen::Native;
use nodeproof_seccomp::lint::{loaded_program, LintOptions};
use nodeproof_trace::{Action, SummaryRow};
use serde_json::json;

/// Bytes allocated and not yet freed, by everything in this process.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const RUNS: usize = 3;
const PROFILES: usize = 100;
const CONTAINERS: usize = 2000;

fn runtime_default() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../profiles/runtime-default-x86_64.json"
    ))
    .expect("profiles/runtime-default-x86_64.json")
}

/// The RuntimeDefault profile, `mkdir` taken out of its allowed names in
/// version `v` > 0 (so denied, by its default action), made distinct per
/// profile and version by one more allowed name's argument value.
fn version_of(base: &serde_json::Value, profile: usize, v: usize) -> Vec<u8> {
    let mut p = base.clone();
    let rules = p["syscalls"].as_array_mut().unwrap();
    if v > 0 {
        for r in rules.iter_mut() {
            if let Some(names) = r["names"].as_array_mut() {
                names.retain(|n| n != "mkdir");
            }
        }
    }
    rules.push(json!({
        "names": ["personality"],
        "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": 0x1000 + profile * 16 + v, "op": "SCMP_CMP_EQ"}],
    }));
    serde_json::to_vec(&p).unwrap()
}

fn t(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
}

struct Figures {
    heap: isize,
    bounded_heap: isize,
    kept: usize,
    budget: usize,
    file: usize,
    instructions: usize,
    with: Duration,
    without: Duration,
}

fn run() -> Figures {
    let base: serde_json::Value = serde_json::from_slice(&runtime_default()).unwrap();
    let opts = LintOptions::default();
    // Compiled before counting: only what is kept is measured.
    let sources: Vec<Vec<(Vec<u8>, _)>> = (0..PROFILES)
        .map(|p| {
            (0..MAX_VERSIONS)
                .map(|v| {
                    let src = version_of(&base, p, v);
                    let prog = loaded_program(&src, &opts, &Native).map(|(_, p)| p);
                    (src, prog)
                })
                .collect()
        })
        .collect();
    let instructions = sources[0][1].1.as_ref().map_or(0, Vec::len);
    let before = LIVE.load(Ordering::Relaxed);
    // Unbounded in bytes: what 100 × 8 would take; then the agent's budget.
    let mut versions = ProfileVersions::with_limits(MAX_VERSIONS, usize::MAX);
    for (v, _) in (0..MAX_VERSIONS).enumerate() {
        for (p, list) in sources.iter().enumerate() {
            let (src, prog) = &list[v];
            let name = format!("profiles/p{p}.json");
            versions.observe(&name, src, None, t(100 * v as u64), || prog.clone());
        }
    }
    let heap = LIVE.load(Ordering::Relaxed) - before;
    let budget = versions.bytes();
    let file = versions.encode().len();
    drop(versions);
    let before = LIVE.load(Ordering::Relaxed);
    let mut bounded = ProfileVersions::default();
    for v in 0..MAX_VERSIONS {
        for (p, list) in sources.iter().enumerate() {
            let (src, prog) = &list[v];
            let name = format!("profiles/p{p}.json");
            bounded.observe(&name, src, None, t(100 * v as u64), || prog.clone());
        }
    }
    let bounded_heap = LIVE.load(Ordering::Relaxed) - before;
    let kept: usize = (0..PROFILES)
        .map(|p| bounded.versions(&format!("profiles/p{p}.json")).len())
        .sum();
    drop(sources);

    // Pods: CONTAINERS containers of profile p0, each started after its
    // latest version (the 8th: mkdir denied; the 7th before it denied it
    // too, so take the 1st → 2nd change: a profile of two versions).
    let mut two = ProfileVersions::default();
    for v in 0..2 {
        let src = version_of(&base, 0, v);
        two.observe("profiles/app.json", &src, None, t(100 * v as u64), || {
            loaded_program(&src, &opts, &Native).map(|(_, p)| p)
        });
    }
    let two = Arc::new(Mutex::new(two));
    let mut index = PodIndex::default();
    let ids: Vec<String> = (0..CONTAINERS).map(|i| format!("{i:064x}")).collect();
    for (i, id) in ids.iter().enumerate() {
        index.upsert(&serde_json::from_value(json!({
            "metadata": {"name": format!("app-{i}"), "namespace": "ml", "uid": format!("u{i}")},
            "spec": {"containers": [{"name": "app", "securityContext": {"seccompProfile":
                {"type": "Localhost", "localhostProfile": "profiles/app.json"}}}]},
            "status": {"containerStatuses": [{"name": "app", "containerID": format!("containerd://{id}"),
                "image": "i", "imageID": "", "ready": true, "restartCount": 1,
                "state": {"running": {"startedAt": "2027-01-15T08:10:00Z"}}}]}
        })).unwrap());
    }
    let rows: Vec<SummaryRow> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| SummaryRow {
            pid: 42,
            comm: "app".into(),
            syscall: "mkdir".into(),
            nr: 83,
            arch: "x86_64",
            action: Action::Errno,
            errno: 1,
            count: 3,
            cgroup_id: i as u64,
            cgroup: None,
            container_id: Some(id.clone()),
            container: None,
            pod_uid: Some(format!("u{i}")),
            pod: None,
            change: None,
        })
        .collect();
    let time = |agg: &mut DenialAggregator, attributed: bool| {
        let start = Instant::now();
        agg.observe(&rows, &index);
        let events = agg.due(t(1000));
        let took = start.elapsed();
        assert_eq!(events.len(), CONTAINERS);
        assert_eq!(
            events.iter().all(|e| e.change.is_some()),
            attributed,
            "{}",
            events[0].message
        );
        took / CONTAINERS as u32
    };
    let with = time(
        &mut DenialAggregator::new(Duration::from_secs(60)).with_versions(two),
        true,
    );
    let without = time(&mut DenialAggregator::new(Duration::from_secs(60)), false);
    Figures {
        heap,
        bounded_heap,
        kept,
        budget,
        file,
        instructions,
        with,
        without,
    }
}

fn main() {
    // `cargo test --benches` runs this with --test-ish flags: one quick run.
    let runs = if std::env::args().any(|a| a == "--bench") {
        RUNS
    } else {
        1
    };
    for i in 1..=runs {
        let f = run();
        println!(
            "run {i}: versions of {PROFILES} profiles × {MAX_VERSIONS} (RuntimeDefault, {} instructions each): heap {:.1} KiB unbounded (budget's count {:.1} KiB, state file {:.1} KiB); under the {} KiB budget {} versions kept, heap {:.1} KiB; per Event of a denial after a change: {:.1} µs attributed, {:.1} µs without versions ({CONTAINERS} Events)",
            f.instructions,
            f.heap as f64 / 1024.0,
            f.budget as f64 / 1024.0,
            f.file as f64 / 1024.0,
            MAX_BYTES / 1024,
            f.kept,
            f.bounded_heap as f64 / 1024.0,
            f.with.as_secs_f64() * 1e6,
            f.without.as_secs_f64() * 1e6,
        );
    }
}
