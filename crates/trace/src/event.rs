//! The records the eBPF programs write (their layout generated from
//! `bpf/np_trace.h`, see [`crate::abi`]) and their decoding into plain Rust
//! values. Pure: tested without a kernel.

use serde::Serialize;
use std::fmt;
use strum::IntoStaticStr;

pub use crate::abi::trace::{NpCgroupEvent, NpCountKey, NpEvent};
use crate::abi::trace::{
    NP_ACT_ERRNO, NP_ACT_KILL, NP_ACT_NOTIFY_ERROR, NP_ACT_TRAP, NP_CGROUP_PATH_MAX,
};

/// Audit arch values (`include/uapi/linux/audit.h`) the programs report.
pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
pub const AUDIT_ARCH_I386: u32 = 0x4000_0003;
pub const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;

/// How seccomp refused the syscall.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    serde::Deserialize,
    IntoStaticStr,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Action {
    /// SCMP_ACT_ERRNO (also TRACE without a tracer, which returns ENOSYS).
    Errno,
    /// SCMP_ACT_KILL_THREAD / SCMP_ACT_KILL_PROCESS.
    Kill,
    /// SCMP_ACT_TRAP (SIGSYS delivered to the task).
    Trap,
    /// SCMP_ACT_NOTIFY answered with an error. Reserved: the pairing programs
    /// cannot tell it from ERRNO yet and report it as `errno`.
    NotifyError,
}

impl Action {
    pub fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            NP_ACT_ERRNO => Some(Self::Errno),
            NP_ACT_KILL => Some(Self::Kill),
            NP_ACT_TRAP => Some(Self::Trap),
            NP_ACT_NOTIFY_ERROR => Some(Self::NotifyError),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `NP_CGROUP_PATH_MAX`: the path bytes of a [`NpCgroupEvent`].
pub const CGROUP_PATH_MAX: usize = NP_CGROUP_PATH_MAX as usize;

/// A decoded denial sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns).
    pub ts_ns: u64,
    pub cgroup_id: u64,
    pub pid: u32,
    pub tid: u32,
    pub mnt_ns: u32,
    pub nr: i32,
    pub arch: u32,
    pub errno: i32,
    pub action: Action,
    pub comm: String,
}

/// A decoded count key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CountKey {
    pub cgroup_id: u64,
    pub pid: u32,
    pub nr: i32,
    pub errno: i32,
    pub action: Action,
    pub arch: u32,
    pub comm: String,
}

/// A cgroup2 directory the kernel created: what `bpf_get_current_cgroup_id()`
/// returns for its tasks, and its path from the hierarchy root (`/kubepods.slice/…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupCreated {
    pub id: u64,
    pub path: String,
}

/// Errors decoding kernel records.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("sample is {len} bytes, expected {expected}")]
    Length { len: usize, expected: usize },
    #[error("unknown action class {raw}")]
    Action { raw: u32 },
    #[error("cgroup {id}: path length {len} outside 2..={max}")]
    CgroupPath { id: u64, len: u32, max: usize },
}

