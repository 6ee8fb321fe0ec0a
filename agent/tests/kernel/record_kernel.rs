//! `nodeproof record` on this kernel: the real recorder program, children in
//! real cgroups making known syscalls (x86_64 and, through `int 0x80`,
//! i386), and `record --pod` end to end against the test API server.
//! Needs CAP_BPF + CAP_PERFMON (or root) and a writable cgroup2 hierarchy.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use nodeproof::record as rec;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::LintOptions;
use nodeproof_seccomp::recording::{RecordedContainer, Recording};
use nodeproof_trace::record::{RecArch, RecordAttach, Recorder, RecorderConfig};
use support::apiserver::{Identity, TestApiServer};
use support::cgroup::{run_in, traceable_kubepods, CgroupDir};

/// A profile whose rules compare personality's and getpriority's arguments.
const PROFILE: &[u8] = br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
    {"names":["personality"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":4660,"op":"SCMP_CMP_EQ"}]},
    {"names":["getpriority"],"action":"SCMP_ACT_ERRNO","args":[{"index":1,"value":7,"op":"SCMP_CMP_EQ"}]}]}"#;

const X86_PERSONALITY: u32 = 135;
const X86_GETPPID: u32 = 110;
const X86_MKDIR: u32 = 83;
const X86_SYSINFO: u32 = 99;
const I386_GETPID: u32 = 20;
const I386_PERSONALITY: u32 = 136;
const X32_GETPID: u32 = 0x4000_0000 | 39;

/// An i386 call from this 64-bit process: `int 0x80` enters the compat
/// path (TS_COMPAT), with the i386 numbers and registers.
fn int80(nr: u64, ebx: u64) -> u64 {
    let mut ax = nr;
    // SAFETY: a raw syscall with no pointer arguments; rbx is saved around it (LLVM reserves it).
    unsafe {
        std::arch::asm!("xchg {b}, rbx", "int 0x80", "xchg {b}, rbx", b = inout(reg) ebx => _, inout("rax") ax);
    }
    ax
}

/// [`run_in`] with `work` on CPU 0 (the recorder's per-CPU cache of the last
/// value is then always the same one). Pinning is the child's first call in
/// the cgroup: `sched_setaffinity` is recorded.
fn in_cgroup(procs: &std::path::Path, work: impl FnOnce()) {
    run_in(procs, || {
        // SAFETY: a CPU set for the calling thread, in the forked child.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
        }
        work();
    });
}

/// The child's known calls: personality twice, a failing mkdir, getppid,
/// i386 getpid and personality, and x32 getpid.
fn known_calls() {
    unsafe {
        libc::syscall(libc::SYS_personality, 0xffff_ffffu64);
        libc::syscall(libc::SYS_personality, 8u64);
        libc::syscall(libc::SYS_mkdir, c"/nonexistent-nodeproof/x".as_ptr(), 0o700);
        libc::syscall(libc::SYS_getppid);
    }
    int80(I386_GETPID as u64, 0);
    int80(I386_PERSONALITY as u64, 0xffff_ffff);
    // An x32 call: the `syscall` instruction with bit 30 in the number. The
    // kernel may refuse it (ENOSYS without x32 support); it enters either way.
    unsafe { libc::syscall(X32_GETPID as libc::c_long) };
}

fn syscalls(c: &RecordedContainer, arch: Arch) -> BTreeSet<u32> {
    c.arches
        .iter()
        .filter(|a| a.arch == arch)
        .flat_map(|a| a.syscalls.iter().map(|s| s.nr))
        .collect()
}

fn values(c: &RecordedContainer, arch: Arch, nr: u32, index: u8) -> Option<(Vec<u64>, bool)> {
    c.arches
        .iter()
        .find(|a| a.arch == arch)?
        .syscalls
        .iter()
        .find(|s| s.nr == nr)?
        .args
        .iter()
        .find(|g| g.index == index)
        .map(|g| (g.values.clone(), g.complete))
}

