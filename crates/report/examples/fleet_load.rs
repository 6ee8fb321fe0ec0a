//! The load nodeproof puts on the API server, from a simulated fleet:
//! N real `ReportLoop`s (the daemon's defaults) against an in-memory API
//! server on a simulated clock. docs/reporting.md ("Load on the API
//! server") has the command and the figures.
//!
//! ```text
//! cargo run --release -p nodeproof-report --example fleet_load [-- NODES]
//! ```

#[path = "../tests/support/fleet.rs"]
mod fleet;

use std::time::{Duration, Instant};

use fleet::{at, Kind, Scenario, Server};
use nodeproof_report::ratelimit::LoadPolicy;

/// An assumed mean latency of one write, to turn a request rate into
/// requests in flight (Little's law: in flight = rate × latency).
const WRITE_LATENCY: Duration = Duration::from_millis(50);
/// kube-apiserver `--max-mutating-requests-inflight` default.
const MUTATING_INFLIGHT: f64 = 200.0;
/// kube-apiserver `--max-requests-inflight` default.
const READONLY_INFLIGHT: f64 = 400.0;

fn writes(s: &Server, from: Duration, to: Duration) -> u64 {
    [Kind::Status, Kind::Event, Kind::Other]
        .into_iter()
        .map(|k| s.ok_between(k, at(from), at(to)))
        .sum()
}

fn m(minutes: u64) -> Duration {
    Duration::from_secs(60 * minutes)
}

fn timed(label: &str, s: &Scenario) -> std::rc::Rc<Server> {
    let t = Instant::now();
    let out = fleet::run(s);
    eprintln!(
        "simulated {label}: {} nodes, {} min, {:.1} s",
        s.nodes,
        s.duration.as_secs() / 60,
        t.elapsed().as_secs_f64()
    );
    out
}

