//! Aggregation of the in-kernel counts into summary rows, and the text/JSON
//! renderings of samples and summaries, and their JSON read back (`advise
//! --from`). Pure: the attribution comes in as a closure so tests need no
//! cgroupfs.

use super::attribution::Attribution;
use super::event::{
    Action, CountKey, Denial, AUDIT_ARCH_AARCH64, AUDIT_ARCH_I386, AUDIT_ARCH_X86_64,
};
use super::intended::{classify, DenialKind, Fallback};
use super::names::{arch_name, errno_name, SyscallNames};
use super::{Stats, Strategy};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// `--pid` / `--comm` (the process) and `--pod` / `--namespace` /
/// `--container` (where it ran) filters; pid is the process id, tgid in
/// kernel terms. Unset fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// The pod's name or its UID.
    pub pod: Option<String>,
    pub namespace: Option<String>,
    /// The container's name, or a prefix of its runtime id.
    pub container: Option<String>,
}

impl Filter {
    /// The process part, checked before a denial is attributed (cheap).
    pub fn matches(&self, pid: u32, comm: &str) -> bool {
        self.pid.is_none_or(|p| p == pid) && self.comm.as_deref().is_none_or(|c| c == comm)
    }

    /// The workload part, checked on the attribution.
    pub fn matches_workload(&self, a: &Attribution) -> bool {
        let pod = a.pod.as_ref();
        self.pod.as_deref().is_none_or(|want| {
            pod.is_some_and(|p| p.name == want) || a.pod_uid.as_deref() == Some(want)
        }) && self
            .namespace
            .as_deref()
            .is_none_or(|want| pod.is_some_and(|p| p.namespace == want))
            && self.container.as_deref().is_none_or(|want| {
                a.container.as_deref() == Some(want)
                    || a.container_id
                        .as_deref()
                        .is_some_and(|id| id.starts_with(want))
            })
    }

    /// Whether a workload filter is set (rows must be attributed to be kept).
    pub fn on_workload(&self) -> bool {
        self.pod.is_some() || self.namespace.is_some() || self.container.is_some()
    }

    /// The workload filters that only a name can satisfy: `--namespace`, a
    /// `--pod` that is no UID, a `--container` that is no hex id prefix.
    /// Empty when the cgroup alone (UID, container id) can answer them.
    pub fn needs_names(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.pod.as_deref().is_some_and(|p| !looks_like_uid(p)) {
            out.push("--pod");
        }
        if self.namespace.is_some() {
            out.push("--namespace");
        }
        if self
            .container
            .as_deref()
            .is_some_and(|c| !c.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            out.push("--container");
        }
        out
    }
}

/// A pod UID as the API server writes it (8-4-4-4-12 hex), or a static pod's
/// (32 hex digits, the hash of its manifest).
fn looks_like_uid(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split('-').collect();
    hex(s, 32) || (parts.len() == 5 && parts.iter().zip([8, 4, 4, 4, 12]).all(|(p, n)| hex(p, n)))
}

/// One line of the final summary: exact count for (pid, comm, syscall, action, errno, cgroup).
/// Read back exactly as written: every field but `cgroup` and `pod` must be there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryRow {
    pub pid: u32,
    pub comm: String,
    pub syscall: String,
    pub nr: i32,
    #[serde(deserialize_with = "arch_by_name")]
    pub arch: ArchName,
    pub action: Action,
    pub errno: i32,
    pub count: u64,
    pub cgroup_id: u64,
    /// The cgroup path the id resolved to (relative to the hierarchy root).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    pub container_id: Option<String>,
    /// The container's name, when the trace knew it (older traces lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub pod_uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<super::attribution::PodRef>,
    /// The profile change the container started after, where the caller's
    /// [`super::PodLookup::change`] knows it (the agent: the pod's profile
    /// and start from the API server, the versions it keeps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<nodeproof_findings::denial_change::DenialChange>,
}

