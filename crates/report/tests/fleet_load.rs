//! Fleet-safe load, checked on the simulated fleet (`support/fleet.rs`):
//! no thundering herd after an outage, the token bucket defers instead of
//! failing, and the steady state is what docs/reporting.md says.

mod support;

use std::rc::Rc;
use std::time::Duration;

use nodeproof_report::driver::{LoopConfig, ReportLoop};
use nodeproof_report::events::{EventType, ObjectRef};
use nodeproof_report::ratelimit::LoadPolicy;
use support::fleet::{self, at, FakeNode, Kind, Scenario, Server};

fn m(minutes: u64) -> Duration {
    Duration::from_secs(60 * minutes)
}

/// 200 agents restarted together while the API server is down for 10 min
/// (the synchronised worst case: same start, same failures), then it comes
/// back. Every agent needs a GET and a PATCH. In step, that would be 400
/// requests in one second; with the backoff's jitter (each retry at the
/// cap 20..30 s after the last) the retries are spread over at least 10 s:
/// 200 × 2 / 10 s = 40 a second at worst, 200 × 2 / 25 s = 16 on average.
/// The bound: the worst even spread, plus a third for the randomness of
/// 200 draws; an eighth of the in-step 400.
const RECOVERY_RPS_BOUND: u32 = 54;

#[test]
fn recovery_after_a_10_minute_outage_has_no_thundering_herd() {
    let mut s = Scenario {
        outage: Some((Duration::ZERO, m(10))),
        ..Scenario::daemon(200, m(15))
    };
    // Even without the start spread (every first GET fails at 0:00 in
    // step): the backoff's jitter alone must spread the recovery.
    s.load.start_spread = Duration::ZERO;
    let server = fleet::run(&s);
    let back = at(m(10));
    let (peak, when) = server.peak_rps(back, at(m(15)));
    assert!(
        peak <= RECOVERY_RPS_BOUND,
        "{peak} requests in the second from {when:?}"
    );
    // Bounded convergence too: every node written within the longest
    // retry (30 s) plus the 10 s between check rounds.
    let done = server.all_written_since(back).expect("every node written");
    let took = done.duration_since(back).unwrap();
    assert!(took <= Duration::from_secs(40), "{took:?}");
    // Not trivially met: the retries did reach the server during the outage.
    assert!(server.attempts_between(at(Duration::ZERO), back) > 200 * 10);
    assert_eq!(server.ok_between(Kind::Read, back, at(m(15))), 200);
}

/// The same fleet restarted with the API server up: the first GET + PATCH
/// of 200 agents spread over the 30 s window, not all in the first second.
#[test]
fn a_fleet_restart_spreads_its_first_writes() {
    let spread = fleet::run(&Scenario::daemon(200, m(2)));
    let (peak, _) = spread.peak_rps(at(Duration::ZERO), at(m(2)));
    assert!(peak <= RECOVERY_RPS_BOUND, "{peak}");
    let done = spread.all_written_since(at(Duration::ZERO)).unwrap();
    assert!(done <= at(Duration::from_secs(31)), "{done:?}");
    // Without the spread every agent's first flush is in the first second.
    let mut herd = Scenario::daemon(200, m(2));
    herd.load.start_spread = Duration::ZERO;
    let herd = fleet::run(&herd);
    // (their GETs: the first PATCH waits for the first check round).
    assert!(herd.peak_rps(at(Duration::ZERO), at(m(2))).0 >= 200);
}

#[test]
fn steady_state_is_12_status_writes_an_hour_and_jittered() {
    let s = Scenario::daemon(100, m(4 * 60));
    let server = fleet::run(&s);
    // Hours 1..4: 300 s ± 10 % heartbeats average 12 an hour.
    let per_node_hour =
        server.ok_between(Kind::Status, at(m(60)), at(m(4 * 60))) as f64 / 100.0 / 3.0;
    assert!((11.5..=12.5).contains(&per_node_hour), "{per_node_hour}");
    assert_eq!(server.ok_between(Kind::Event, at(m(0)), at(m(4 * 60))), 0);
    // The heartbeats of agents started together drift apart: no second of
    // hour 4 sees more than a handful of the 100 nodes.
    let (peak, _) = server.peak_rps(at(m(3 * 60)), at(m(4 * 60)));
    assert!(peak <= 8, "{peak}");
}

/// One node told about 20 distinct pod problems at once: the bucket
/// (burst 2, 1 a second here) lets 2 out, then one a second, and the
/// deferrals are waits, not failures.
#[test]
fn the_token_bucket_defers_requests_and_nothing_fails() {
    let server = Rc::new(Server::new(at(Duration::ZERO), m(2), 1, None));
    let config = LoopConfig {
        load: LoadPolicy {
            qps: 1.0,
            burst: 2,
            heartbeat_jitter_pct: 0,
            start_spread: Duration::ZERO,
            change_spread: Duration::ZERO,
        },
        ..LoopConfig::default()
    };
    let mut lp = ReportLoop::new(FakeNode::new(0, server.clone()), config, 3);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut now = at(Duration::ZERO);
    // No conditions: the GET and the first event take the burst.
    lp.observe(now, &[]);
    for i in 0..20 {
        let pod = ObjectRef {
            kind: "Pod",
            namespace: "ns".into(),
            name: format!("p{i}"),
            uid: None,
        };
        lp.pod_event(now, pod, EventType::Warning, "ProfileMissing", "x");
    }
    let end = at(m(2));
    while now < end {
        server.set_now(now);
        runtime.block_on(lp.flush(now)).expect("no failure");
        match lp.next_wake(now) {
            Some(t) if t > now => now = t,
            Some(_) => now += Duration::from_millis(1),
            None => break,
        }
    }
    assert_eq!(lp.stats().failures, 0);
    assert_eq!(lp.stats().event_writes, 20);
    assert_eq!(server.ok_between(Kind::Read, at(m(0)), end), 1);
    // 2 + 20 requests at 1/s after a burst of 2: never more than 2 in a second.
    assert!(server.peak_rps(at(m(0)), end).0 <= 2);
    // ... and the last event went out about 20 s in, not later.
    let last20 = server.ok_between(Kind::Event, at(m(0)), at(Duration::from_secs(21)));
    assert_eq!(last20, 20);
}

/// Every node's GPU goes bad at once: without a change spread the fleet
/// writes it within one check interval (10 s); `change-spread-s = 30`
/// spreads it over 40 s, and every node has still written it by then.
#[test]
fn change_spread_flattens_a_fleet_wide_incident() {
    let incident = |change_spread_s: u64| {
        let mut s = Scenario::daemon(200, m(8));
        s.gpu_bad = Some((m(5), m(10)));
        s.load.change_spread = Duration::from_secs(change_spread_s);
        fleet::run(&s)
    };
    let window = (at(m(5)), at(m(8)));
    let prompt = incident(0);
    let spread = incident(30);
    let (p0, _) = prompt.peak_rps(window.0, window.1);
    let (p30, _) = spread.peak_rps(window.0, window.1);
    assert!(p30 * 2 <= p0, "{p30} vs {p0}");
    // Each node: one PATCH and one Warning Event for the flip, within 10 s
    // of checks + 10 s of hysteresis (to-bad 2) + the 30 s spread.
    for s in [&prompt, &spread] {
        assert_eq!(s.ok_between(Kind::Event, window.0, window.1), 200);
        let done = s.all_written_since(at(m(5))).unwrap();
        assert!(done <= at(m(5) + Duration::from_secs(50)), "{done:?}");
    }
}
