//! nodeproof's predicted outcome must equal what a real containerd 1.6 does
//! with a Localhost profile, driven through its CRI API as the kubelet drives
//! it (src/cri), in both noNewPrivileges modes (`allowPrivilegeEscalation`
//! false → `no_new_privs` true, and true → false): for the project's own
//! profiles, the broken variants of src/lintset.rs, the cases of
//! containerd's own reading below, and the shared corpus where present.
//!
//! Every profile also goes through the splice oracle (src/runc.rs: the bytes
//! put into config.json for `runc run`); where it and containerd disagree,
//! containerd is the truth, and the disagreements must be exactly the ones
//! listed in [`SPLICE_DIFFERENCES`] (docs/containerd-oracle.md explains each).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use nodeproof_bpfgen::Native;
use nodeproof_e2e::cri::api::security_profile::ProfileType;
use nodeproof_e2e::cri::api::SecurityProfile;
use nodeproof_e2e::cri::{self, ContainerdOracle, CriRun, Stage};
use nodeproof_e2e::lintset::{predict, variants};
use nodeproof_e2e::splice::{self, SpliceOracle, Verdict};
use nodeproof_seccomp::capability::CapabilitySet;
use nodeproof_seccomp::containerd::lint_localhost;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::lint::{LintOptions, Outcome, Runtime};
use nodeproof_testkit::{own_profiles_dir, profiles_in, require, Need};

/// Where the splice oracle and containerd disagree: (case, noNewPrivileges,
/// splice verdict, containerd verdict). containerd is right in each.
///
/// Nesting: containerd decodes the profile alone (Go's limit: 10000 levels
/// from its top), and writes back only what `LinuxSeccomp` keeps; the splice
/// puts the profile two levels down in config.json (`{"linux":{"seccomp":`),
/// so runc's decoder hits the limit two levels earlier.
///
/// Bounding set: the splice oracle's `runc spec` bundle keeps 3 capabilities
/// and containerd's CRI 14, so runc init drops CAP_FOWNER (with a `prctl`
/// the profile denies) under the first only; the prediction is given each
/// oracle's set.
const SPLICE_DIFFERENCES: &[(&str, bool, Verdict, Verdict)] = &[
    (
        "PR_CAPBSET_DROP of CAP_FOWNER denied",
        false,
        Verdict::StartFailed,
        Verdict::Accepted,
    ),
    (
        "nested 10000 deep",
        false,
        Verdict::Rejected,
        Verdict::Accepted,
    ),
    (
        "nested 10000 deep",
        true,
        Verdict::Rejected,
        Verdict::Accepted,
    ),
    (
        "nested 9999 deep",
        false,
        Verdict::Rejected,
        Verdict::Accepted,
    ),
    (
        "nested 9999 deep",
        true,
        Verdict::Rejected,
        Verdict::Accepted,
    ),
];

/// What one profile is: bytes written to a file for the reference, or a
/// path referenced as it is (containerd's own reading of odd files).
enum Input {
    Bytes(Vec<u8>),
    Path(PathBuf),
}

struct Case {
    name: String,
    input: Input,
}

/// One case in one mode through both oracles and the prediction.
struct Row {
    name: String,
    nnp: bool,
    containerd: CriRun,
    /// None for a path case: the splice oracle has no file to read.
    splice: Option<Verdict>,
    predicted: Outcome,
}

fn expected(v: Verdict) -> Outcome {
    match v {
        Verdict::Accepted => Outcome::Ok,
        Verdict::Rejected => Outcome::Rejected,
        Verdict::StartFailed => Outcome::StartFailed,
    }
}

fn predict_path(path: &Path, nnp: bool) -> (Outcome, String) {
    let opts = LintOptions {
        runtime: Runtime::Containerd,
        no_new_privileges: nnp,
        arch: Arch::native(),
        check_listener: true,
        ..Default::default()
    };
    let r = lint_localhost(path, &opts, &Native);
    let first = r.diagnostics.first().map_or_else(String::new, |d| {
        format!("{}[{}]: {}", d.severity, d.code, d.message)
    });
    (r.outcome, first)
}

/// A profile nested exactly `depth` levels deep (Go's decoder allows 10000):
/// the top object, then arrays under an unknown key that containerd drops.
fn nested(depth: usize) -> Vec<u8> {
    let arrays = depth - 1;
    format!(
        r#"{{"defaultAction":"SCMP_ACT_ALLOW","nesting":{}{}}}"#,
        "[".repeat(arrays),
        "]".repeat(arrays)
    )
    .into_bytes()
}

