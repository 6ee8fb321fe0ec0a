//! `/metrics`: the shared state as OpenMetrics text, through prometheus-client.
//! The values are snapshots the subsystems replace (exact in-kernel counts
//! re-read, the GPU policy's totals, the aggregator's totals), so a
//! collector reads them at each scrape and encodes const metrics; nothing
//! here counts.

use super::subsystem::Subsystem;
use nodeproof_findings::ConditionStatus;
use std::fmt;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::state::{MetricsSnapshot, Shared};
use nodeproof_gpu::usage::{EccError, UsageRow};
use nodeproof_trace::Strategy;

/// What prometheus-client's text encoder writes (it ends with `# EOF`).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot encode the metrics")]
    Encode(#[source] fmt::Error),
}

/// The registry `/metrics` encodes: one collector reading `shared`.
pub fn registry(shared: Arc<Shared>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StateCollector(shared)));
    registry
}

/// The whole exposition, `# EOF` included.
pub fn render(registry: &Registry) -> Result<String, MetricsError> {
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, registry).map_err(MetricsError::Encode)?;
    Ok(body)
}

#[derive(Debug)]
struct StateCollector(Arc<Shared>);

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        encode_snapshot(&self.0.metrics_snapshot(Instant::now()), &mut encoder)
    }
}

