//! `seccomp.oci-runtime = auto` on a node whose CRI runtime runs crun: the
//! crun release is read from the binary's `--version`, here the real
//! binaries the oracles run (bookworm's crun 1.8, trixie's crun 1.21).

use nodeproof::judge::oci_runtime::{CrunRelease, OciRuntimeSetting, VERSION_TIMEOUT};
use nodeproof::judge::profiles;
use nodeproof::observe::oci_runtime::crun_version;
use nodeproof::observe::profiles::on_node;
use nodeproof_e2e::runtimes::{default_cache_dir, RuntimeBuild};
use nodeproof_seccomp::lint::Runtime;
use nodeproof_seccomp::oci_runtime::{CrunVersion, OciRuntime};
use nodeproof_testkit::{require, Need};

#[test]
fn crun_releases_are_read_from_the_real_binaries() {
    for (build, release) in [
        (RuntimeBuild::Crun1_8, CrunVersion::V1_8),
        (RuntimeBuild::Crun1_21, CrunVersion::V1_21),
    ] {
        let Some(_) = require(&build.needs()) else {
            continue;
        };
        let binary = build.binary(&default_cache_dir()).expect("the crun binary");
        let found =
            crun_version(&binary.to_string_lossy(), VERSION_TIMEOUT).expect("crun --version");
        assert_eq!(
            found,
            CrunRelease::Modelled(release),
            "{}",
            binary.display()
        );
    }
}

/// CRI-O with no configuration runs `crun` from PATH: on this machine that
/// is bookworm's crun 1.8, so `auto` predicts crun 1.8, not the 1.21 it
/// assumed before.
#[test]
fn auto_predicts_the_crun_on_the_node() {
    let Some(_) = require(&[Need::Tool("crun")]) else {
        return;
    };
    if std::path::Path::new("/etc/crio").exists() {
        eprintln!("skipped: /etc/crio configures CRI-O on this machine");
        return;
    }
    let on_path = crun_version("crun", VERSION_TIMEOUT).expect("crun --version");
    let auto = on_node(OciRuntimeSetting::Auto, Runtime::Crio);
    assert_eq!(auto.runtime, OciRuntime::Crun(on_path.modelled()));
    // bookworm's 1.8.1 is a modelled series: said as such, not as a warning.
    assert_eq!(
        auto.finding.reason,
        profiles::RuntimeReason::Detected.as_str(),
        "{}",
        auto.finding.message
    );
    // Naming crun in the config predicts the default modelled release, without running it.
    assert_eq!(
        on_node(OciRuntimeSetting::Crun, Runtime::Crio).runtime,
        OciRuntime::Crun(CrunVersion::V1_21)
    );
}