fn main() {
    let nodes: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("NODES: a number"))
        .unwrap_or(5000);
    let n = nodes as f64;
    let wall = Instant::now();
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut row = |k: &str, v: String| rows.push((k.to_string(), v));

    // Steady state and the baseline for the incident: 90 min, measured 30..90.
    let base = Scenario::daemon(nodes, m(90));
    let steady = timed("steady", &base);
    let (from, to) = (m(30), m(90));
    let per_node_hour = |k| steady.ok_between(k, at(from), at(to)) as f64 / n;
    row(
        "steady: status writes / node / hour",
        format!("{:.2}", per_node_hour(Kind::Status)),
    );
    row(
        "steady: event writes / node / hour",
        format!("{:.2}", per_node_hour(Kind::Event)),
    );
    let all = steady.attempts_between(at(from), at(to)) as f64;
    row(
        "steady: all requests / node / hour",
        format!("{:.2}", all / n),
    );
    row(
        "steady: fleet-wide requests / s (mean, peak 1 s)",
        format!(
            "{:.1}, {}",
            all / 3600.0,
            steady.peak_rps(at(from), at(to)).0
        ),
    );

    // Incident: every node's GPUHealthy check says False from 60:00 to 70:00.
    let incident = Scenario {
        gpu_bad: Some((m(60), m(60) + m(10))),
        ..base.clone()
    };
    let inc = timed("incident", &incident);
    let (w0, w1) = (m(59), m(90));
    let (peak, when) = inc.peak_rps(at(w0), at(w1));
    let extra = writes(&inc, w0, w1) as i64 - writes(&steady, w0, w1) as i64;
    row(
        "incident: peak requests / s fleet-wide",
        format!(
            "{peak} (at {:.0} s after the flip)",
            when.duration_since(at(m(60)))
                .unwrap_or_default()
                .as_secs_f64()
        ),
    );
    row(
        "incident: extra writes (total, per node)",
        format!("{extra}, {:.1}", extra as f64 / n),
    );
    let spread = Scenario {
        load: LoadPolicy {
            change_spread: Duration::from_secs(30),
            ..incident.load
        },
        ..incident.clone()
    };
    let (spread_peak, _) =
        timed("incident, change-spread-s = 30", &spread).peak_rps(at(w0), at(w1));
    let inflight = f64::from(peak) * WRITE_LATENCY.as_secs_f64();
    row(
        "incident: writes in flight at peak (50 ms each)",
        format!(
            "{inflight:.1} = {:.1} % of --max-mutating-requests-inflight={MUTATING_INFLIGHT} \
             ({:.1} % of the 600 total with --max-requests-inflight={READONLY_INFLIGHT})",
            100.0 * inflight / MUTATING_INFLIGHT,
            100.0 * inflight / (MUTATING_INFLIGHT + READONLY_INFLIGHT)
        ),
    );

    let inflight = f64::from(spread_peak) * WRITE_LATENCY.as_secs_f64();
    row(
        "incident, change-spread-s = 30: peak requests / s, in flight",
        format!(
            "{spread_peak}, {inflight:.1} = {:.1} % of the mutating limit",
            100.0 * inflight / MUTATING_INFLIGHT
        ),
    );

    // Outage: the API server fails everything from 60:00 to 70:00.
    let outage = Scenario {
        outage: Some((m(60), m(60) + m(10))),
        ..base.clone()
    };
    let out = timed("outage", &outage);
    let back = m(60) + m(10);
    let during = out.attempts_between(at(m(60)), at(back)) as f64 / 600.0;
    row(
        "outage 10 min: retries / s fleet-wide while down (mean)",
        format!("{during:.1}"),
    );
    outage_rows(&mut row, &out, back, "outage 10 min", "recovery");

    // The fleet restarted into an outage (every agent starts at 0:00 while
    // the API server is down until 10:00): the synchronised worst case.
    let cold = Scenario {
        outage: Some((Duration::ZERO, m(10))),
        duration: m(20),
        ..base.clone()
    };
    let cold_out = timed("restart into outage", &cold);
    outage_rows(
        &mut row,
        &cold_out,
        m(10),
        "restart into outage",
        "recovery",
    );

    // A rollout restarts every agent at 0:00, API server up.
    let rollout = Scenario {
        duration: m(5),
        ..base.clone()
    };
    let roll = timed("rollout", &rollout);
    outage_rows(&mut row, &roll, Duration::ZERO, "rollout restart", "start");
    let herd = Scenario {
        load: LoadPolicy {
            start_spread: Duration::ZERO,
            ..rollout.load
        },
        ..rollout.clone()
    };
    let herd_out = timed("rollout, start-spread-s = 0", &herd);
    outage_rows(
        &mut row,
        &herd_out,
        Duration::ZERO,
        "rollout, start-spread-s = 0",
        "start",
    );

    println!(
        "nodeproof fleet load: {nodes} simulated nodes, daemon defaults \
         (heartbeat 300 s ± 10 %, qps 0.2, burst 10, start spread 30 s, backoff 1 s doubling to 20 s, +0..50 % jitter, \
         check rounds every 10 s); {:.1} s wall\n",
        wall.elapsed().as_secs_f64()
    );
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    println!("| {:width$} | value |", "figure");
    println!("|{}|-------|", "-".repeat(width + 2));
    for (k, v) in &rows {
        println!("| {k:width$} | {v} |");
    }
}

/// Peak and convergence after `back` (the recovery, or the start).
fn outage_rows(
    row: &mut impl FnMut(&str, String),
    s: &Server,
    back: Duration,
    label: &str,
    after: &str,
) {
    let (peak, when) = s.peak_rps(at(back), at(back + m(5)));
    row(
        &format!("{label}: max requests in any 1 s after {after}"),
        format!(
            "{peak} (at +{:.1} s)",
            when.duration_since(at(back))
                .unwrap_or_default()
                .as_secs_f64()
        ),
    );
    row(
        &format!("{label}: all nodes written, s after {after}"),
        match s.all_written_since(at(back)) {
            Some(t) => format!(
                "{:.1} s",
                t.duration_since(at(back)).unwrap_or_default().as_secs_f64()
            ),
            None => "never (within the run)".into(),
        },
    );
}
