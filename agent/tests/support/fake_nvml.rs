//! Builds the fake `libnvidia-ml.so.1` (tests/fake-nvml/fake_nvml.c) once,
//! and lays out one directory per scenario: a private copy of the library
//! (its own dlopen handle and state), its `scenario` file, and a fake sysfs
//! with one NVIDIA 3D controller per GPU at bus 0x18 + i, as the fake NVML
//! reports them.
//!
//! Declared once per test binary, at its root (`mod fake_nvml_support;`), and
//! used from there: the libraries are built once per process, to a name of
//! the process's own, and a second copy of this module in the same binary
//! would build them again to the same path while a test loads it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn fake_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build("fake-nvml/fake_nvml.c", "libnvidia-ml.so.1"))
}

/// Builds the fake `libcuda.so.1` (tests/fake-cuda/fake_cuda.c) once.
pub fn fake_cuda_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build("fake-cuda/fake_cuda.c", "libcuda.so.1"))
}

fn build(source: &str, soname: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = manifest.join("tests").join(source);
    let out = nodeproof_testkit::target_dir().join("fake-nvml");
    std::fs::create_dir_all(&out).unwrap();
    // Unique per process so parallel test binaries never see a half-written file.
    let lib = out.join(format!("{soname}.{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&lib)
        .arg(&src)
        .args(["-ldl", "-lpthread"])
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "{cc} failed to build {source}");
    lib
}

pub struct Scenario {
    pub dir: tempfile::TempDir,
}

impl Scenario {
    /// A scenario with `pci_gpus` NVIDIA devices in its fake sysfs.
    pub fn new(text: &str, pci_gpus: u32) -> Scenario {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(fake_library(), dir.path().join("libnvidia-ml.so.1")).unwrap();
        for i in 0..pci_gpus {
            let dev = dir
                .path()
                .join(format!("sys/bus/pci/devices/0000:{:02x}:00.0", 0x18 + i));
            std::fs::create_dir_all(&dev).unwrap();
            std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
            std::fs::write(dev.join("class"), "0x030200\n").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("sys/bus/pci/devices")).unwrap();
        let s = Scenario { dir };
        s.set(text);
        s
    }

    /// Rewrites the scenario; the fake re-reads it at the next snapshot.
    pub fn set(&self, text: &str) {
        std::fs::write(self.dir.path().join("scenario"), text).unwrap();
    }

    pub fn library(&self) -> PathBuf {
        self.dir.path().join("libnvidia-ml.so.1")
    }

    pub fn sysfs(&self) -> PathBuf {
        self.dir.path().join("sys")
    }

    /// Puts a private copy of the fake libcuda beside the fake NVML (once)
    /// and writes its `cuda-scenario`, re-read at each CUDA check.
    pub fn set_cuda(&self, text: &str) -> PathBuf {
        let lib = self.dir.path().join("libcuda.so.1");
        if !lib.exists() {
            std::fs::copy(fake_cuda_library(), &lib).unwrap();
            // The fake logs its calls only into an existing file.
            std::fs::write(self.dir.path().join("cuda-calls"), "").unwrap();
        }
        std::fs::write(self.dir.path().join("cuda-scenario"), text).unwrap();
        lib
    }

    /// What the fake libcuda logged: load, cuInit, contexts, allocations, unload.
    pub fn cuda_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("cuda-calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}
