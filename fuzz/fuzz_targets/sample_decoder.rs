//! Arbitrary bytes as the eBPF side's records (`nodeproof-trace`'s `event`):
//! a ring-buffer denial sample, a cgroup-created sample, a count-map key,
//! then what the pump does with what they carry (the cgroup path's
//! attribution, the syscall's name). Nothing may panic; what decodes must
//! say what the bytes say.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeproof_trace::attribution::{parse_cgroup_path, parse_proc_cgroup};
use nodeproof_trace::event::{
    decode_cgroup_event, decode_count_key, decode_event, NpCountKey, CGROUP_PATH_MAX,
};
use nodeproof_trace::names;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    // struct np_event: 64 bytes.
    if let Ok(d) = decode_event(data) {
        assert!(data.len() >= 64);
        assert_eq!(d.ts_ns, u64_at(data, 0));
        assert_eq!(d.pid, u32_at(data, 16));
        assert_eq!(d.nr, u32_at(data, 28) as i32);
        assert!(!d.comm.contains('\0'));
        assert!(d.comm.chars().count() <= 16);
        let _ = d.action.as_str();
        // How the pump names it.
        let _ = names::syscall_name(d.arch, d.nr);
        let _ = names::arch_name(d.arch);
        let _ = names::errno_name(d.errno);
    } else {
        // Too short, or an action class the kernel side never writes.
        assert!(data.len() < 64 || nodeproof_trace::Action::from_raw(u32_at(data, 40)).is_none());
    }
    // struct np_cgroup_event: id, level, len, path[512].
    if let Ok(c) = decode_cgroup_event(data) {
        let len = u32_at(data, 12) as usize;
        assert!((2..CGROUP_PATH_MAX).contains(&len));
        assert_eq!(c.id, u64_at(data, 0));
        let attribution = parse_cgroup_path(&c.path);
        if let Some(id) = &attribution.container_id {
            assert!(c.path.contains(id.as_str()), "{id} not in {}", c.path);
        }
    }
    // struct np_count_key: 48 bytes.
    if data.len() >= 48 {
        let key = NpCountKey {
            cgroup_id: u64_at(data, 0),
            tgid: u32_at(data, 8),
            nr: u32_at(data, 12) as i32,
            err: u32_at(data, 16) as i32,
            action: u32_at(data, 20),
            arch: u32_at(data, 24),
            _pad: u32_at(data, 28),
            comm: data[32..48].try_into().unwrap(),
        };
        if let Ok(k) = decode_count_key(&key) {
            assert_eq!(k.cgroup_id, key.cgroup_id);
            assert!(!k.comm.contains('\0'));
        }
    }
    // /proc/<pid>/cgroup of a process the sample names.
    let text = String::from_utf8_lossy(data);
    if let Some(path) = parse_proc_cgroup(&text) {
        let _ = parse_cgroup_path(&path);
    }
    let _ = parse_cgroup_path(&text);
});
