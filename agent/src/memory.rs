//! Releasing the start's working set once the agent is ready.
//!
//! The start touches code and heap the agent never needs again: clap, the
//! config parser, the eBPF loader and its BTF parse, the first TLS
//! handshake and lists. Most of the steady RSS was those pages, not the
//! agent's live state: the binary's own file-backed pages (code and
//! read-only data mapped from the executable, counted in RssFile for as
//! long as nothing else needs the memory) and heap glibc keeps after a
//! free. Measured with `cargo bench -p nodeproof --bench agent_memory`
//! (200 pods, tracer, reporter; the steady window scraped every second,
//! a profile re-linted, a pod bound and deleted), one run each on the same
//! machine: steady RSS 26.1-26.6 MiB (RssFile 21.6-22.1, RssAnon 4.4)
//! without this, 13.5-14.0 MiB (RssFile 9.7-10.1, RssAnon 3.8) with it.
//! The pages the steady state runs fault back in and stay counted; a path
//! the bench's window does not take (a SIGHUP reload, a reconnect) brings
//! its own pages back when it runs.
//!
//! So, once, when the first check cycle is done:
//! - `malloc_trim(0)`: glibc returns the free pages inside its arenas to
//!   the kernel (`MADV_DONTNEED`), not only the top of the heap;
//! - `madvise(MADV_PAGEOUT)` (Linux 5.4) over the executable's read-only
//!   mappings: the pages leave this process's resident set and stay in the
//!   page cache, so the code the steady state runs faults back in at the
//!   cost of a minor fault. Writable mappings (data, bss, heap) are never
//!   touched. A kernel without MADV_PAGEOUT answers EINVAL, which is
//!   reported and changes nothing else.
//!
//! The parsing of `/proc/self/maps` is pure ([`readonly_mappings`]).

use std::ops::Range;

/// What [`release_start_memory`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// Bytes of the executable's read-only mappings advised out.
    pub paged_out: usize,
    /// Whether glibc gave memory back.
    pub heap_trimmed: bool,
    /// The first madvise error, if any (EINVAL before Linux 5.4).
    pub error: Option<String>,
}

/// The read-only (not writable) mappings of `exe` in `/proc/<pid>/maps`
/// text: `start-end perms offset dev inode path` per line.
pub fn readonly_mappings(maps: &str, exe: &str) -> Vec<Range<usize>> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            // offset, dev, inode, then the path (which may hold spaces).
            let path = line
                .splitn(6, char::is_whitespace)
                .nth(5)
                .map(str::trim_start)?;
            if path != exe || perms.contains('w') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (start < end).then_some(start..end)
        })
        .collect()
}

/// Trims the heap and pages the executable's read-only mappings out of
/// the resident set. Call once the start's work is done.
pub fn release_start_memory() -> Released {
    let mut released = Released {
        // SAFETY: malloc_trim only walks glibc's own arenas.
        heap_trimmed: unsafe { libc::malloc_trim(0) } == 1,
        ..Released::default()
    };
    let (Ok(exe), Ok(maps)) = (
        std::fs::read_link("/proc/self/exe"),
        std::fs::read_to_string("/proc/self/maps"),
    ) else {
        released.error = Some("cannot read /proc/self/exe or /proc/self/maps".into());
        return released;
    };
    for range in readonly_mappings(&maps, &exe.to_string_lossy()) {
        let len = range.end - range.start;
        // SAFETY: the range is one of this process's own file-backed,
        // non-writable mappings; MADV_PAGEOUT only drops pages from the
        // resident set (they read back from the page cache or the file),
        // it never changes their contents.
        let rc =
            unsafe { libc::madvise(range.start as *mut libc::c_void, len, libc::MADV_PAGEOUT) };
        if rc == 0 {
            released.paged_out += len;
        } else if released.error.is_none() {
            released.error = Some(std::io::Error::last_os_error().to_string());
        }
    }
    released
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0a00000 r--p 00000000 08:01 1234 /usr/bin/nodeproof
55d0c0a00000-55d0c2000000 r-xp 00a00000 08:01 1234 /usr/bin/nodeproof
55d0c2000000-55d0c2200000 r--p 02000000 08:01 1234 /usr/bin/nodeproof
55d0c2200000-55d0c2210000 rw-p 02200000 08:01 1234 /usr/bin/nodeproof
55d0c2210000-55d0c2300000 rw-p 00000000 00:00 0 [heap]
7f00000000-7f00001000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f10000000-7f10001000 r--p 00000000 08:01 77 /usr/bin/nodeproof (deleted)
7f20000000-7f20001000 r--p 00000000 08:01 78 /opt/my tools/nodeproof
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
";

    #[test]
    fn only_the_executables_readonly_mappings_are_chosen() {
        assert_eq!(
            readonly_mappings(MAPS, "/usr/bin/nodeproof"),
            vec![
                0x55d0c0000000..0x55d0c0a00000,
                0x55d0c0a00000..0x55d0c2000000,
                0x55d0c2000000..0x55d0c2200000,
            ]
        );
        // A path with a space is read whole.
        assert_eq!(
            readonly_mappings(MAPS, "/opt/my tools/nodeproof"),
            vec![0x7f20000000..0x7f20001000]
        );
        assert!(readonly_mappings("garbage\n\n", "/usr/bin/nodeproof").is_empty());
    }

    #[test]
    fn the_start_memory_of_this_process_is_released() {
        // The test binary's own mappings: paged out without error on a
        // kernel with MADV_PAGEOUT (5.4+), and the process goes on running
        // the code it paged out.
        let released = release_start_memory();
        assert!(released.paged_out > 0, "{released:?}");
        assert_eq!(released.error, None);
        assert_eq!(readonly_mappings(MAPS, "/usr/bin/nodeproof").len(), 3);
    }
}
