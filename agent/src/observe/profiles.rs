//! The seccomp root observed: its files read (`nodeproof_seccomp::scan`)
//! and linted, in parallel, through the lint cache; the node's runtime and
//! the lint options it means.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodeproof_bpfgen::Native;
use nodeproof_findings::Finding;
use nodeproof_seccomp::containerd;
use nodeproof_seccomp::diagnostic::Code;
use nodeproof_seccomp::lint::{lint_source, LintOptions, ProfileReport, Runtime};
use nodeproof_seccomp::scan::{self, ProfileFile};

use super::oci_runtime;
use crate::judge::oci_runtime::OciRuntimeSetting;
use crate::judge::profiles::{self, RuntimeOnNode, SeccompConfig};
use crate::observe::lint_cache::LintCache;

/// What reading a profile a pod references found: the pods' judge's one
/// input from the node's disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileRead {
    /// No such file (a dangling symlink is a file that cannot be read).
    Missing,
    /// Not a file containerd would read, or not readable: the diagnostic,
    /// on one line.
    Unusable(String),
    Contents(Vec<u8>),
}

/// A profile a pod references, read as `profile lint` reads the root's
/// files (`scan`: FIFOs, symlink loops, links out of `root` and oversize
/// files refused): the agent's `pods::verdict::ReadProfile`.
pub fn read_reference(root: &Path, path: &Path) -> ProfileRead {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ProfileRead::Missing,
        _ => {}
    }
    match scan::read_entry(path, Some(root)).contents {
        Ok(bytes) => ProfileRead::Contents(bytes),
        Err(d) => ProfileRead::Unusable(format!("{}[{}]: {}", d.severity, d.code, d.message)),
    }
}

/// How profiles are judged on this node: the runtime (configured or
/// detected) and the noNewPrivileges mode of the `[seccomp]` section. The
/// one place the checks build [`LintOptions`]; the CLI's flags override it.
pub fn lint_options(config: &SeccompConfig) -> LintOptions {
    lint_setup(config).0
}

/// [`lint_options`] and the `oci-runtime` finding that says which runtime
/// (and release) they predict, and how it was chosen.
pub fn lint_setup(config: &SeccompConfig) -> (LintOptions, Finding) {
    let runtime = detect_runtime(config);
    let on_node = on_node(config.oci_runtime, runtime);
    (
        LintOptions {
            runtime,
            no_new_privileges: config.no_new_privileges,
            oci_runtime: on_node.runtime,
            ..LintOptions::default()
        },
        on_node.finding,
    )
}

/// The runtime whose decoder reads profiles: configured, else detected from
/// the runtime sockets on this node (CRI-O only when containerd is absent).
pub fn detect_runtime(config: &SeccompConfig) -> Runtime {
    match config.runtime.named() {
        Some(named) => named,
        None => {
            let present = |r: Runtime| r.sockets().iter().any(|p| Path::new(p).exists());
            let (crio, containerd) = (present(Runtime::Crio), present(Runtime::Containerd));
            if crio && !containerd {
                Runtime::Crio
            } else {
                Runtime::Containerd
            }
        }
    }
}

/// The modelled OCI runtime release `setting` means for the node's `cri`
/// runtime: [`modelled`] of the kind it names, except that a crun found by
/// `auto` is the release its `--version` names (the nearest modelled one
/// for another release, a warning; 1.21 when it cannot be told, a warning too).
pub fn on_node(setting: OciRuntimeSetting, cri: Runtime) -> RuntimeOnNode {
    profiles::judge_runtime(
        setting,
        cri,
        &oci_runtime::resolve(setting, cri),
        |binary| oci_runtime::crun_version(binary, crate::judge::oci_runtime::VERSION_TIMEOUT),
    )
}

/// Lint everything under the seccomp root.
pub fn lint_root(root: &Path, opts: &LintOptions) -> Vec<ProfileReport> {
    if !root.exists() {
        return Vec::new();
    }
    lint_files(scan::collect(&[PathBuf::from(root)]), opts)
}

/// [`lint_root`], one lint per edit: a file whose contents were linted in
/// this mode already is answered from `cache`; the others are linted (in
/// parallel) and kept there, and files gone from the root leave it.
pub fn lint_root_cached(root: &Path, opts: &LintOptions, cache: &LintCache) -> Vec<ProfileReport> {
    lint_root_cached_with(root, opts, cache, |_| {})
}

/// [`lint_root_cached`], handing the files read to `read` first (the
/// daemon's profile versions are fed from this one read of the root).
pub fn lint_root_cached_with(
    root: &Path,
    opts: &LintOptions,
    cache: &LintCache,
    read: impl FnOnce(&[ProfileFile]),
) -> Vec<ProfileReport> {
    let files = if root.exists() {
        scan::collect(&[PathBuf::from(root)])
    } else {
        Vec::new()
    };
    read(&files);
    cache.retain(&files.iter().map(|f| f.path.clone()).collect());
    let mut reports: Vec<Option<ProfileReport>> = files
        .iter()
        .map(|f| match &f.contents {
            Ok(bytes) => cache.cached(&f.path, &f.display_path(), bytes, opts),
            Err(_) => None,
        })
        .collect();
    let (missed, misses): (Vec<usize>, Vec<&ProfileFile>) = files
        .iter()
        .enumerate()
        .filter(|(i, _)| reports[*i].is_none())
        .unzip();
    let linted = lint_each(&misses, opts);
    let mut made = 0;
    for ((i, file), report) in missed.into_iter().zip(misses).zip(linted) {
        if let Ok(bytes) = &file.contents {
            cache.insert(&file.path, bytes, opts, Arc::new(report.clone()));
            made += 1;
        }
        reports[i] = Some(report);
    }
    cache.count_lints(made);
    reports.into_iter().flatten().collect()
}

/// Lint files in parallel (one thread per core); reports keep the input order.
pub fn lint_files(files: Vec<ProfileFile>, opts: &LintOptions) -> Vec<ProfileReport> {
    lint_each(&files.iter().collect::<Vec<_>>(), opts)
}

fn lint_each(files: &[&ProfileFile], opts: &LintOptions) -> Vec<ProfileReport> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len().max(1));
    let chunk = files.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || part.iter().map(|f| lint_file(f, opts)).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// One file's report. A file nodeproof could not read is `rejected` where
/// containerd cannot read it either, whoever reads (missing, a dangling
/// symlink, a symlink loop: a pod naming it fails CreateContainer), and
/// `unknown` otherwise (permissions, a FIFO, a link out of the root).
pub fn lint_file(f: &ProfileFile, opts: &LintOptions) -> ProfileReport {
    match &f.contents {
        Ok(bytes) => lint_source(&f.display_path(), bytes, opts, &Native),
        // Said, never judged: no pod should name it.
        Err(d) if d.code == Code::NotAProfile => {
            ProfileReport::not_a_profile(f.display_path(), d.clone())
        }
        Err(d) => {
            // A directory is no reference: `scan` walks into the ones it can
            // list, and one it cannot is no file a pod names.
            let reference = !f.path.is_dir();
            reference
                .then(|| containerd::read_failure_report(&f.path, opts))
                .flatten()
                .unwrap_or_else(|| ProfileReport::unreadable(f.display_path(), d.clone()))
        }
    }
}
