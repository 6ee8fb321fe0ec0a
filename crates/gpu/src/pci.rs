//! NVIDIA GPUs as the kernel sees them on the PCI bus, independent of the
//! driver: this is what tells "no GPU here" from "GPUs present but NVML
//! fails" from "NVML sees 7 of 8".

use std::path::{Path, PathBuf};

use serde::Serialize;

/// PCI vendor id of NVIDIA.
pub const NVIDIA_VENDOR: u32 = 0x10de;

/// One NVIDIA display or 3D controller found in sysfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciGpu {
    /// Normalised bus id, `dddd:bb:dd.f` in lower case.
    pub bus_id: String,
    /// The 24-bit class code (0x030000 VGA, 0x030200 3D controller).
    pub class: u32,
    /// The bound kernel driver (`nvidia`, `vfio-pci`, `nouveau`), if any.
    pub driver: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PciError {
    #[error("cannot list PCI devices in {dir}")]
    List {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Every NVIDIA display-class device under `root/bus/pci/devices` (root is
/// `/sys` on a node, a fake tree in tests). Unreadable single devices are
/// skipped: a device that vanishes mid-scan is not a discovery failure.
pub fn discover(root: &Path) -> Result<Vec<PciGpu>, PciError> {
    let dir = root.join("bus/pci/devices");
    let entries = std::fs::read_dir(&dir).map_err(|source| PciError::List {
        dir: dir.clone(),
        source,
    })?;
    let mut gpus = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let (Some(vendor), Some(class)) = (
            read_hex(&path.join("vendor")),
            read_hex(&path.join("class")),
        ) else {
            continue;
        };
        // Base class 0x03 is "display controller": VGA (0x00), XGA (0x01), 3D (0x02).
        if vendor != NVIDIA_VENDOR || class >> 16 != 0x03 {
            continue;
        }
        let driver = std::fs::read_link(path.join("driver"))
            .ok()
            .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()));
        gpus.push(PciGpu {
            bus_id: normalize_bus_id(&entry.file_name().to_string_lossy())
                .unwrap_or_else(|| entry.file_name().to_string_lossy().into_owned()),
            class,
            driver,
        });
    }
    gpus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
    Ok(gpus)
}

fn read_hex(path: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(path).ok()?;
    u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

/// `00000000:3B:00.0` (NVML) and `0000:3b:00.0` (sysfs) both become `0000:3b:00.0`.
pub fn normalize_bus_id(id: &str) -> Option<String> {
    let (domain, rest) = id.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u32::from_str_radix(bus, 16).ok()?;
    let dev = u32::from_str_radix(dev, 16).ok()?;
    let func = u32::from_str_radix(func, 16).ok()?;
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a fake sysfs device directory.
    pub(crate) fn fake_device(root: &Path, bus_id: &str, vendor: u32, class: u32) {
        let dir = root.join("bus/pci/devices").join(bus_id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vendor"), format!("0x{vendor:04x}\n")).unwrap();
        std::fs::write(dir.join("class"), format!("0x{class:06x}\n")).unwrap();
    }

    #[test]
    fn finds_nvidia_display_devices_only() {
        let root = tempfile::tempdir().unwrap();
        fake_device(root.path(), "0000:3b:00.0", 0x10de, 0x030200);
        fake_device(root.path(), "0000:18:00.0", 0x10de, 0x030000);
        fake_device(root.path(), "0000:19:00.0", 0x10de, 0x068000); // NVSwitch bridge
        fake_device(root.path(), "0000:00:02.0", 0x8086, 0x030000); // Intel iGPU
        let found = discover(root.path()).unwrap();
        let ids: Vec<_> = found.iter().map(|g| g.bus_id.as_str()).collect();
        assert_eq!(ids, ["0000:18:00.0", "0000:3b:00.0"]);
        assert_eq!(found[1].class, 0x030200);
    }

    #[test]
    fn missing_sysfs_is_an_error_and_empty_is_none() {
        let root = tempfile::tempdir().unwrap();
        assert!(matches!(discover(root.path()), Err(PciError::List { .. })));
        std::fs::create_dir_all(root.path().join("bus/pci/devices")).unwrap();
        assert!(discover(root.path()).unwrap().is_empty());
    }

    #[test]
    fn bus_ids_normalise() {
        assert_eq!(
            normalize_bus_id("00000000:3B:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(
            normalize_bus_id("0000:3b:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(normalize_bus_id("junk"), None);
    }
}