impl SummaryRow {
    /// Whether libc falls back from this denial (`intended`).
    pub fn kind(&self) -> DenialKind {
        classify(&self.syscall, self.action, self.errno)
    }
}

/// A row as the summary writes it: its fields, and the fallback that makes
/// it intended, if one does (read back, the field is ignored: [`SummaryRow::kind`]
/// says it again from the row).
#[derive(Serialize)]
struct RowOut<'a> {
    #[serde(flatten)]
    row: &'a SummaryRow,
    #[serde(skip_serializing_if = "Option::is_none")]
    intended_fallback: Option<&'static Fallback>,
}

fn rows_out<S: serde::Serializer>(rows: &[SummaryRow], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(rows.iter().map(|row| RowOut {
        row,
        intended_fallback: row.kind().fallback(),
    }))
}

/// `&'static str` under another name: spelled out, serde's derive takes the
/// field as borrowed from the input (`'de: 'static`, so nothing read from a
/// file could be deserialized), although [`arch_by_name`] borrows nothing.
pub type ArchName = &'static str;

/// The `arch` names [`arch_name`] writes, back to the same static strings; any
/// other is refused, since no trace wrote it.
fn arch_by_name<'de, D: Deserializer<'de>>(d: D) -> Result<ArchName, D::Error> {
    let name = String::deserialize(d)?;
    // 0: what arch_name calls every audit arch it does not know.
    [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, 0]
        .map(arch_name)
        .into_iter()
        .find(|known| *known == name)
        .ok_or_else(|| {
            serde::de::Error::invalid_value(
                serde::de::Unexpected::Str(&name),
                &"x86_64, x86, aarch64 or unknown",
            )
        })
}

/// One sample line of `trace -o json` read back: the owned twin of
/// `SampleJson`, which borrows so that printing a sample allocates less.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Sample {
    pub time: String,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub syscall: String,
    pub nr: i32,
    #[serde(deserialize_with = "arch_by_name")]
    pub arch: ArchName,
    pub action: Action,
    pub errno: i32,
    pub cgroup_id: u64,
    pub mnt_ns: u32,
    pub cgroup: Option<String>,
    pub container_id: Option<String>,
    #[serde(default)]
    pub container: Option<String>,
    pub pod_uid: Option<String>,
    pub pod: Option<super::attribution::PodRef>,
}

impl Sample {
    /// The sample as a summary row of one denial.
    pub fn into_row(self) -> SummaryRow {
        SummaryRow {
            pid: self.pid,
            comm: self.comm,
            syscall: self.syscall,
            nr: self.nr,
            arch: self.arch,
            action: self.action,
            errno: self.errno,
            count: 1,
            cgroup_id: self.cgroup_id,
            cgroup: self.cgroup,
            container_id: self.container_id,
            container: self.container,
            pod_uid: self.pod_uid,
            pod: self.pod,
            change: None,
        }
    }
}

/// The result of a trace run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceSummary {
    #[serde(serialize_with = "rows_out")]
    pub summary: Vec<SummaryRow>,
    /// Samples not delivered (rate limit + full ring buffer); counts are unaffected.
    pub dropped: u64,
    /// Denials that found no slot in the count map: the only way counts can be inexact.
    pub lost_counts: u64,
    pub samples: u64,
    pub strategy: Strategy,
}

impl TraceSummary {
    /// The exact count for one (pid, syscall nr, errno, action), summed over comm and cgroup.
    pub fn count(&self, pid: u32, nr: i32, errno: i32, action: Action) -> u64 {
        self.summary
            .iter()
            .filter(|r| r.pid == pid && r.nr == nr && r.errno == errno && r.action == action)
            .map(|r| r.count)
            .sum()
    }
}

