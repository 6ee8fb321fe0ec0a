//! Whether stderr goes to the journal: systemd sets `JOURNAL_STREAM=dev:ino`
//! for the stream it connects, and a child that inherits the variable but
//! not the stream (a shell redirect) must not log there. And whether the text
//! written there instead may carry ANSI colours.

use std::ffi::OsStr;
use std::io::IsTerminal;

pub fn stderr_is_journal() -> bool {
    let Ok(value) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some(expected) = parse_journal_stream(&value) else {
        return false;
    };
    let Ok(st) = nix::sys::stat::fstat(std::io::stderr()) else {
        return false;
    };
    (st.st_dev, st.st_ino) == expected
}

/// `dev:ino` in decimal.
pub fn parse_journal_stream(value: &str) -> Option<(u64, u64)> {
    let (dev, ino) = value.split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

/// Colours for the text log: only when stderr is a terminal (a file, a pipe,
/// a test reading stderr or a log shipper gets plain text), and never with
/// `NO_COLOR` set to anything non-empty (no-color.org). tracing-subscriber
/// honours `NO_COLOR` only in its default, which `with_ansi` replaces, so
/// both are decided here.
pub fn stderr_wants_ansi() -> bool {
    ansi(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

pub fn ansi(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.is_none_or(OsStr::is_empty)
}

/// Every tracing field the agent logs, with what it holds. Under systemd
/// each is a native journal field of the same name upper-cased
/// (`tracing-journald`, no prefix: `journalctl -u nodeproof XID=79`). The
/// operations reference is generated from this list, and its test fails
/// when a field used in the code is missing here or one listed here is no
/// longer used.
pub const JOURNAL_FIELDS: &[(&str, &str)] = &[
    ("allocations", "DRA: the devices of pods' claims resolved to containers in one read"),
    ("annotation", "the Node annotation naming the GPUs the agent judges unhealthy (gpu.nodeproof.dev/unhealthy-devices), as written"),
    ("batches", "GPU fault batches the pods watcher missed (it lagged behind the GPU probe)"),
    ("binary", "the OCI runtime binary asked for its release (crun --version)"),
    ("body", "without credentials: the write that would have been sent"),
    ("btf_parse_ms", "tracer start: time spent parsing the kernel's BTF"),
    ("cause", "why a RuntimeClass contract label changed"),
    ("code", "the gRPC status code pod-resources answered"),
    ("comm", "a seccomp denial: the denied process's command name"),
    ("condition", "a node condition transition: its type"),
    ("condition_message", "a node condition transition: the condition's message (MESSAGE= is the log line's own)"),
    ("container_id", "a seccomp denial: the runtime's container id"),
    ("credentials", "which credentials the reporter uses (kubeconfig, token file, client certificate)"),
    ("device", "device taints: the DRA device (ResourceSlice device name) a DeviceTaintRule selects"),
    ("device_taint_rule", "device taints: the DeviceTaintRule created or deleted"),
    ("devices", "DRA: the devices this node's ResourceSlices publish"),
    ("diagnostic", "a profile that fails: its first diagnostic"),
    ("dir", "a directory the seccomp-root watch could not watch"),
    ("drift", "what differed when nodeproof's conditions were written again (deleted, edited by someone else)"),
    ("driver", "device taints: the DRA driver of the device"),
    ("errno", "a seccomp denial: the errno the filter returned"),
    ("error", "the error, with its causes"),
    ("event_reason", "a dropped Event's reason"),
    ("events", "the reporter is behind: how many pod Events waiting for it were given up"),
    ("first", "the first failure of a tracing strategy that fell back to a variant"),
    ("first_rounds", "readiness: each subsystem's first round time"),
    ("found", "the crun release found on the node, when nodeproof does not model it"),
    ("from", "a transition's previous status or value"),
    ("gates", "gate controller: the scheduling gates it owns"),
    ("gpu_index", "a GPU XID event: the GPU's NVML index"),
    ("gpu_usage_held", "GPU usage (debug): the series of a cycle labelled with a running pod"),
    ("gpu_usage_series", "GPU usage (debug): the usage series of a cycle, one per device and holder"),
    ("gpu_uuid", "a GPU finding or XID event: the GPU's UUID"),
    ("heap_trimmed", "once ready: whether glibc gave freed heap back to the kernel (malloc_trim)"),
    ("heartbeat_s", "the reporter's heartbeat after a reload"),
    ("identity", "gate controller: its leader-election identity"),
    ("k8s_node", "the node name the agent reports as"),
    ("k8s_pod", "a seccomp denial: the pod (namespace/name)"),
    ("kind", "a dropped write's kind (condition, Event, label)"),
    ("labels", "gate controller: the readiness labels written on a Node (null: removed)"),
    ("leads", "gate controller: whether this replica leads now"),
    ("lease", "gate controller: its Lease (namespace/name)"),
    ("left", "connections still open when the HTTP server stopped"),
    ("libseccomp", "the libseccomp release a filter is resolved and compiled with (2.5.4, 2.6.0)"),
    ("listen", "the health and metrics address"),
    ("load_ms", "tracer start: time spent loading the eBPF programs"),
    ("max_connections", "the HTTP server's connection limit, when reached"),
    ("method", "without credentials: the HTTP method not sent"),
    ("ms", "how long a refused tracing strategy took"),
    ("namespace", "a dropped Event's namespace"),
    ("native", "whether the native BPF generator or libseccomp compiled a filter"),
    ("node", "the node a reporter write is for"),
    ("nodeproof_check", "the subsystem: profiles, pods, tracing, gpu, reporter"),
    ("object", "a dropped Event's object"),
    ("outcome", "a profile's predicted outcome (ok, rejected, start-failed, unknown; not-a-profile for a file that is none)"),
    ("paged_out_kib", "once ready: the executable's read-only pages advised out of the resident set (MADV_PAGEOUT)"),
    ("path", "a file or API path"),
    ("peer", "an HTTP client refused at the connection limit"),
    ("pid", "a seccomp denial: the denied process's PID"),
    ("pod", "the pod (namespace/name): gate controller, recorder"),
    ("pool", "device taints: the DRA pool of the device"),
    ("predicted", "the modelled crun release predicted instead"),
    ("previous_verdict", "a SeccompDenied Event after a profile change: what the version before did with the call (allowed, denied, unknown)"),
    ("previous_version", "a profile change: sha256 of the version before"),
    ("profile_version", "a profile change, or a SeccompDenied Event after one: sha256 of the version the container started under"),
    ("program", "an eBPF program's name"),
    ("ready_ms", "readiness: time from start to READY=1"),
    ("reason", "why: a condition's reason, a failure's kind"),
    ("recheck_s", "device taints: seconds until DeviceTaintRule is asked for again when not served"),
    ("refused", "connections refused at the limit since the last line, or the refused tracing strategy"),
    ("resource", "device taints: the API resource a watch or request was about"),
    ("resource_slice", "device taints: a ResourceSlice that could not be read"),
    ("resource_slices", "device taints: how many ResourceSlices were seen"),
    ("restarts", "a subsystem restarted after a panic: how many times so far"),
    ("retry_ms", "a watch interrupted: the wait before it is retried"),
    ("rounds", "the reporter is behind: how many check rounds wait for it"),
    ("runtime_class", "a RuntimeClass contract label: the RuntimeClass"),
    ("seccomp_action", "a seccomp denial: the filter's action (errno, kill, trap, ...)"),
    ("seccomp_mode", "tracer without BTF: the probed task_struct offset of the seccomp mode"),
    ("seccomp_profile", "a seccomp profile's path"),
    ("seccomp_root", "the seccomp root the pods are judged against"),
    ("seccomp_syscall", "a seccomp denial: the syscall's name"),
    ("socket", "the kubelet's pod-resources socket"),
    ("stack", "tracer without BTF: the probed stack offsets"),
    ("status", "a status line, or a transition's new status"),
    ("strategy", "the seccomp tracing strategy (fexit, tp_btf, tracepoint)"),
    ("strategy_ms", "tracer start: time spent on the strategy that loaded"),
    ("to", "a transition's new status or value"),
    ("tries", "gate controller: writes of a released pod's condition before it was given up"),
    ("unhealthy_devices", "the GPUs the agent judges unhealthy (uuid=reason)"),
    ("uuid", "device taints: a GPU's UUID"),
    ("variant", "the fallback variant a tracing strategy loaded"),
    ("version", "a version read (the DRA API's, a runtime's)"),
    ("xid", "a GPU XID event: the XID code"),
    ("xid_class", "a GPU XID event: its class in the catalog (fatal, other, ignored)"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_is_dev_colon_ino() {
        assert_eq!(parse_journal_stream("8:1234"), Some((8, 1234)));
        assert_eq!(parse_journal_stream("8"), None);
        assert_eq!(parse_journal_stream("a:1"), None);
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(ansi(true, None));
        assert!(ansi(true, Some(OsStr::new(""))));
        assert!(!ansi(true, Some(OsStr::new("1"))));
        assert!(!ansi(false, None));
    }
}