/// containerd's own reading of the file (contrib/seccomp `WithProfile`:
/// `os.ReadFile`, then `json.Unmarshal` of the profile alone).
fn containerd_cases(dir: &Path) -> Vec<Case> {
    let allow = br#"{"defaultAction":"SCMP_ACT_ALLOW"}"#;
    let good = dir.join("good.json");
    std::fs::write(&good, allow).unwrap();
    std::fs::create_dir_all(dir.join("a-directory.json")).unwrap();
    let link = |name: &str, to: &str| {
        let p = dir.join(name);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(to, &p).unwrap();
        p
    };
    let bytes = |name: &str, b: Vec<u8>| Case {
        name: name.into(),
        input: Input::Bytes(b),
    };
    let path = |name: &str, p: PathBuf| Case {
        name: name.into(),
        input: Input::Path(p),
    };
    vec![
        bytes("empty file", Vec::new()),
        bytes("whitespace only", b" \n\t\n".to_vec()),
        bytes("trailing newline", [&allow[..], b"\n"].concat()),
        bytes("trailing text", [&allow[..], b" x"].concat()),
        bytes("two objects", [&allow[..], &allow[..]].concat()),
        bytes("trailing comma", [&allow[..], b","].concat()),
        bytes("nested 9999 deep", nested(9999)),
        bytes("nested 10000 deep", nested(10000)),
        bytes("nested 10001 deep", nested(10001)),
        path("missing file", dir.join("no-such-profile.json")),
        path("a directory", dir.join("a-directory.json")),
        path("symlink to a profile", link("link.json", "good.json")),
        path(
            "dangling symlink",
            link("dangling.json", "no-such-target.json"),
        ),
        path("symlink loop", {
            link("loop-b.json", "loop-a.json");
            link("loop-a.json", "loop-b.json")
        }),
    ]
}

/// Each case in both modes through containerd, the splice oracle and the
/// prediction: the rows, and the cases where nodeproof differs from containerd.
fn judge(
    cri: &ContainerdOracle,
    splice: &SpliceOracle,
    cases: Vec<Case>,
) -> (Vec<Row>, Vec<String>) {
    let jobs: Vec<(std::sync::Arc<Case>, bool)> = cases
        .into_iter()
        .map(std::sync::Arc::new)
        .flat_map(|c| [(c.clone(), true), (c, false)])
        .collect();
    let rows = Mutex::new(Vec::new());
    let wrong = nodeproof_e2e::mismatches(jobs, |(case, nnp)| {
        let (containerd, splice, (predicted, why)) = match &case.input {
            Input::Bytes(b) => (
                cri.run(b, nnp, &["/bin/true"]),
                Some(splice.run(b, nnp, &["/bin/true"]).verdict),
                predict(b, nnp, CapabilitySet::CONTAINERD_DEFAULT),
            ),
            Input::Path(p) => (
                cri.run_localhost(&p.to_string_lossy(), nnp, &["/bin/true"]),
                None,
                predict_path(p, nnp),
            ),
        };
        let message = (predicted != expected(containerd.verdict)).then(|| {
            format!(
                "{} nnp={nnp}: containerd {} ({:?}, exit {:?}: {}), nodeproof {predicted:?} ({why})",
                case.name,
                containerd.verdict,
                containerd.stage,
                containerd.exit_code,
                containerd.detail.trim(),
            )
        });
        rows.lock().unwrap().push(Row {
            name: case.name.clone(),
            nnp,
            containerd,
            splice,
            predicted,
        });
        message
    });
    (rows.into_inner().unwrap(), wrong)
}

/// The splice oracle's disagreements with containerd, sorted.
fn splice_differences(rows: &[Row]) -> Vec<(String, bool, Verdict, Verdict)> {
    let mut d: Vec<_> = rows
        .iter()
        .filter_map(|r| {
            let s = r.splice?;
            (s != r.containerd.verdict).then(|| (r.name.clone(), r.nnp, s, r.containerd.verdict))
        })
        .collect();
    d.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    d
}

fn report(what: &str, rows: &[Row], started: Instant) {
    let agree = rows
        .iter()
        .filter(|r| r.predicted == expected(r.containerd.verdict))
        .count();
    let spliced: Vec<&Row> = rows.iter().filter(|r| r.splice.is_some()).collect();
    let splice_agree = spliced
        .iter()
        .filter(|r| r.splice == Some(r.containerd.verdict))
        .count();
    let by = |v: Verdict| rows.iter().filter(|r| r.containerd.verdict == v).count();
    let hung = rows
        .iter()
        .filter(|r| matches!(r.containerd.stage, Stage::StartHung | Stage::StillRunning))
        .count();
    eprintln!(
        "{what}: nodeproof = containerd in {agree} of {} runs; splice oracle = containerd in {splice_agree} of {}; \
         containerd: {} accepted, {} rejected, {} start-failed ({hung} of them hangs); {:.1} s",
        rows.len(),
        spliced.len(),
        by(Verdict::Accepted),
        by(Verdict::Rejected),
        by(Verdict::StartFailed),
        started.elapsed().as_secs_f64(),
    );
    for (name, nnp, s, c) in splice_differences(rows) {
        eprintln!("  splice oracle differs: {name} nnp={nnp}: splice {s}, containerd {c}");
    }
}

fn read_all(files: &[PathBuf]) -> Vec<Case> {
    files
        .iter()
        .map(|f| Case {
            name: f.display().to_string(),
            input: Input::Bytes(std::fs::read(f).unwrap()),
        })
        .collect()
}