#[test]
fn a_recorded_cgroup_has_the_calls_its_child_made_and_no_other() {
    let Some(cg) = traceable_kubepods("7c0ffee0-1234-4abc-9def-00000000ec01", &"ec".repeat(32))
    else {
        return;
    };
    let other = CgroupDir::create_at("unified", "other").expect("second test cgroup");
    // Both attach points (this kernel has both): the classic tracepoint's
    // record carries the arguments, tp_btf's pt_regs are read by convention.
    for attach in [RecordAttach::TpBtf, RecordAttach::Tracepoint] {
        let mut recorder = Recorder::start(&RecorderConfig {
            attach: Some(attach),
            ..RecorderConfig::default()
        })
        .expect("recorder");
        assert_eq!(recorder.attach_point(), attach);
        rec::set_watch(
            &mut recorder,
            &rec::watch_of(PROFILE, &LintOptions::default()),
        )
        .unwrap();
        let slot = recorder.new_slot().unwrap();
        recorder.add_cgroup(slot, cg.id).unwrap();

        in_cgroup(&cg.procs, known_calls);
        // Another cgroup's process: none of its calls is recorded.
        in_cgroup(&other.procs, || unsafe {
            let mut info: libc::sysinfo = std::mem::zeroed();
            libc::sysinfo(&mut info);
            libc::syscall(libc::SYS_personality, 0x55u64);
        });
        // This process (the test's cgroup) neither.
        unsafe { libc::syscall(libc::SYS_personality, 0xffff_ffffu64) };

        let c = rec::to_container("leaf".into(), None, None, recorder.read(slot).unwrap());
        // What the child made after joining: close (of cgroup.procs, whose
        // write entered before the move), sched_setaffinity, its calls, exit_group.
        assert_eq!(
            syscalls(&c, Arch::X86_64),
            [3, X86_MKDIR, X86_GETPPID, X86_PERSONALITY, 203, 231].into(),
            "{attach}"
        );
        assert!(!syscalls(&c, Arch::X86_64).contains(&X86_SYSINFO));
        assert_eq!(
            values(&c, Arch::X86_64, X86_PERSONALITY, 0),
            Some((vec![8, 0xffff_ffff], true)),
            "{attach}"
        );
        assert_eq!(
            syscalls(&c, Arch::X86),
            [I386_GETPID, I386_PERSONALITY].into(),
            "{attach}"
        );
        assert_eq!(
            values(&c, Arch::X86, I386_PERSONALITY, 0),
            Some((vec![0xffff_ffff], true)),
            "{attach}"
        );
        assert_eq!(syscalls(&c, Arch::X32), [X32_GETPID].into(), "{attach}");
        let names: Vec<_> = c.arches[0]
            .syscalls
            .iter()
            .filter_map(|s| s.name.as_deref())
            .collect();
        assert!(
            names.contains(&"personality") && names.contains(&"mkdir"),
            "{names:?}"
        );
        assert_eq!(c.lost, 0);

        // A freed slot records nothing more, and a new one starts empty
        // (its values too: the per-CPU last-value cache is forgotten).
        recorder.free_slot(slot).unwrap();
        in_cgroup(&cg.procs, known_calls);
        let again = recorder.new_slot().unwrap();
        assert_eq!(again, slot);
        assert_eq!(recorder.read(again).unwrap(), Default::default());
        recorder.add_cgroup(again, cg.id).unwrap();
        // The first run's last watched call, alone: CPU 0 still has it cached.
        in_cgroup(&cg.procs, || {
            int80(I386_PERSONALITY as u64, 0xffff_ffff);
        });
        let c = rec::to_container("leaf".into(), None, None, recorder.read(again).unwrap());
        assert_eq!(
            values(&c, Arch::X86, I386_PERSONALITY, 0),
            Some((vec![0xffff_ffff], true)),
            "{attach}: a value kept before the slot was reused is kept again"
        );
    }
}

#[test]
fn a_full_value_set_counts_lost_and_a_capped_argument_is_incomplete() {
    let Some(cg) = traceable_kubepods("7c0ffee0-1234-4abc-9def-00000000ec02", &"ed".repeat(32))
    else {
        return;
    };
    // Room for 4 values in all, 3 per argument.
    let mut recorder = Recorder::start(&RecorderConfig {
        value_cap: 3,
        max_values: 4,
        attach: None,
    })
    .expect("recorder");
    const GETPRIORITY: u32 = 140;
    const GETPGID: u32 = 121;
    recorder.watch(RecArch::X86_64, GETPRIORITY, 0b10).unwrap();
    recorder.watch(RecArch::X86_64, GETPGID, 0b1).unwrap();
    let slot = recorder.new_slot().unwrap();
    recorder.add_cgroup(slot, cg.id).unwrap();
    in_cgroup(&cg.procs, || unsafe {
        // No such processes: each call fails with ESRCH, and enters.
        for who in 0..10u64 {
            libc::syscall(libc::SYS_getpriority, 0u64, 4_000_000 + who);
        }
        for who in 0..10u64 {
            libc::syscall(libc::SYS_getpgid, 4_000_000 + who);
        }
    });
    let c = rec::to_container("leaf".into(), None, None, recorder.read(slot).unwrap());
    // getpriority's second argument: the first three values made, then
    // the cap: incomplete.
    let (prio, complete) = values(&c, Arch::X86_64, GETPRIORITY, 1).expect("getpriority recorded");
    assert_eq!(prio, vec![4_000_000, 4_000_001, 4_000_002]);
    assert!(!complete);
    // getpgid: the one value left room for, then the set was full.
    let (pgid, complete) = values(&c, Arch::X86_64, GETPGID, 0).expect("getpgid recorded");
    assert!(pgid.len() <= 1, "{pgid:?}");
    assert!(!complete);
    assert!(c.lost >= 9, "lost {}", c.lost);
    assert!(syscalls(&c, Arch::X86_64).contains(&GETPGID));
}