/// The kernel's `comm`: NUL-terminated within 16 bytes, not necessarily UTF-8.
pub fn comm_to_string(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// Decodes one ring-buffer record. Reads unaligned: ring-buffer records are
/// 8-byte aligned in practice, but nothing in the API promises it.
pub fn decode_event(bytes: &[u8]) -> Result<Denial, DecodeError> {
    let expected = std::mem::size_of::<NpEvent>();
    if bytes.len() < expected {
        return Err(DecodeError::Length {
            len: bytes.len(),
            expected,
        });
    }
    // SAFETY: length checked; NpEvent is POD, every bit pattern is valid.
    let raw: NpEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    let action = Action::from_raw(raw.action).ok_or(DecodeError::Action { raw: raw.action })?;
    Ok(Denial {
        ts_ns: raw.ts_ns,
        cgroup_id: raw.cgroup_id,
        pid: raw.tgid,
        tid: raw.tid,
        mnt_ns: raw.mnt_ns,
        nr: raw.nr,
        arch: raw.arch,
        errno: raw.err,
        action,
        comm: comm_to_string(&raw.comm),
    })
}

/// Decodes one `np_cgroups` record. The path is the kernel's
/// `cgroup_path()`, relative to the hierarchy root; a truncated or unreadable
/// one (length 0, or the whole buffer with no room left) is refused rather
/// than cached wrong.
pub fn decode_cgroup_event(bytes: &[u8]) -> Result<CgroupCreated, DecodeError> {
    let expected = std::mem::size_of::<NpCgroupEvent>();
    if bytes.len() < expected {
        return Err(DecodeError::Length {
            len: bytes.len(),
            expected,
        });
    }
    // SAFETY: length checked; NpCgroupEvent is POD, every bit pattern is valid.
    let raw: NpCgroupEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    let len = raw.len as usize;
    // At least "/" and its NUL; a path that filled the buffer may have been cut.
    if !(2..CGROUP_PATH_MAX).contains(&len) || raw.path[len - 1] != 0 {
        return Err(DecodeError::CgroupPath {
            id: raw.id,
            len: raw.len,
            max: CGROUP_PATH_MAX - 1,
        });
    }
    Ok(CgroupCreated {
        id: raw.id,
        path: String::from_utf8_lossy(&raw.path[..len - 1]).into_owned(),
    })
}

/// Decodes one count key.
pub fn decode_count_key(raw: &NpCountKey) -> Result<CountKey, DecodeError> {
    let action = Action::from_raw(raw.action).ok_or(DecodeError::Action { raw: raw.action })?;
    Ok(CountKey {
        cgroup_id: raw.cgroup_id,
        pid: raw.tgid,
        nr: raw.nr,
        errno: raw.err,
        action,
        arch: raw.arch,
        comm: comm_to_string(&raw.comm),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comm(s: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    fn raw_event() -> NpEvent {
        NpEvent {
            ts_ns: 42,
            cgroup_id: 7,
            tgid: 100,
            tid: 101,
            mnt_ns: 4026531841,
            nr: 83,
            arch: AUDIT_ARCH_X86_64,
            err: 1,
            action: NP_ACT_ERRNO,
            _pad: 0,
            comm: comm("mkdir"),
        }
    }

    fn bytes_of(ev: &NpEvent) -> Vec<u8> {
        // SAFETY: reading a POD value's bytes.
        unsafe { std::slice::from_raw_parts((ev as *const NpEvent).cast::<u8>(), 64) }.to_vec()
    }

    #[test]
    fn decodes_an_event() {
        let d = decode_event(&bytes_of(&raw_event())).unwrap();
        assert_eq!(d.pid, 100);
        assert_eq!(d.tid, 101);
        assert_eq!(d.nr, 83);
        assert_eq!(d.errno, 1);
        assert_eq!(d.action, Action::Errno);
        assert_eq!(d.comm, "mkdir");
    }

    #[test]
    fn decodes_from_an_unaligned_buffer() {
        let mut buf = vec![0u8];
        buf.extend(bytes_of(&raw_event()));
        assert_eq!(decode_event(&buf[1..]).unwrap().nr, 83);
    }

    #[test]
    fn rejects_short_records_and_unknown_actions() {
        assert_eq!(
            decode_event(&[0u8; 10]),
            Err(DecodeError::Length {
                len: 10,
                expected: 64
            })
        );
        let mut ev = raw_event();
        ev.action = 9;
        assert_eq!(
            decode_event(&bytes_of(&ev)),
            Err(DecodeError::Action { raw: 9 })
        );
    }

    fn cgroup_record(id: u64, path: &[u8], len: u32) -> Vec<u8> {
        let mut raw = NpCgroupEvent {
            id,
            level: 3,
            len,
            path: [0u8; CGROUP_PATH_MAX],
        };
        raw.path[..path.len()].copy_from_slice(path);
        // SAFETY: reading a POD value's bytes.
        unsafe {
            std::slice::from_raw_parts(
                (&raw as *const NpCgroupEvent).cast::<u8>(),
                std::mem::size_of::<NpCgroupEvent>(),
            )
        }
        .to_vec()
    }

    #[test]
    fn decodes_a_cgroup_creation_and_refuses_cut_or_missing_paths() {
        let path = b"/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope";
        let rec = cgroup_record(4242, path, path.len() as u32 + 1);
        assert_eq!(
            decode_cgroup_event(&rec).unwrap(),
            CgroupCreated {
                id: 4242,
                path: String::from_utf8(path.to_vec()).unwrap()
            }
        );
        // Unaligned and with trailing bytes (ring-buffer records are rounded up).
        let mut buf = vec![0u8];
        buf.extend(&rec);
        buf.extend([0u8; 8]);
        assert_eq!(decode_cgroup_event(&buf[1..]).unwrap().id, 4242);
        // Unreadable (the kernel returned an error), cut at the buffer's end, no NUL.
        for (p, len) in [
            (&b""[..], 0u32),
            (&[b'a'; CGROUP_PATH_MAX][..], CGROUP_PATH_MAX as u32),
            (&b"/ab"[..], 3),
        ] {
            assert!(matches!(
                decode_cgroup_event(&cgroup_record(1, p, len)),
                Err(DecodeError::CgroupPath { id: 1, .. })
            ));
        }
        assert!(matches!(
            decode_cgroup_event(&rec[..100]),
            Err(DecodeError::Length { len: 100, .. })
        ));
    }

    #[test]
    fn comm_stops_at_nul_and_survives_full_length_and_bad_utf8() {
        assert_eq!(comm_to_string(&comm("sh")), "sh");
        assert_eq!(comm_to_string(&[b'a'; 16]), "a".repeat(16));
        let mut c = comm("x");
        c[1] = 0xff;
        assert_eq!(comm_to_string(&c), "x\u{fffd}");
    }
}
