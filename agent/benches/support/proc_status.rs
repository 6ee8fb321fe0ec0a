//! One field of `/proc/<pid>/status` in KiB (`VmRSS:`, `VmHWM:`, `RssAnon:`,
//! `RssFile:`, `Threads:` ...), shared by the benches: `pid` is a process
//! id or `self`.

pub fn status_kib(pid: &str, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .ok()
        })
}

/// This process's field, 0 when absent.
#[allow(dead_code)]
pub fn own_kib(field: &str) -> u64 {
    status_kib("self", field).unwrap_or(0)
}