/// profiles/, the broken variants and containerd's own cases, through
/// containerd over CRI in both modes. Needs no corpus.
#[test]
fn own_profiles_match_containerd() {
    let Some(_) = require(&[cri::ORACLE, splice::ORACLE].concat()) else {
        return;
    };
    let started = Instant::now();
    let cri = ContainerdOracle::shared().expect("containerd oracle");
    let splice = SpliceOracle::runc(splice::default_oracle_dir())
        .expect("runc oracle")
        .with_timeout(cri::RUN_TIMEOUT.as_secs() as u32);
    let scratch = tempfile::tempdir().unwrap();
    let mut cases = read_all(&profiles_in(&own_profiles_dir()));
    assert!(
        !cases.is_empty(),
        "no profiles under {}",
        own_profiles_dir().display()
    );
    cases.extend(variants().into_iter().map(|(name, b)| Case {
        name: name.into(),
        input: Input::Bytes(b),
    }));
    cases.extend(containerd_cases(scratch.path()));
    let (rows, wrong) = judge(&cri, &splice, cases);
    report(&cri.version, &rows, started);
    assert!(
        wrong.is_empty(),
        "{} of {} differ from containerd:\n{}",
        wrong.len(),
        rows.len(),
        wrong.join("\n")
    );
    let documented: Vec<(String, bool, Verdict, Verdict)> = SPLICE_DIFFERENCES
        .iter()
        .map(|&(n, nnp, s, c)| (n.to_string(), nnp, s, c))
        .collect();
    assert_eq!(
        splice_differences(&rows),
        documented,
        "the splice oracle's disagreements with containerd changed: update SPLICE_DIFFERENCES and docs/containerd-oracle.md"
    );
}

/// The shared corpus through containerd over CRI in both modes.
#[test]
fn corpus_matches_containerd() {
    let Some(granted) = require(&[cri::ORACLE, splice::ORACLE, &[Need::Corpus]].concat()) else {
        return;
    };
    let started = Instant::now();
    let cri = ContainerdOracle::shared().expect("containerd oracle");
    let splice = SpliceOracle::runc(splice::default_oracle_dir())
        .expect("runc oracle")
        .with_timeout(cri::RUN_TIMEOUT.as_secs() as u32);
    let (rows, wrong) = judge(&cri, &splice, read_all(&profiles_in(granted.corpus())));
    report("corpus", &rows, started);
    assert!(rows.len() >= 66, "{}", rows.len());
    assert!(
        wrong.is_empty(),
        "{} of {} differ from containerd:\n{}",
        wrong.len(),
        rows.len(),
        wrong.join("\n")
    );
    assert_eq!(
        splice_differences(&rows),
        Vec::new(),
        "the splice oracle disagrees with containerd on the corpus"
    );
}

/// containerd 1.6's rules for the CRI `seccomp` field itself
/// (`generateSeccompSpecOpts`), which decide whether a file is read at all:
/// unset means no filter (`unset_seccomp_profile` is empty by default),
/// `RuntimeDefault` is containerd's built-in profile, a `localhost/` prefix
/// on the reference is trimmed, and a reference with any other type is
/// refused. The kubelet only ever sends `Localhost` with an absolute path
/// under its seccomp root, which is what nodeproof judges; these pin the
/// rest as the note (docs/containerd-oracle.md) states it.
#[test]
fn containerd_profile_type_rules() {
    let Some(_) = require(cri::ORACLE) else {
        return;
    };
    let cri = ContainerdOracle::shared().expect("containerd oracle");
    let scratch = tempfile::tempdir().unwrap();
    // Kills every execve: a container under this profile never runs /bin/true.
    let kill_execve = scratch.path().join("kill-execve.json");
    std::fs::write(
        &kill_execve,
        br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["execve"],"action":"SCMP_ACT_KILL_PROCESS"}]}"#,
    )
    .unwrap();
    let kill_execve = kill_execve.to_string_lossy().into_owned();
    let profile = |t: ProfileType, r: &str| {
        Some(SecurityProfile {
            profile_type: t as i32,
            localhost_ref: r.to_string(),
        })
    };
    let cases = [
        ("unset", None, Verdict::Accepted),
        (
            "RuntimeDefault",
            profile(ProfileType::RuntimeDefault, ""),
            Verdict::Accepted,
        ),
        (
            "Unconfined",
            profile(ProfileType::Unconfined, ""),
            Verdict::Accepted,
        ),
        (
            "Localhost",
            profile(ProfileType::Localhost, &kill_execve),
            Verdict::StartFailed,
        ),
        (
            "Localhost with a localhost/ prefix",
            profile(ProfileType::Localhost, &format!("localhost/{kill_execve}")),
            Verdict::StartFailed,
        ),
        (
            "Localhost without a path",
            profile(ProfileType::Localhost, ""),
            Verdict::Rejected,
        ),
        (
            "RuntimeDefault with a path",
            profile(ProfileType::RuntimeDefault, &kill_execve),
            Verdict::Rejected,
        ),
    ];
    let mut wrong = Vec::new();
    for (name, seccomp, want) in cases {
        for nnp in [true, false] {
            let run = cri.run_with(seccomp.clone(), nnp, &["/bin/true"]);
            if run.verdict != want {
                wrong.push(format!("{name} nnp={nnp}: want {want}, containerd {run:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
