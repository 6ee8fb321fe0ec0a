//! Boots a Debian kernel under `qemu-system-x86_64 -accel tcg` with a small
//! initramfs and runs one shell script there: the tracer's kernel matrix.
//!
//! - [`Suite::kernel`] fetches the suite's cloud kernel package with
//!   `apt-get download` through a private apt configuration (the machine's
//!   own sources are not touched) and caches its `vmlinuz` under a directory
//!   (the tests use `target/kernels/`). Nothing comes from outside Debian's packages.
//! - [`Initramfs`] collects busybox-static, binaries with the shared libraries
//!   `ldd` lists (paths kept, the dynamic loader included) and any other file,
//!   and packs them with `cpio -H newc | gzip`.
//! - [`boot`] runs the kernel with a serial console and returns the script's
//!   output and exit status, under a hard timeout (KVM does not work on these
//!   machines, so TCG: about a minute to the script).

use nodeproof_testkit::BUSYBOX;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodeproof_debpkg::PrivateApt;

/// The executables the harness runs on the host.
pub const TOOLS: &[&str] = &[
    "qemu-system-x86_64",
    "cpio",
    "gzip",
    "apt-get",
    "dpkg-deb",
    "ldd",
    "strip",
];

/// The line the guest's init prints after the script, with its exit status.
const EXIT_MARK: &str = "NODEPROOF_VM_EXIT=";