/// Every family, in a stable order. Counters are named without `_total`:
/// the encoder appends it to the samples, as OpenMetrics has it.
fn encode_snapshot(s: &MetricsSnapshot, enc: &mut DescriptorEncoder) -> fmt::Result {
    let m = &s.metrics;
    gauges(
        enc,
        "nodeproof_build_info",
        "The running nodeproof: its version and commit (`unknown` unless built by cargo xtask; `-dirty`: with uncommitted changes).",
        [(
            [
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", env!("NODEPROOF_BUILD_REVISION")),
            ],
            1,
        )],
    )?;
    gauges(
        enc,
        "nodeproof_condition",
        "Node conditions nodeproof owns, by status (1 for the current one).",
        s.conditions.iter().flat_map(|c| {
            [
                ConditionStatus::True,
                ConditionStatus::False,
                ConditionStatus::Unknown,
            ]
            .map(|status| {
                (
                    [("condition", c.kind.as_str()), ("status", status.as_str())],
                    u64::from(c.status == status),
                )
            })
        }),
    )?;
    counters(
        enc,
        "nodeproof_seccomp_denials",
        "Seccomp denials counted in the kernel, by syscall, pod and outcome (denied, or intended-fallback: ENOSYS that libc answers with an older syscall).",
        m.denials.iter().map(|((syscall, pod, outcome), &n)| {
            (
                [
                    ("syscall", syscall.as_str()),
                    ("pod", pod.as_str()),
                    ("outcome", outcome),
                ],
                n,
            )
        }),
    )?;
    gauges(
        enc,
        "nodeproof_profile_verdicts",
        "Seccomp profiles under the root, by predicted outcome.",
        m.profile_verdicts
            .iter()
            .map(|(&outcome, &n)| ([("outcome", outcome)], n)),
    )?;
    counter(
        enc,
        "nodeproof_profile_revalidations",
        "Passes over the seccomp root (start, changes, resyncs); files linted already are answered from the lint cache.",
        m.profile_revalidations,
    )?;
    counter(
        enc,
        "nodeproof_profile_lints",
        "Profile files linted by the profiles check and the pods' judge together; a file whose contents were linted in the same mode already is not linted again.",
        m.profile_lints,
    )?;
    gauges(
        enc,
        "nodeproof_seccomp_tracing_strategy",
        "Seccomp denial tracing strategy in use (1) or not (0).",
        Strategy::ALL.map(|st| {
            (
                [("strategy", st.as_str())],
                u64::from(m.ebpf_strategy == Some(st)),
            )
        }),
    )?;
    counter(
        enc,
        "nodeproof_ebpf_dropped_samples",
        "Denial samples the eBPF programs dropped (rate limit, full ring buffer).",
        m.ebpf_dropped,
    )?;
    // Only while the pods watcher is fed denials (it has API credentials).
    if let Some(rows) = &m.pod_denials {
        counters(
            enc,
            "nodeproof_pod_seccomp_denials",
            "Seccomp denials seen by the tracer in containers of pods on this node.",
            rows.iter().map(|r| {
                (
                    [
                        ("namespace", r.namespace.as_str()),
                        ("pod", r.pod.as_str()),
                        ("container", r.container.as_str()),
                        ("syscall", r.syscall.as_str()),
                        ("action", r.action),
                    ],
                    r.count,
                )
            }),
        )?;
    }
    if let Some(after) = &m.pod_denials_after_change {
        counters(
            enc,
            "nodeproof_pod_seccomp_denials_after_change",
            "Seccomp denials in pods' containers that started after their profile changed, by what the version before did with the call (allowed, denied, unknown).",
            after
                .iter()
                .map(|(verdict, &n)| ([("previous", verdict.as_str())], n)),
        )?;
    }
    // Only once the GPU probe has gone round; no driver sample without a GPU.
    if let Some(gpu) = &m.gpu {
        gauges(
            enc,
            "nodeproof_gpu_driver_ready",
            "1 when NVML answers in time for every NVIDIA PCI device.",
            gpu.driver_ready.map(|ready| (NO_LABELS, u64::from(ready))),
        )?;
        gauges(
            enc,
            "nodeproof_gpu_health",
            "1 when the GPU passes the check, 0 when it breaks the policy.",
            gpu.health.iter().map(|h| {
                (
                    [
                        ("gpu", h.gpu.to_string()),
                        ("uuid", h.uuid.clone()),
                        ("check", h.check.to_string()),
                    ],
                    u64::from(h.ok),
                )
            }),
        )?;
        // Shaped like the device plugin's `device_plugin_health_status{plugin,node}`,
        // so "below 95 % for 2 minutes" is
        // `100 * avg by (node) (nodeproof_gpu_device_health) < 95` held `for: 2m`.
        gauges(
            enc,
            "nodeproof_gpu_device_health",
            "1 when NVML calls the device (GPU or MIG instance) healthy, 0 when not or not seen, by the resource it is offered as.",
            gpu.devices.iter().map(|d| {
                (
                    [
                        ("plugin", d.plugin.clone()),
                        ("node", gpu.node.clone()),
                        ("device", d.device.clone()),
                    ],
                    u64::from(d.healthy),
                )
            }),
        )?;
        usage(enc, &m.gpu_usage)?;
        counters(
            enc,
            "nodeproof_gpu_xid_errors",
            "XID events seen, by policy class.",
            gpu.xid_totals.iter().map(|(&(index, class), &n)| {
                (
                    [
                        ("gpu", index.to_string()),
                        ("class", class.as_str().to_string()),
                    ],
                    n,
                )
            }),
        )?;
    }
    // Only while the pods watcher is fed GPU faults (it has API credentials).
    if let Some(rows) = &m.gpu_faults {
        counters(
            enc,
            "nodeproof_gpu_faults",
            "GPU faults (XID code, `ecc`, `lost`) on devices allocated to running pods' containers.",
            rows.iter().map(|r| {
                (
                    [
                        ("namespace", r.namespace.as_str()),
                        ("pod", r.pod.as_str()),
                        ("container", r.container.as_str()),
                        ("xid", r.xid.as_str()),
                    ],
                    r.count,
                )
            }),
        )?;
    }
    counter(
        enc,
        "nodeproof_reporter_errors",
        "Failed writes to the API server.",
        m.reporter_errors,
    )?;
    counters(
        enc,
        "nodeproof_reporter_dropped",
        "Writes the API server refused for good (namespace terminating or gone, invalid), dropped instead of retried.",
        m.reporter_dropped.iter().map(|(&(kind, reason), &n)| {
            ([("kind", kind.as_str()), ("reason", reason.as_str())], n)
        }),
    )?;
    gauges(
        enc,
        "nodeproof_check_findings",
        "Findings of the latest round of each check, by the CHECK column and status (ok, warning, failed, skipped).",
        m.check_findings.iter().map(|(&(check, status), &n)| {
            (
                [("check", check.as_str()), ("status", status_label(status))],
                n,
            )
        }),
    )?;
    counters(
        enc,
        "nodeproof_task_restarts",
        "Subsystem tasks restarted after a panic.",
        Subsystem::all().into_iter().map(|task| {
            (
                [("task", task.as_str())],
                m.task_restarts.get(&task).copied().unwrap_or(0),
            )
        }),
    )?;
    gauges(
        enc,
        "nodeproof_task_stalled",
        "1 when the subsystem has not completed a round within three of its periods, or none yet (what /healthz/<task> fails on); 0 when it has.",
        s.tasks_on_time
            .iter()
            .map(|(task, on_time)| ([("task", task.as_str())], u64::from(!on_time))),
    )?;
    counter(
        enc,
        "nodeproof_config_reloads",
        "Successful SIGHUP reloads.",
        m.reloads,
    )?;
    // The main loop is what /healthz and systemd's watchdog watch; a served
    // /metrics does not prove it runs (the HTTP server is its own task), so
    // alerts compare this with Prometheus' `time()`.
    family(
        enc,
        "nodeproof_heartbeat_timestamp_seconds",
        "When the main loop last went round (Unix time, seconds); absent before its first round.",
        MetricType::Gauge,
        s.heartbeat
            .map(|t| (NO_LABELS, ConstGauge::new(unix_seconds(t))))
            .into_iter(),
    )
}