/// Builds the summary rows from the in-kernel counts, filtered and attributed.
pub fn aggregate(
    counts: impl IntoIterator<Item = (CountKey, u64)>,
    filter: &Filter,
    names: &mut SyscallNames,
    attribute: &mut dyn FnMut(u64, u32) -> Attribution,
) -> Vec<SummaryRow> {
    // Keys are unique per map, but sum anyway: a fake source or a re-read may repeat them.
    let mut merged: BTreeMap<CountKey, u64> = BTreeMap::new();
    for (k, n) in counts {
        if n > 0 && filter.matches(k.pid, &k.comm) {
            *merged.entry(k).or_default() += n;
        }
    }
    let mut rows: Vec<SummaryRow> = merged
        .into_iter()
        .filter_map(|(k, count)| {
            let a = attribute(k.cgroup_id, k.pid);
            if !filter.matches_workload(&a) {
                return None;
            }
            Some(SummaryRow {
                pid: k.pid,
                syscall: names.get(k.arch, k.nr).to_string(),
                comm: k.comm,
                nr: k.nr,
                arch: arch_name(k.arch),
                action: k.action,
                errno: k.errno,
                count,
                cgroup_id: k.cgroup_id,
                cgroup: a.cgroup,
                container_id: a.container_id,
                container: a.container,
                pod_uid: a.pod_uid,
                pod: a.pod,
                change: None,
            })
        })
        .collect();
    sort_rows(&mut rows);
    rows
}

/// Largest count first, then by pid and syscall number.
pub fn sort_rows(rows: &mut [SummaryRow]) {
    rows.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.pid.cmp(&b.pid))
            .then(a.nr.cmp(&b.nr))
    });
}

/// Builds the run's summary.
pub fn summarize(rows: Vec<SummaryRow>, stats: &Stats, strategy: Strategy) -> TraceSummary {
    TraceSummary {
        summary: rows,
        dropped: stats.dropped(),
        lost_counts: stats.lost_counts,
        samples: stats.samples,
        strategy,
    }
}

#[derive(Serialize)]
struct SampleJson<'a> {
    time: String,
    pid: u32,
    tid: u32,
    comm: &'a str,
    syscall: &'a str,
    nr: i32,
    arch: &'static str,
    action: Action,
    errno: i32,
    cgroup_id: u64,
    mnt_ns: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    cgroup: Option<&'a str>,
    container_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<&'a str>,
    pod_uid: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod: Option<&'a super::attribution::PodRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    intended_fallback: Option<&'static Fallback>,
}

/// One JSON line for a sample. `wall_ns` is the sample's time on CLOCK_REALTIME.
pub fn sample_json(d: &Denial, syscall: &str, a: &Attribution, wall_ns: u64) -> String {
    serde_json::to_string(&sample_record(d, syscall, a, wall_ns)).expect("sample serializes")
}

/// A sample as one YAML document (`---` first, no final newline: the caller's `writeln`).
pub fn sample_yaml(d: &Denial, syscall: &str, a: &Attribution, wall_ns: u64) -> String {
    let y =
        serde_saphyr::to_string(&sample_record(d, syscall, a, wall_ns)).expect("sample serializes");
    format!("---\n{}", y.trim_end())
}

/// The summary as the run's last YAML document.
pub fn summary_yaml(s: &TraceSummary) -> String {
    format!(
        "---\n{}",
        serde_saphyr::to_string(s).expect("summary serializes")
    )
}

fn sample_record<'a>(
    d: &'a Denial,
    syscall: &'a str,
    a: &'a Attribution,
    wall_ns: u64,
) -> SampleJson<'a> {
    SampleJson {
        time: rfc3339(wall_ns),
        pid: d.pid,
        tid: d.tid,
        comm: &d.comm,
        syscall,
        nr: d.nr,
        arch: arch_name(d.arch),
        action: d.action,
        errno: d.errno,
        cgroup_id: d.cgroup_id,
        mnt_ns: d.mnt_ns,
        cgroup: a.cgroup.as_deref(),
        container_id: a.container_id.as_deref(),
        container: a.container.as_deref(),
        pod_uid: a.pod_uid.as_deref(),
        pod: a.pod.as_ref(),
        intended_fallback: classify(syscall, d.action, d.errno).fallback(),
    }
}