#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("fetching the kernel package")]
    Deb(#[from] nodeproof_debpkg::DebError),
    #[error("running {tool}")]
    Spawn {
        tool: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{tool} failed ({status}): {stderr}")]
    Tool {
        tool: &'static str,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("suite {suite}: {what}")]
    Kernel { suite: &'static str, what: String },
    #[error("the guest ran past {timeout:?}; its output so far:\n{output}")]
    Timeout { timeout: Duration, output: String },
    #[error("the guest stopped without the script's exit status; its output:\n{output}")]
    NoExit { output: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VmError + '_ {
    move |source| VmError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs a host tool to completion; its stdout on success.
fn run(tool: &'static str, cmd: &mut Command) -> Result<Vec<u8>, VmError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| VmError::Spawn { tool, source })?;
    if !out.status.success() {
        return Err(VmError::Tool {
            tool,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(out.stdout)
}

/// A Debian suite whose stock cloud kernel the matrix boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// Debian 11, Linux 5.10 (also Amazon Linux 2's series).
    Bullseye,
    /// Debian 12, Linux 6.1.
    Bookworm,
    /// Debian 13, Linux 6.12.
    Trixie,
}

impl Suite {
    pub const ALL: [Suite; 3] = [Suite::Bullseye, Suite::Bookworm, Suite::Trixie];

    pub fn name(self) -> &'static str {
        match self {
            Self::Bullseye => "bullseye",
            Self::Bookworm => "bookworm",
            Self::Trixie => "trixie",
        }
    }

    /// The kernel series the suite ships.
    pub fn series(self) -> &'static str {
        match self {
            Self::Bullseye => "5.10",
            Self::Bookworm => "6.1",
            Self::Trixie => "6.12",
        }
    }

    /// The suite's cloud kernel (the flavour that boots quickest under TCG):
    /// `vmlinuz` cached in `cache/<suite>/`, fetched with apt on first use.
    pub fn kernel(self, cache: &Path) -> Result<PathBuf, VmError> {
        let dir = cache.join(self.name());
        let vmlinuz = dir.join("vmlinuz");
        if vmlinuz.exists() {
            return Ok(vmlinuz);
        }
        let apt = PrivateApt::new(&dir, self.name())?;
        apt.update()?;
        // The metapackage depends on exactly one versioned image package.
        let depends = apt.cache(&["depends", "linux-image-cloud-amd64"])?;
        let package = depends
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .find(|p| p.starts_with("linux-image-") && !p.ends_with("-unsigned"))
            .ok_or_else(|| VmError::Kernel {
                suite: self.name(),
                what: format!("linux-image-cloud-amd64 names no image package:\n{depends}"),
            })?
            .to_string();
        let deb_dir = dir.join("deb");
        let deb = apt.download(&package, &deb_dir)?;
        // Only boot/vmlinuz-*: the cloud flavour has what the tests use built in
        // (8250 serial, BPF, BTF, tracefs, cgroup2), so no modules are unpacked.
        let extract = dir.join("extract");
        fs::create_dir_all(&extract).map_err(io(&extract))?;
        let script = format!(
            "dpkg-deb --fsys-tarfile '{}' | tar -x -C '{}' --wildcards './boot/vmlinuz-*'",
            deb.display(),
            extract.display()
        );
        run("dpkg-deb", Command::new("sh").args(["-c", &script]))?;
        let found = only_file(&extract.join("boot"), "")?;
        fs::rename(&found, &vmlinuz).map_err(io(&vmlinuz))?;
        // Keep the cache small: the kernel alone stays.
        for d in [&deb_dir, &extract, &dir.join("apt")] {
            let _ = fs::remove_dir_all(d);
        }
        Ok(vmlinuz)
    }
}

fn only_file(dir: &Path, suffix: &str) -> Result<PathBuf, VmError> {
    let mut found = Vec::new();
    for e in fs::read_dir(dir).map_err(io(dir))? {
        let p = e.map_err(io(dir))?.path();
        if p.is_file() && p.to_string_lossy().ends_with(suffix) {
            found.push(p);
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(VmError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::other(format!("expected one *{suffix} file, found {found:?}")),
        }),
    }
}

/// The guest's root filesystem, built in a directory and packed with cpio.
pub struct Initramfs {
    root: PathBuf,
}

impl Initramfs {
    /// A fresh tree in `dir` (emptied first) with busybox (Debian's
    /// busybox-static, the one `Need::Busybox` checks) and its applet links.
    pub fn new(dir: &Path) -> Result<Self, VmError> {
        let _ = fs::remove_dir_all(dir);
        for sub in ["bin", "sbin", "proc", "sys", "dev", "tmp", "run", "etc"] {
            let d = dir.join(sub);
            fs::create_dir_all(&d).map_err(io(&d))?;
        }
        let me = Self {
            root: dir.to_path_buf(),
        };
        me.add_file(Path::new(BUSYBOX), "/bin/busybox")?;
        let applets = run("busybox", Command::new(BUSYBOX).arg("--list"))?;
        for applet in String::from_utf8_lossy(&applets).lines() {
            let link = dir.join("bin").join(applet);
            if !link.exists() {
                std::os::unix::fs::symlink("busybox", &link).map_err(io(&link))?;
            }
        }
        Ok(me)
    }

    /// Copies a host file to `guest` (an absolute path in the guest), keeping its mode.
    pub fn add_file(&self, host: &Path, guest: &str) -> Result<(), VmError> {
        let dest = self.root.join(guest.trim_start_matches('/'));
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        fs::copy(host, &dest).map_err(io(host))?;
        Ok(())
    }

    /// Writes `contents` to `guest` with `mode`.
    pub fn add_bytes(&self, guest: &str, contents: &[u8], mode: u32) -> Result<(), VmError> {
        use std::os::unix::fs::PermissionsExt;
        let dest = self.root.join(guest.trim_start_matches('/'));
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        fs::write(&dest, contents).map_err(io(&dest))?;
        fs::set_permissions(&dest, fs::Permissions::from_mode(mode)).map_err(io(&dest))
    }

    /// A dynamically linked binary at `guest`, stripped (a debug build's
    /// symbols are most of its size), and every library `ldd` lists, at their
    /// host paths (the loader's `/lib64/ld-linux-x86-64.so.2` included).
    pub fn add_binary(&self, host: &Path, guest: &str) -> Result<(), VmError> {
        let dest = self.root.join(guest.trim_start_matches('/'));
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        run(
            "strip",
            Command::new("strip")
                .arg("--strip-all")
                .arg("-o")
                .arg(&dest)
                .arg(host),
        )?;
        let listing = run("ldd", Command::new("ldd").arg(host))?;
        for lib in ldd_paths(&String::from_utf8_lossy(&listing)) {
            self.add_file(Path::new(&lib), &lib)?;
        }
        Ok(())
    }

    /// `/init`: mounts the kernel filesystems, runs `script` with `sh -e`
    /// semantics left to the script, prints its exit status and powers off.
    pub fn set_script(&self, script: &str) -> Result<(), VmError> {
        let init = format!(
            "#!/bin/sh\n\
             mount -t proc proc /proc\n\
             mount -t sysfs sysfs /sys\n\
             mount -t devtmpfs devtmpfs /dev\n\
             mount -t tmpfs tmpfs /tmp\n\
             mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null\n\
             mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null\n\
             mount -t bpf bpf /sys/fs/bpf 2>/dev/null\n\
             mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null\n\
             export PATH=/bin:/sbin\n\
             sh /test.sh\n\
             echo {EXIT_MARK}$?\n\
             poweroff -f\n"
        );
        self.add_bytes("/init", init.as_bytes(), 0o755)?;
        self.add_bytes("/test.sh", script.as_bytes(), 0o755)
    }

    /// Packs the tree into `out` (`newc` cpio, gzip).
    pub fn pack(&self, out: &Path) -> Result<(), VmError> {
        let script = format!(
            "cd '{}' && find . | cpio -o -H newc --quiet | gzip -1 > '{}'",
            self.root.display(),
            out.display()
        );
        run("cpio", Command::new("sh").args(["-c", &script])).map(drop)
    }
}

/// The absolute library paths in `ldd` output (`libc.so.6 => /lib/... (0x...)`
/// and the loader's own `/lib64/ld-linux-x86-64.so.2 (0x...)` line).
pub fn ldd_paths(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, right)) => right.trim(),
                None => l,
            };
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| path.to_string())
        })
        .collect()
}