#[test]
fn record_pod_writes_a_recording_of_its_container() {
    let uid = "7c0ffee0-1234-4abc-9def-00000000ec03";
    let id = "ee".repeat(32);
    let Some(cg) = traceable_kubepods(uid, &id) else {
        return;
    };
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.put(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "rec-0", "namespace": "ml", "uid": uid},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "securityContext": {
                "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/rec.json"}}}]},
            "status": {"containerStatuses": [{"name": "app", "containerID": format!("containerd://{id}"),
                "image": "app", "imageID": "", "ready": true, "restartCount": 0}]}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("seccomp");
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::write(root.join("profiles/rec.json"), PROFILE).unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let out = dir.path().join("rec.json");
    let nodeproof = |pod: &str, duration: &str| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_nodeproof"));
        c.args(["--seccomp-root", root.to_str().unwrap(), "record"])
            .args(["--pod", pod, "--duration", duration])
            .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(["-o", out.to_str().unwrap()])
            .env("NODEPROOF_LOG", "off")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };

    let missing = nodeproof("ml/none", "1s").output().unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim(),
        "nodeproof: pod ml/none not found"
    );

    let mut record = nodeproof("ml/rec-0", "4s").spawn().unwrap();
    // When the recorder is attached is not said: call until it ends.
    while record.try_wait().unwrap().is_none() {
        in_cgroup(&cg.procs, known_calls);
        std::thread::sleep(Duration::from_millis(200));
    }
    let done = record.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{stderr}");
    let r = Recording::from_json(&std::fs::read(&out).unwrap()).expect("a recording");
    assert_eq!(r.subject(), "ml/rec-0");
    assert_eq!(r.pod.as_ref().unwrap().uid.as_deref(), Some(uid));
    assert_eq!(r.node.as_deref(), Some("n1"));
    assert_eq!(r.containers.len(), 1, "{r:?}");
    let c = &r.containers[0];
    assert_eq!(c.name, "app");
    assert_eq!(c.id.as_deref(), Some(id.as_str()));
    assert_eq!(c.profile.as_deref(), Some("localhost/profiles/rec.json"));
    assert!(
        syscalls(c, Arch::X86_64).is_superset(&[X86_MKDIR, X86_GETPPID, X86_PERSONALITY].into())
    );
    assert_eq!(
        values(c, Arch::X86_64, X86_PERSONALITY, 0),
        Some((vec![8, 0xffff_ffff], true))
    );
    // The profile compares no argument of mkdir: none kept.
    assert!(values(c, Arch::X86_64, X86_MKDIR, 0).is_none());
    assert!(stderr.contains("recording pod ml/rec-0"), "{stderr}");
}

/// A container that restarts mid-recording: a new id in the pod's status and
/// a new cgroup, found by the rescan; both ids' calls under the one container.
#[test]
fn record_pod_follows_a_restarted_container() {
    let uid = "7c0ffee0-1234-4abc-9def-00000000ec04";
    let (first, second) = ("e1".repeat(32), "e2".repeat(32));
    let Some(cg1) = traceable_kubepods(uid, &first) else {
        return;
    };
    let pod = |id: &str, restarts: u32| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "rec-1", "namespace": "ml", "uid": uid},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "securityContext": {
                "seccompProfile": {"type": "RuntimeDefault"}}}]},
            "status": {"containerStatuses": [{"name": "app", "containerID": format!("containerd://{id}"),
                "image": "app", "imageID": "", "ready": true, "restartCount": restarts}]}})
    };
    let server = TestApiServer::start();
    server.add_token("node-n1", Identity::Node("n1".into()));
    server.put("pods", pod(&first, 0));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path(), "node-n1");
    let out = dir.path().join("rec.json");
    let mut record = std::process::Command::new(env!("CARGO_BIN_EXE_nodeproof"))
        .args(["record", "--pod", "ml/rec-1", "--duration", "6s"])
        .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
        .args(["-o", out.to_str().unwrap()])
        .env("NODEPROOF_LOG", "off")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        in_cgroup(&cg1.procs, known_calls);
        std::thread::sleep(Duration::from_millis(200));
    }
    // The restart: the old cgroup's process is gone, the new one makes other calls.
    let cg2 = CgroupDir::create_at("unified", &format!("kubepods/burstable/pod{uid}/{second}"))
        .expect("the restarted container's cgroup");
    server.put("pods", pod(&second, 1));
    while record.try_wait().unwrap().is_none() {
        in_cgroup(&cg2.procs, || unsafe {
            let mut info: libc::sysinfo = std::mem::zeroed();
            libc::sysinfo(&mut info);
        });
        std::thread::sleep(Duration::from_millis(200));
    }
    let done = record.wait_with_output().unwrap();
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let r = Recording::from_json(&std::fs::read(&out).unwrap()).expect("a recording");
    assert_eq!(r.containers.len(), 1, "{r:?}");
    let c = &r.containers[0];
    assert_eq!(c.id.as_deref(), Some(second.as_str()));
    assert_eq!(c.profile.as_deref(), Some("runtime/default"));
    let calls = syscalls(c, Arch::X86_64);
    // Before the restart and after it.
    assert!(
        calls.is_superset(&[X86_MKDIR, X86_GETPPID, X86_SYSINFO].into()),
        "{calls:?}"
    );
    // runtime/default compares personality's first argument: its values are kept.
    assert_eq!(
        values(c, Arch::X86_64, X86_PERSONALITY, 0),
        Some((vec![8, 0xffff_ffff], true))
    );
}