/// One readable line for a sample.
pub fn sample_text(d: &Denial, syscall: &str, a: &Attribution, wall_ns: u64) -> String {
    let mut s = format!(
        "{} {}[{}/{}] {}({}) denied: {}",
        rfc3339(wall_ns),
        d.comm,
        d.pid,
        d.tid,
        syscall,
        d.nr,
        outcome(d.action, d.errno)
    );
    if let Some(f) = classify(syscall, d.action, d.errno).fallback() {
        s.push_str(&format!(" (intended: {})", f.reason()));
    }
    if let Some(w) = workload(
        a.pod.as_ref(),
        a.pod_uid.as_deref(),
        a.container.as_deref(),
        a.container_id.as_deref(),
        a.cgroup.as_deref(),
    ) {
        s.push(' ');
        s.push_str(&w);
    }
    s
}

/// Where a denial ran, in words: `pod=ns/name container=name`, the UID and
/// the id's first 12 digits where no name is known, the cgroup outside
/// Kubernetes; `None` when nothing is known.
fn workload(
    pod: Option<&super::attribution::PodRef>,
    pod_uid: Option<&str>,
    container: Option<&str>,
    container_id: Option<&str>,
    cgroup: Option<&str>,
) -> Option<String> {
    let mut parts = Vec::new();
    match (pod, pod_uid) {
        (Some(p), _) => parts.push(format!("pod={}/{}", p.namespace, p.name)),
        (None, Some(uid)) => parts.push(format!("pod_uid={uid}")),
        (None, None) => {}
    }
    match (container, container_id) {
        (Some(name), _) => parts.push(format!("container={name}")),
        (None, Some(id)) => parts.push(format!("container={}", &id[..id.len().min(12)])),
        (None, None) => {
            if let Some(cg) = cgroup.filter(|_| parts.is_empty()) {
                parts.push(format!("cgroup={cg}"));
            }
        }
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

fn outcome(action: Action, errno: i32) -> String {
    match action {
        Action::Errno | Action::NotifyError => match errno_name(errno) {
            Some(name) => format!("{action} {name} ({errno})"),
            None => format!("{action} {errno}"),
        },
        Action::Kill => "kill (SIGSYS)".to_string(),
        Action::Trap => format!("trap (SIGSYS, data {errno})"),
    }
}

/// The final JSON line.
pub fn summary_json(s: &TraceSummary) -> String {
    serde_json::to_string(s).expect("summary serializes")
}

/// The final text table. Each column is as wide as its widest cell, so a
/// long action (`notify-error EAFNOSUPPORT (97)`) or comm never pushes the
/// counts out of line.
pub fn summary_text(s: &TraceSummary) -> String {
    let header = ["PID", "COMM", "SYSCALL", "ACTION", "COUNT", "WHERE"];
    let rows: Vec<[String; 6]> = s
        .summary
        .iter()
        .map(|r| {
            [
                r.pid.to_string(),
                r.comm.clone(),
                format!("{}({})", r.syscall, r.nr),
                match r.kind().fallback() {
                    Some(f) => format!("{}, intended: {}", outcome(r.action, r.errno), f.reason()),
                    None => outcome(r.action, r.errno),
                },
                r.count.to_string(),
                workload(
                    r.pod.as_ref(),
                    r.pod_uid.as_deref(),
                    r.container.as_deref(),
                    r.container_id.as_deref(),
                    None,
                )
                .unwrap_or_else(|| "-".to_string()),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        // PID and COUNT right-aligned, as numbers; the last column unpadded.
        format!(
            "{:>w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:>w4$}  {}\n",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3],
            w4 = width[4],
        )
    };
    let mut out = line(header);
    for row in &rows {
        out.push_str(&line([
            &row[0], &row[1], &row[2], &row[3], &row[4], &row[5],
        ]));
    }
    // The change each denied container started after, where it is known.
    for r in &s.summary {
        if let Some(c) = &r.change {
            out.push_str(&format!(
                "pid {} {}: {}\n",
                r.pid,
                r.syscall,
                change_text(c)
            ));
        }
    }
    out.push_str(&format!(
        "strategy {}; {} samples, {} dropped; counts exact{}\n",
        s.strategy,
        s.samples,
        s.dropped,
        if s.lost_counts > 0 {
            format!(" except {} lost (count map full)", s.lost_counts)
        } else {
            String::new()
        }
    ));
    out
}

/// RFC 3339 UTC with milliseconds, from nanoseconds since the epoch.
pub fn rfc3339(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let ms = (ns % 1_000_000_000) / 1_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// What a row's change says: the version the container started under and
/// what the one before did with the call.
pub fn change_text(c: &nodeproof_findings::denial_change::DenialChange) -> String {
    use nodeproof_findings::denial_change::PreviousVerdict;
    let said = match c.previous_verdict {
        PreviousVerdict::Allowed => format!("allowed {}", c.syscall),
        PreviousVerdict::Denied => "denied it too".to_string(),
        PreviousVerdict::Unknown => "cannot be judged".to_string(),
    };
    format!(
        "profile {} as of {} (sha256 {}…); the previous version (sha256 {}…, until {}) {said}",
        c.profile,
        c.version_since,
        &c.version[..c.version.len().min(8)],
        &c.previous[..c.previous.len().min(8)],
        c.version_since,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pid: u32, comm: &str, nr: i32, errno: i32, action: Action) -> CountKey {
        CountKey {
            cgroup_id: 9,
            pid,
            nr,
            errno,
            action,
            arch: AUDIT_ARCH_X86_64,
            comm: comm.to_string(),
        }
    }

    fn attr(_cg: u64, pid: u32) -> Attribution {
        if pid == 10 {
            Attribution {
                cgroup: Some("/kubepods/podx/abc".into()),
                container_id: Some("0123456789abcdef".into()),
                container: None,
                pod_uid: Some("u-1".into()),
                qos: None,
                pod: None,
            }
        } else {
            Attribution::default()
        }
    }

    #[test]
    fn aggregates_filters_and_sorts() {
        let counts = vec![
            (key(10, "app", 83, 1, Action::Errno), 5),
            (key(10, "app", 83, 1, Action::Errno), 2),
            (key(10, "app", 84, 13, Action::Errno), 9),
            (key(11, "other", 83, 1, Action::Errno), 1),
            (key(12, "zero", 83, 1, Action::Errno), 0),
        ];
        let mut names = SyscallNames::default();
        let rows = aggregate(counts.clone(), &Filter::default(), &mut names, &mut attr);
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[0].syscall.as_str(), rows[0].count), ("rmdir", 9));
        assert_eq!((rows[1].syscall.as_str(), rows[1].count), ("mkdir", 7));
        assert_eq!(rows[1].container_id.as_deref(), Some("0123456789abcdef"));
        assert_eq!(rows[2].pod_uid, None);

        let only = Filter {
            comm: Some("other".into()),
            ..Filter::default()
        };
        let rows = aggregate(counts.clone(), &only, &mut names, &mut attr);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].pid, 11);
        let by_pid = Filter {
            pid: Some(10),
            ..Filter::default()
        };
        let s = summarize(
            aggregate(counts, &by_pid, &mut names, &mut attr),
            &Stats {
                dropped_ratelimit: 3,
                dropped_ringbuf: 1,
                ..Stats::default()
            },
            Strategy::TpBtf,
        );
        assert_eq!(s.count(10, 83, 1, Action::Errno), 7);
        assert_eq!(s.dropped, 4);
    }

    #[test]
    fn summary_json_shape() {
        let mut names = SyscallNames::default();
        let rows = aggregate(
            vec![(key(10, "app", 83, 1, Action::Errno), 3)],
            &Filter::default(),
            &mut names,
            &mut attr,
        );
        let s = summarize(rows, &Stats::default(), Strategy::TpBtf);
        let v: serde_json::Value = serde_json::from_str(&summary_json(&s)).unwrap();
        assert_eq!(v["strategy"], "tp_btf");
        assert_eq!(v["dropped"], 0);
        let r = &v["summary"][0];
        assert_eq!(r["pid"], 10);
        assert_eq!(r["comm"], "app");
        assert_eq!(r["syscall"], "mkdir");
        assert_eq!(r["nr"], 83);
        assert_eq!(r["action"], "errno");
        assert_eq!(r["errno"], 1);
        assert_eq!(r["count"], 3);
        assert_eq!(r["container_id"], "0123456789abcdef");
        assert_eq!(r["pod_uid"], "u-1");
        assert!(summary_text(&s).contains("mkdir(83)"));
    }

    /// An intended ENOSYS (glibc's clone3 → clone) is shown with its
    /// reason in every rendering; a real denial beside it is not, and the
    /// row reads back as it was.
    #[test]
    fn intended_fallbacks_carry_their_reason() {
        let mut names = SyscallNames::default();
        let rows = aggregate(
            vec![
                (key(10, "app", 435, libc::ENOSYS, Action::Errno), 4),
                (key(10, "app", 272, libc::EPERM, Action::Errno), 1),
            ],
            &Filter::default(),
            &mut names,
            &mut attr,
        );
        assert_eq!(rows[0].syscall, "clone3");
        assert!(rows[0].kind().is_intended());
        assert!(!rows[1].kind().is_intended());
        let s = summarize(rows.clone(), &Stats::default(), Strategy::TpBtf);
        let v: serde_json::Value = serde_json::from_str(&summary_json(&s)).unwrap();
        let f = &v["summary"][0]["intended_fallback"];
        assert_eq!(f["fallback"], "clone", "{v}");
        assert_eq!(f["libc"], "glibc");
        assert_eq!(f["source"], "sysdeps/unix/sysv/linux/clone-internal.c");
        assert!(v["summary"][1].get("intended_fallback").is_none(), "{v}");
        let back: Vec<SummaryRow> = serde_json::from_value(v["summary"].clone()).unwrap();
        assert_eq!(back, rows);
        let text = summary_text(&s);
        assert!(
            text.contains("errno ENOSYS (38), intended: glibc falls back to clone"),
            "{text}"
        );
        assert!(text.contains("errno EPERM (1)  "), "{text}");
        let d = Denial {
            ts_ns: 0,
            cgroup_id: 9,
            pid: 10,
            tid: 12,
            mnt_ns: 4,
            nr: 435,
            arch: AUDIT_ARCH_X86_64,
            errno: libc::ENOSYS,
            action: Action::Errno,
            comm: "app".into(),
        };
        let a = Attribution::default();
        assert!(sample_text(&d, "clone3", &a, 0).ends_with(
            "clone3(435) denied: errno ENOSYS (38) (intended: glibc falls back to clone)"
        ));
        let j: serde_json::Value = serde_json::from_str(&sample_json(&d, "clone3", &a, 0)).unwrap();
        assert_eq!(j["intended_fallback"]["fallback"], "clone");
        let j: serde_json::Value =
            serde_json::from_str(&sample_json(&d, "openat2", &a, 0)).unwrap();
        assert!(j.get("intended_fallback").is_none());
    }

    #[test]
    fn summary_rows_read_back_equal() {
        let mut names = SyscallNames::default();
        let mut rows = aggregate(
            vec![
                (key(10, "app", 83, 1, Action::Errno), 3),
                (key(11, "k", 84, 0, Action::Kill), 1),
                (key(12, "t", 85, 7, Action::Trap), 2),
                (key(13, "n", 86, 13, Action::NotifyError), 4),
            ],
            &Filter::default(),
            &mut names,
            &mut attr,
        );
        // Every optional field both ways, and every arch name written.
        rows[0].pod = Some(super::super::attribution::PodRef {
            namespace: "ml".into(),
            name: "vllm-0".into(),
        });
        rows[1].arch = arch_name(AUDIT_ARCH_AARCH64);
        rows[2].arch = arch_name(AUDIT_ARCH_I386);
        rows[3].arch = arch_name(0);
        assert!(rows.iter().any(|r| r.cgroup.is_some()) && rows.iter().any(|r| r.cgroup.is_none()));
        let text = serde_json::to_string(&rows).unwrap();
        let back: Vec<SummaryRow> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, rows);
        // The whole summary line as `trace -o json` ends.
        let s = summarize(rows.clone(), &Stats::default(), Strategy::TpBtf);
        let v: serde_json::Value = serde_json::from_str(&summary_json(&s)).unwrap();
        let back: Vec<SummaryRow> = serde_json::from_value(v["summary"].clone()).unwrap();
        assert_eq!(back, rows);
        // `-o yaml`: the same summary as the run's last YAML document.
        let y = summary_yaml(&s);
        assert!(y.starts_with("---\n"), "{y}");
        let from_yaml: serde_json::Value = serde_saphyr::from_str(&y).unwrap();
        assert_eq!(from_yaml, v);
    }

    #[test]
    fn a_row_with_an_arch_no_trace_writes_is_refused() {
        let mut names = SyscallNames::default();
        let rows = aggregate(
            vec![(key(10, "app", 83, 1, Action::Errno), 3)],
            &Filter::default(),
            &mut names,
            &mut attr,
        );
        let text = serde_json::to_string(&rows[0])
            .unwrap()
            .replace("x86_64", "sparc");
        let err = serde_json::from_str::<SummaryRow>(&text).unwrap_err();
        assert!(
            err.to_string().contains("invalid value: string \"sparc\""),
            "{err}"
        );
    }

    #[test]
    fn sample_renderings() {
        let d = Denial {
            ts_ns: 0,
            cgroup_id: 9,
            pid: 10,
            tid: 12,
            mnt_ns: 4,
            nr: 83,
            arch: AUDIT_ARCH_X86_64,
            errno: 1,
            action: Action::Errno,
            comm: "app".into(),
        };
        let a = attr(9, 10);
        let j: serde_json::Value =
            serde_json::from_str(&sample_json(&d, "mkdir", &a, 1_700_000_000_123_000_000)).unwrap();
        let y: serde_json::Value =
            serde_saphyr::from_str(&sample_yaml(&d, "mkdir", &a, 1_700_000_000_123_000_000))
                .unwrap();
        assert_eq!(y, j, "a sample as a YAML document is the JSON line");
        let t = sample_text(&d, "mkdir", &a, 1_700_000_000_123_000_000);
        assert_eq!(
            t,
            "2023-11-14T22:13:20.123Z app[10/12] mkdir(83) denied: errno EPERM (1) pod_uid=u-1 container=0123456789ab"
        );
        let line = sample_json(&d, "mkdir", &a, 1_700_000_000_123_000_000);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["time"], "2023-11-14T22:13:20.123Z");
        assert_eq!(v["tid"], 12);
        assert_eq!(v["action"], "errno");
        // Read back: every field the line holds, and as one denial.
        let back: Sample = serde_json::from_str(&line).unwrap();
        assert_eq!(
            back,
            Sample {
                time: "2023-11-14T22:13:20.123Z".into(),
                pid: 10,
                tid: 12,
                comm: "app".into(),
                syscall: "mkdir".into(),
                nr: 83,
                arch: "x86_64",
                action: Action::Errno,
                errno: 1,
                cgroup_id: 9,
                mnt_ns: 4,
                cgroup: a.cgroup.clone(),
                container_id: a.container_id.clone(),
                container: None,
                pod_uid: a.pod_uid.clone(),
                pod: None,
            }
        );
        assert_eq!(back.into_row().count, 1);
        let k = Denial {
            action: Action::Kill,
            ..d
        };
        assert!(sample_text(&k, "mkdir", &Attribution::default(), 0).contains("kill (SIGSYS)"));
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
    }

    fn in_pod(ns: &str, name: &str, container: Option<&str>) -> Attribution {
        Attribution {
            container_id: Some("3f2a9c1b7d4e".repeat(5) + "abcd"),
            container: container.map(String::from),
            pod_uid: Some("8b6c7e2a-1d2f-4a5b-9c3d-0e1f2a3b4c5d".into()),
            pod: Some(super::super::attribution::PodRef {
                namespace: ns.into(),
                name: name.into(),
            }),
            ..Attribution::default()
        }
    }

    #[test]
    fn workload_filters_by_name_uid_namespace_and_container() {
        let vllm = in_pod("ml", "vllm-0", Some("server"));
        let f = |pod: Option<&str>, ns: Option<&str>, c: Option<&str>| Filter {
            pod: pod.map(String::from),
            namespace: ns.map(String::from),
            container: c.map(String::from),
            ..Filter::default()
        };
        for (filter, keeps) in [
            (f(None, None, None), true),
            (f(Some("vllm-0"), None, None), true),
            (
                f(Some("8b6c7e2a-1d2f-4a5b-9c3d-0e1f2a3b4c5d"), None, None),
                true,
            ),
            (f(Some("vllm-1"), None, None), false),
            (f(None, Some("ml"), None), true),
            (f(None, Some("kube-system"), None), false),
            (f(Some("vllm-0"), Some("ml"), Some("server")), true),
            (f(None, None, Some("3f2a9c")), true),
            (f(None, None, Some("sidecar")), false),
        ] {
            assert_eq!(filter.matches_workload(&vllm), keeps, "{filter:?}");
        }
        // A denial outside any pod passes only when no workload filter is set.
        assert!(!f(None, Some("ml"), None).matches_workload(&Attribution::default()));
        assert!(f(None, None, None).matches_workload(&Attribution::default()));
        // Names are needed only where a UID or an id prefix cannot answer.
        assert!(f(
            Some("8b6c7e2a-1d2f-4a5b-9c3d-0e1f2a3b4c5d"),
            None,
            Some("3f2a9c")
        )
        .needs_names()
        .is_empty());
        assert_eq!(
            f(Some("vllm-0"), Some("ml"), Some("server")).needs_names(),
            ["--pod", "--namespace", "--container"]
        );
    }

    #[test]
    fn the_table_keeps_its_columns_whatever_the_widths() {
        let mut names = SyscallNames::default();
        let mut long = key(10, "a-very-long-comm", 41, 97, Action::NotifyError);
        long.cgroup_id = 1;
        let rows = aggregate(
            vec![(key(10, "app", 83, 1, Action::Errno), 3), (long, 1_234_567)],
            &Filter::default(),
            &mut names,
            &mut |cg, _| {
                if cg == 1 {
                    in_pod("ml", "vllm-0", Some("server"))
                } else {
                    Attribution::default()
                }
            },
        );
        let s = summarize(rows, &Stats::default(), Strategy::TpBtf);
        let text = summary_text(&s);
        let lines: Vec<&str> = text.lines().collect();
        // The COUNT column ends at the same place on every line.
        let end = |l: &str, needle: &str| l.find(needle).unwrap() + needle.len();
        assert_eq!(end(lines[0], "COUNT"), end(lines[1], "1234567"), "{text}");
        assert_eq!(end(lines[0], "COUNT"), end(lines[2], " 3"), "{text}");
        assert!(
            lines[1].ends_with("pod=ml/vllm-0 container=server"),
            "{text}"
        );
        assert!(lines[2].ends_with(" -"), "{text}");
    }
}