/// What the guest's script printed and its exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestRun {
    /// The serial console, kernel messages included.
    pub output: String,
    pub status: i32,
    pub wall: Duration,
}

/// Boots `kernel` with `initrd` under TCG; kills qemu after `timeout`.
pub fn boot(kernel: &Path, initrd: &Path, timeout: Duration) -> Result<GuestRun, VmError> {
    let started = Instant::now();
    // thread=single: one host thread runs both vCPUs in turn. With
    // multi-threaded TCG a 6.12 guest oopsed once with "int3" in __schedule
    // right after the tracer detached: the kernel flips a tracepoint's static
    // key with text_poke_bp (an int3 first, then the new bytes), and the idle
    // vCPU, running __schedule all the time, executed the int3 after the poke
    // had ended. Run in turn, every vCPU sees a patch before it runs again.
    let mut child = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg,thread=single",
            "-cpu",
            "max",
            "-m",
            "1024",
            "-smp",
            "2",
        ])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            "console=ttyS0 quiet panic=-1 oops=panic",
            "-nographic",
            "-no-reboot",
            "-monitor",
            "none",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| VmError::Spawn {
            tool: "qemu-system-x86_64",
            source,
        })?;
    // Both pipes are drained as qemu writes: a full pipe would stall the guest.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let reader = drain(Box::new(child.stdout.take().expect("piped")));
    let errors = drain(Box::new(child.stderr.take().expect("piped")));
    let finished = loop {
        match child.try_wait().map_err(|source| VmError::Spawn {
            tool: "qemu-system-x86_64",
            source,
        })? {
            Some(status) => break Some(status),
            None if started.elapsed() >= timeout => break None,
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    if finished.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut output =
        String::from_utf8_lossy(&reader.join().unwrap_or_default()).replace("\r\n", "\n");
    let qemu_stderr = String::from_utf8_lossy(&errors.join().unwrap_or_default()).into_owned();
    if !qemu_stderr.trim().is_empty() {
        output.push_str("\n[qemu stderr]\n");
        output.push_str(&qemu_stderr);
    }
    if finished.is_none() {
        return Err(VmError::Timeout { timeout, output });
    }
    let status = output
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix(EXIT_MARK)?.parse().ok());
    match status {
        Some(status) => Ok(GuestRun {
            output,
            status,
            wall: started.elapsed(),
        }),
        None => Err(VmError::NoExit { output }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_paths_keep_the_loader_and_drop_the_vdso() {
        let listing = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                       \tlibseccomp.so.2 => /lib/x86_64-linux-gnu/libseccomp.so.2 (0x00007f)\n\
                       \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                       \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            ldd_paths(listing),
            [
                "/lib/x86_64-linux-gnu/libseccomp.so.2",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }
}