/// The per-device usage families (`nodeproof_gpu::usage`), labelled with
/// the GPU, the device held and its holder (empty pod labels: held by no
/// running pod, by design). A value NVML did not give has no sample.
fn usage(enc: &mut DescriptorEncoder, rows: &[UsageRow]) -> fmt::Result {
    let labels = |r: &UsageRow| {
        [
            ("gpu", r.gpu.to_string()),
            ("uuid", r.uuid.clone()),
            ("device", r.device.clone()),
            ("namespace", r.holder.namespace.clone()),
            ("pod", r.holder.pod.clone()),
            ("container", r.holder.container.clone()),
        ]
    };
    gauges(
        enc,
        "nodeproof_gpu_utilization_ratio",
        "Fraction of NVML's last sample period in which a kernel ran on the GPU, by the device held and its holder (empty pod labels: held by no running pod).",
        rows.iter()
            .filter_map(|r| Some((labels(r), r.utilization_ratio?))),
    )?;
    gauges(
        enc,
        "nodeproof_gpu_memory_used_bytes",
        "Device memory in use on the GPU or MIG instance held, by its holder.",
        rows.iter()
            .filter_map(|r| Some((labels(r), r.memory?.used_bytes))),
    )?;
    gauges(
        enc,
        "nodeproof_gpu_memory_total_bytes",
        "Device memory of the GPU or MIG instance held, by its holder.",
        rows.iter()
            .filter_map(|r| Some((labels(r), r.memory?.total_bytes))),
    )?;
    gauges(
        enc,
        "nodeproof_gpu_temperature_celsius",
        "GPU core temperature (a MIG instance's is its GPU's), by the device held and its holder.",
        rows.iter()
            .filter_map(|r| Some((labels(r), u64::from(r.temperature_celsius?)))),
    )?;
    gauges(
        enc,
        "nodeproof_gpu_power_watts",
        "GPU power draw (a MIG instance's is its GPU's), by the device held and its holder.",
        rows.iter()
            .filter_map(|r| Some((labels(r), r.power_watts?))),
    )?;
    counters(
        enc,
        "nodeproof_gpu_ecc_errors",
        "ECC errors since the driver loaded (volatile), corrected or uncorrected (a MIG instance's are its GPU's), by the device held and its holder.",
        rows.iter().flat_map(|r| {
            EccError::ALL.into_iter().filter_map(move |kind| {
                let [g, u, d, n, p, c] = labels(r);
                Some(([g, u, d, n, p, c, ("error", kind.as_str().to_string())], r.ecc(kind)?))
            })
        }),
    )
}

/// Seconds since the Unix epoch (negative before it: a clock set far back
/// still gives a sample, and a very stale one).
fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// The label set of a family's only, unlabelled sample.
const NO_LABELS: [(&str, &str); 0] = [];

/// A finding's status as a label: lower case, as `-o json` spells it.
fn status_label(status: nodeproof_findings::Status) -> &'static str {
    use nodeproof_findings::Status;
    match status {
        Status::Ok => "ok",
        Status::Warning => "warning",
        Status::Failed => "failed",
        Status::Skipped => "skipped",
    }
}

/// A gauge family: HELP, TYPE, one sample per label set.
fn gauges<L: EncodeLabelSet, N: EncodeGaugeValue + fmt::Debug>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, N)>,
) -> fmt::Result {
    let samples = samples.into_iter().map(|(l, v)| (l, ConstGauge::new(v)));
    family(enc, name, help, MetricType::Gauge, samples)
}

/// A counter family (`name` without `_total`): HELP, TYPE, one sample per label set.
fn counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let samples = samples.into_iter().map(|(l, v)| (l, ConstCounter::new(v)));
    family(enc, name, help, MetricType::Counter, samples)
}

/// Described even without samples: the family exists, nothing counted yet.
fn family<L: EncodeLabelSet, M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric_type: MetricType,
    samples: impl Iterator<Item = (L, M)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, metric_type)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A counter without labels.
fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    let counter = ConstCounter::new(value);
    counter.encode(enc.encode_descriptor(name, help, None, counter.metric_type())?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use nodeproof_findings::ConditionType;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::daemon::state::CheckState;
    use crate::pods::denials::PodDenialTotal;
    use crate::pods::gpu_faults::GpuFaultTotal;
    use nodeproof_findings::Condition;
    use nodeproof_gpu::policy::XidClass;
    use nodeproof_gpu::{DeviceHealth, GpuHealth, GpuMetrics};
    use nodeproof_report::denial_change::PreviousVerdict;

    /// A pod name no API server would accept, to see the escaping.
    const ODD: &str = "we\"ird\\pod\nname";

    #[derive(Debug, PartialEq)]
    struct Sample {
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    }

    fn metric_name(s: &str) -> Option<(&str, &str)> {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(s.len());
        let first = s.chars().next()?;
        (end > 0 && !first.is_ascii_digit()).then(|| s.split_at(end))
    }

    /// `name{k="v",...} value`, label values unescaped (`\\`, `\"`, `\n`
    /// only, as OpenMetrics allows); `None` for anything else.
    fn sample(line: &str) -> Option<Sample> {
        let (name, mut rest) = metric_name(line)?;
        let mut labels = Vec::new();
        if let Some(r) = rest.strip_prefix('{') {
            rest = r;
            loop {
                let (key, r) = metric_name(rest)?;
                let mut chars = r.strip_prefix("=\"")?.char_indices();
                let mut value = String::new();
                let end = loop {
                    match chars.next()? {
                        (i, '"') => break i,
                        (_, '\\') => value.push(match chars.next()?.1 {
                            '\\' => '\\',
                            '"' => '"',
                            'n' => '\n',
                            _ => return None,
                        }),
                        (_, '\n') => return None,
                        (_, c) => value.push(c),
                    }
                };
                labels.push((key.to_string(), value));
                rest = &r[2 + end + 1..];
                if let Some(r) = rest.strip_prefix(',') {
                    rest = r;
                } else {
                    rest = rest.strip_prefix('}')?;
                    break;
                }
            }
        }
        let value = rest.strip_prefix(' ')?.parse().ok()?;
        Some(Sample {
            name: name.to_string(),
            labels,
            value,
        })
    }

    /// Checks the whole exposition: every line a HELP/TYPE comment, a
    /// sample of a family described before it, or the final `# EOF`.
    /// Returns each family's type and samples.
    fn parse(body: &str) -> BTreeMap<String, (String, Vec<Sample>)> {
        let body = body
            .strip_suffix("# EOF\n")
            .unwrap_or_else(|| panic!("no final # EOF:\n{body}"));
        let mut families: BTreeMap<String, (String, Vec<Sample>)> = BTreeMap::new();
        let mut help: Option<String> = None;
        let mut current: Option<String> = None;
        for line in body.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, text) = rest.split_once(' ').unwrap();
                assert!(!text.is_empty() && !families.contains_key(name), "{line}");
                help = Some(name.to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(help.as_deref(), Some(name), "TYPE without HELP: {line}");
                assert!(["gauge", "counter"].contains(&kind), "{line}");
                families.insert(name.to_string(), (kind.to_string(), Vec::new()));
                current = Some(name.to_string());
            } else {
                let s = sample(line).unwrap_or_else(|| panic!("not a sample: {line:?}"));
                let family = current.as_deref().expect("sample before any TYPE");
                let (kind, samples) = families.get_mut(family).unwrap();
                let want = if kind == "counter" {
                    format!("{family}_total")
                } else {
                    family.to_string()
                };
                assert_eq!(s.name, want, "{line}");
                samples.push(s);
            }
        }
        families
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn value(
        families: &BTreeMap<String, (String, Vec<Sample>)>,
        family: &str,
        l: &[(&str, &str)],
    ) -> f64 {
        let want = labels(l);
        families[family]
            .1
            .iter()
            .find(|s| s.labels == want)
            .unwrap_or_else(|| panic!("no {family}{l:?} in {:?}", families[family]))
            .value
    }

    fn shared() -> Arc<Shared> {
        let shared = Arc::new(Shared::default());
        shared.set_check(
            Subsystem::Profiles,
            CheckState {
                conditions: vec![Condition {
                    kind: ConditionType::SeccompProfilesReady,
                    status: ConditionStatus::False,
                    reason: "ProfileRejected".into(),
                    message: "m".into(),
                }],
                summary: String::new(),
                progress: Some(Instant::now()),
                period: Duration::from_secs(1),
            },
        );
        shared
    }

    #[test]
    fn the_whole_exposition_parses_with_every_family_and_escaped_labels() {
        let shared = shared();
        shared.main_progress(
            Instant::now(),
            UNIX_EPOCH + Duration::from_millis(1_764_614_400_250),
            Duration::from_secs(1),
        );
        shared.metrics(|m| {
            m.denials.insert(("mkdir".into(), ODD.into(), "denied"), 7);
            m.denials
                .insert(("ptrace".into(), String::new(), "denied"), 2);
            m.denials
                .insert(("clone3".into(), ODD.into(), "intended-fallback"), 5);
            m.profile_verdicts.insert("ok", 3);
            m.profile_verdicts.insert("rejected", 1);
            m.profile_revalidations = 5;
            m.profile_lints = 6;
            m.ebpf_strategy = Some(Strategy::TpBtf);
            m.ebpf_dropped = 11;
            m.pod_denials = Some(vec![PodDenialTotal {
                namespace: "ml".into(),
                pod: ODD.into(),
                container: "c\\1".into(),
                syscall: "mkdir".into(),
                action: "errno",
                count: 21,
            }]);
            m.pod_denials_after_change = Some(
                [
                    (PreviousVerdict::Allowed, 40),
                    (PreviousVerdict::Denied, 3),
                    (PreviousVerdict::Unknown, 0),
                ]
                .into(),
            );
            m.gpu = Some(GpuMetrics {
                driver_ready: Some(true),
                health: vec![
                    GpuHealth {
                        gpu: 0,
                        uuid: "GPU-0".into(),
                        check: "all",
                        ok: false,
                    },
                    GpuHealth {
                        gpu: 0,
                        uuid: "GPU-0".into(),
                        check: "xid",
                        ok: false,
                    },
                ],
                xid_totals: [((0, XidClass::Fatal), 1), ((0, XidClass::Ignored), 4)].into(),
                devices: vec![DeviceHealth {
                    plugin: "nvidia.com/gpu".into(),
                    device: "GPU-0".into(),
                    healthy: false,
                }],
                node: "node-a".into(),
            });
            m.gpu_faults = Some(vec![GpuFaultTotal {
                namespace: "ml".into(),
                pod: "vllm-0".into(),
                container: "vllm".into(),
                xid: "79".into(),
                count: 1,
            }]);
            m.gpu_usage = usage_rows();
            m.reporter_errors = 2;
            m.reporter_dropped.insert(
                (
                    nodeproof_report::driver::WriteKind::Event,
                    nodeproof_report::reporter::Refusal::NamespaceTerminating,
                ),
                4,
            );
            m.task_restarts.insert(Subsystem::Gpu, 1);
            m.reloads = 3;
            m.set_findings(
                &[nodeproof_findings::Check::SECCOMP_TRACING],
                &[nodeproof_findings::Finding {
                    check: nodeproof_findings::Check::SECCOMP_TRACING,
                    subject: "eBPF".into(),
                    status: nodeproof_findings::Status::Warning,
                    reason: nodeproof_findings::reason::TracingReason::StrategyLoaded.into(),
                    message: String::new(),
                    detail: None,
                }],
            );
        });
        let body = render(&registry(shared)).unwrap();
        let f = parse(&body);
        let kinds: Vec<(&str, &str)> = f
            .iter()
            .map(|(n, (k, _))| (n.as_str(), k.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("nodeproof_build_info", "gauge"),
                ("nodeproof_check_findings", "gauge"),
                ("nodeproof_condition", "gauge"),
                ("nodeproof_config_reloads", "counter"),
                ("nodeproof_ebpf_dropped_samples", "counter"),
                ("nodeproof_gpu_device_health", "gauge"),
                ("nodeproof_gpu_driver_ready", "gauge"),
                ("nodeproof_gpu_ecc_errors", "counter"),
                ("nodeproof_gpu_faults", "counter"),
                ("nodeproof_gpu_health", "gauge"),
                ("nodeproof_gpu_memory_total_bytes", "gauge"),
                ("nodeproof_gpu_memory_used_bytes", "gauge"),
                ("nodeproof_gpu_power_watts", "gauge"),
                ("nodeproof_gpu_temperature_celsius", "gauge"),
                ("nodeproof_gpu_utilization_ratio", "gauge"),
                ("nodeproof_gpu_xid_errors", "counter"),
                ("nodeproof_heartbeat_timestamp_seconds", "gauge"),
                ("nodeproof_pod_seccomp_denials", "counter"),
                ("nodeproof_pod_seccomp_denials_after_change", "counter"),
                ("nodeproof_profile_lints", "counter"),
                ("nodeproof_profile_revalidations", "counter"),
                ("nodeproof_profile_verdicts", "gauge"),
                ("nodeproof_reporter_dropped", "counter"),
                ("nodeproof_reporter_errors", "counter"),
                ("nodeproof_seccomp_denials", "counter"),
                ("nodeproof_seccomp_tracing_strategy", "gauge"),
                ("nodeproof_task_restarts", "counter"),
                ("nodeproof_task_stalled", "gauge"),
            ],
            "{body}"
        );
        // The odd name comes back as it went in, and is escaped on the wire.
        assert_eq!(
            value(
                &f,
                "nodeproof_seccomp_denials",
                &[("syscall", "mkdir"), ("pod", ODD), ("outcome", "denied")]
            ),
            7.0
        );
        assert_eq!(
            value(
                &f,
                "nodeproof_seccomp_denials",
                &[("syscall", "ptrace"), ("pod", ""), ("outcome", "denied")]
            ),
            2.0
        );
        assert_eq!(
            value(
                &f,
                "nodeproof_seccomp_denials",
                &[
                    ("syscall", "clone3"),
                    ("pod", ODD),
                    ("outcome", "intended-fallback")
                ]
            ),
            5.0
        );
        assert!(
            body.contains("nodeproof_seccomp_denials_total{syscall=\"mkdir\",pod=\"we\\\"ird\\\\pod\\nname\",outcome=\"denied\"} 7\n"),
            "{body}"
        );
        assert_eq!(
            value(
                &f,
                "nodeproof_pod_seccomp_denials",
                &[
                    ("namespace", "ml"),
                    ("pod", ODD),
                    ("container", "c\\1"),
                    ("syscall", "mkdir"),
                    ("action", "errno")
                ]
            ),
            21.0
        );
        for (previous, n) in [("allowed", 40.0), ("denied", 3.0), ("unknown", 0.0)] {
            assert_eq!(
                value(
                    &f,
                    "nodeproof_pod_seccomp_denials_after_change",
                    &[("previous", previous)]
                ),
                n
            );
        }
        assert_eq!(
            value(
                &f,
                "nodeproof_build_info",
                &[
                    ("version", env!("CARGO_PKG_VERSION")),
                    ("revision", env!("NODEPROOF_BUILD_REVISION"))
                ]
            ),
            1.0
        );
        // One series per status, 1 for the current one.
        let conditions: Vec<(String, f64)> = f["nodeproof_condition"]
            .1
            .iter()
            .map(|s| (s.labels[1].1.clone(), s.value))
            .collect();
        assert_eq!(
            conditions,
            [
                ("True".into(), 0.0),
                ("False".into(), 1.0),
                ("Unknown".into(), 0.0)
            ]
        );
        assert_eq!(
            value(&f, "nodeproof_profile_verdicts", &[("outcome", "rejected")]),
            1.0
        );
        assert_eq!(value(&f, "nodeproof_profile_revalidations", &[]), 5.0);
        assert_eq!(value(&f, "nodeproof_profile_lints", &[]), 6.0);
        assert_eq!(
            value(
                &f,
                "nodeproof_seccomp_tracing_strategy",
                &[("strategy", "tp_btf")]
            ),
            1.0
        );
        assert_eq!(
            value(
                &f,
                "nodeproof_seccomp_tracing_strategy",
                &[("strategy", "fexit")]
            ),
            0.0
        );
        assert_eq!(value(&f, "nodeproof_ebpf_dropped_samples", &[]), 11.0);
        assert_eq!(value(&f, "nodeproof_gpu_driver_ready", &[]), 1.0);
        assert_eq!(
            value(
                &f,
                "nodeproof_gpu_health",
                &[("gpu", "0"), ("uuid", "GPU-0"), ("check", "xid")]
            ),
            0.0
        );
        assert_eq!(
            value(
                &f,
                "nodeproof_gpu_xid_errors",
                &[("gpu", "0"), ("class", "ignored")]
            ),
            4.0
        );
        assert_eq!(
            value(
                &f,
                "nodeproof_gpu_device_health",
                &[
                    ("plugin", "nvidia.com/gpu"),
                    ("node", "node-a"),
                    ("device", "GPU-0")
                ]
            ),
            0.0
        );
        assert_eq!(
            value(
                &f,
                "nodeproof_gpu_faults",
                &[
                    ("namespace", "ml"),
                    ("pod", "vllm-0"),
                    ("container", "vllm"),
                    ("xid", "79")
                ]
            ),
            1.0
        );
        let held = [
            ("gpu", "0"),
            ("uuid", "GPU-0"),
            ("device", "GPU-0"),
            ("namespace", "ml"),
            ("pod", "vllm-0"),
            ("container", "vllm"),
        ];
        assert_eq!(value(&f, "nodeproof_gpu_utilization_ratio", &held), 0.87);
        assert_eq!(value(&f, "nodeproof_gpu_power_watts", &held), 412.5);
        assert_eq!(
            value(&f, "nodeproof_gpu_memory_used_bytes", &held),
            3.0 * 1024.0 * 1024.0 * 1024.0
        );
        assert_eq!(value(&f, "nodeproof_gpu_temperature_celsius", &held), 71.0);
        let mut ecc = held.to_vec();
        ecc.push(("error", "corrected"));
        assert_eq!(value(&f, "nodeproof_gpu_ecc_errors", &ecc), 9.0);
        assert!(
            body.contains("nodeproof_gpu_ecc_errors_total{gpu=\"0\",uuid=\"GPU-0\",device=\"GPU-0\",namespace=\"ml\",pod=\"vllm-0\",container=\"vllm\",error=\"uncorrected\"} 0\n"),
            "{body}"
        );
        // The MIG instance held by no pod: empty pod labels; no utilization
        // (NVML gives none in MIG mode) and no power (not supported): no
        // sample, not a zero.
        let free = [
            ("gpu", "1"),
            ("uuid", "GPU-1"),
            ("device", "MIG-1-0"),
            ("namespace", ""),
            ("pod", ""),
            ("container", ""),
        ];
        assert_eq!(value(&f, "nodeproof_gpu_memory_total_bytes", &free), 1e10);
        for absent in [
            "nodeproof_gpu_utilization_ratio",
            "nodeproof_gpu_power_watts",
        ] {
            assert_eq!(f[absent].1.len(), 1, "{absent}: {body}");
        }
        assert_eq!(value(&f, "nodeproof_reporter_errors", &[]), 2.0);
        assert_eq!(
            value(
                &f,
                "nodeproof_reporter_dropped",
                &[("kind", "event"), ("reason", "namespace_terminating")]
            ),
            4.0
        );
        // Every task has its series, restarted or not.
        assert_eq!(f["nodeproof_task_restarts"].1.len(), Subsystem::all().len());
        assert_eq!(
            value(&f, "nodeproof_task_restarts", &[("task", "gpu")]),
            1.0
        );
        assert_eq!(
            value(&f, "nodeproof_task_restarts", &[("task", "pods")]),
            0.0
        );
        assert_eq!(value(&f, "nodeproof_config_reloads", &[]), 3.0);
        // Only the profiles check has published, a round just now.
        assert_eq!(f["nodeproof_task_stalled"].1.len(), 1, "{body}");
        assert_eq!(
            value(&f, "nodeproof_task_stalled", &[("task", "profiles")]),
            0.0
        );
        assert_eq!(
            value(&f, "nodeproof_heartbeat_timestamp_seconds", &[]),
            1_764_614_400.25
        );
    }

    fn usage_rows() -> Vec<UsageRow> {
        use nodeproof_gpu::probe::MemoryUsage;
        use nodeproof_gpu::usage::Holder;
        let held = UsageRow {
            gpu: 0,
            uuid: "GPU-0".into(),
            device: "GPU-0".into(),
            holder: Holder {
                namespace: "ml".into(),
                pod: "vllm-0".into(),
                container: "vllm".into(),
            },
            utilization_ratio: Some(0.87),
            memory: Some(MemoryUsage {
                used_bytes: 3 << 30,
                total_bytes: 80 << 30,
            }),
            temperature_celsius: Some(71),
            power_watts: Some(412.5),
            ecc_corrected: Some(9),
            ecc_uncorrected: Some(0),
        };
        let free = UsageRow {
            gpu: 1,
            uuid: "GPU-1".into(),
            device: "MIG-1-0".into(),
            holder: Default::default(),
            utilization_ratio: None,
            memory: Some(MemoryUsage {
                used_bytes: 0,
                total_bytes: 10_000_000_000,
            }),
            temperature_celsius: Some(40),
            power_watts: None,
            ecc_corrected: Some(0),
            ecc_uncorrected: Some(0),
        };
        vec![held, free]
    }

    #[test]
    fn families_of_subsystems_that_have_not_reported_are_absent() {
        let shared = shared();
        let body = render(&registry(shared.clone())).unwrap();
        let f = parse(&body);
        for absent in [
            "nodeproof_pod_seccomp_denials",
            "nodeproof_pod_seccomp_denials_after_change",
            "nodeproof_gpu_driver_ready",
            "nodeproof_gpu_health",
            "nodeproof_gpu_xid_errors",
        ] {
            assert!(!f.contains_key(absent), "{absent} in\n{body}");
        }
        // Nothing counted yet: the family is described, with no series.
        assert!(f["nodeproof_seccomp_denials"].1.is_empty(), "{body}");
        // No heartbeat before the main loop's first round.
        assert!(
            f["nodeproof_heartbeat_timestamp_seconds"].1.is_empty(),
            "{body}"
        );
        // A node without NVIDIA devices: the GPU families, no driver sample.
        shared.metrics(|m| m.gpu = Some(GpuMetrics::default()));
        let f = parse(&render(&registry(shared)).unwrap());
        assert_eq!(f["nodeproof_gpu_driver_ready"].1, []);
        assert_eq!(f["nodeproof_gpu_health"].1, []);
    }

    #[test]
    fn the_heartbeat_is_unix_seconds_even_before_the_epoch() {
        assert_eq!(unix_seconds(UNIX_EPOCH + Duration::from_millis(1500)), 1.5);
        assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_secs(2)), -2.0);
    }

    #[test]
    fn the_parser_refuses_what_is_not_openmetrics() {
        assert_eq!(
            sample("a_b{x=\"1\"} 2").unwrap().labels,
            labels(&[("x", "1")])
        );
        for bad in [
            "a{x=\"1\n\"} 2",
            "a{x=\"\\t\"} 2",
            "a{x=1} 2",
            "a 2 3 4",
            "1a 2",
            "a{x=\"1\"}2",
            "a",
        ] {
            assert_eq!(sample(bad), None, "{bad:?}");
        }
    }
}
