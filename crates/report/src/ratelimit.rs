//! Fleet-safe load on the API server: a client-side token bucket for every
//! request, heartbeat jitter, the first write spread over a window after
//! start, and the retry backoff's jitter. Pure: time and randomness (a seed)
//! are arguments, so the fleet simulation (`examples/fleet_load.rs`) and the
//! tests run thousands of agents on a simulated clock.
//!
//! Why it matters: nodeproof writes as `system:node:<name>`, so API Priority
//! and Fairness classifies its requests with the kubelet's own (FlowSchemas
//! `system-node-high` / `system-nodes`; `nodes/status` PATCHes of a node
//! identity share a priority level with the kubelet's node status updates
//! and lease renewals). If 5,000 agents wrote in step, the seats they take are
//! seats the kubelets' status updates wait for, and late node status is what
//! makes the node lifecycle controller mark Nodes NotReady. So nodeproof keeps
//! its own rate far below the kubelet's and never writes in step with the
//! rest of the fleet. docs/reporting.md ("Load on the API server") has the
//! budget and the simulation's figures.

use std::time::{Duration, SystemTime};

/// The knobs (`[report]` `qps`, `burst`, `heartbeat-jitter-pct`,
/// `start-spread-s`; `ReportConfig::load`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadPolicy {
    /// Sustained requests per second of one agent (client-go's token bucket
    /// `qps`). Infinite: no limit.
    pub qps: f64,
    /// Requests one agent may make at once (the bucket's size).
    pub burst: u32,
    /// Each heartbeat period is drawn from `heartbeat ± pct %`.
    pub heartbeat_jitter_pct: u32,
    /// The first request after start waits a per-node offset in `[0, this)`.
    pub start_spread: Duration,
    /// A status change waits a per-node offset in `[0, this)` before it is
    /// written (0: at once), so a fleet-wide incident is not written by
    /// every node within one check interval.
    pub change_spread: Duration,
}

impl LoadPolicy {
    /// No client-side limits at all: the one-shot `check --report` and tests
    /// that pin exact request times. The daemon uses `ReportConfig::load()`.
    pub const UNLIMITED: LoadPolicy = LoadPolicy {
        qps: f64::INFINITY,
        burst: u32::MAX,
        heartbeat_jitter_pct: 0,
        start_spread: Duration::ZERO,
        change_spread: Duration::ZERO,
    };
}

impl Default for LoadPolicy {
    /// The daemon's defaults.
    ///
    /// - `qps = 0.2`, `burst = 10`: the kubelet runs with kubeAPIQPS=50 /
    ///   kubeAPIBurst=100 (KubeletConfiguration defaults since 1.27) and
    ///   client-go's own default is 5/10. nodeproof's steady state is 12
    ///   status PATCHes an hour (0.003/s); a condition transition costs a
    ///   PATCH and an Event (plus a label and a taint write when opted in),
    ///   so 10 at once covers two transitions back to back, and 0.2/s (12 a
    ///   minute) after that bounds a bug or an event storm on one node to a
    ///   250th of what its kubelet may do.
    /// - `heartbeat-jitter-pct = 10`: 300 s becomes 270..330 s, drawn anew
    ///   for every beat, so heartbeats of nodes started together drift apart
    ///   (the kubelet's status loop is `wait.JitterUntil(…, 0.04, …)` for
    ///   the same reason). Symmetric, so the mean stays 12 writes an hour.
    /// - `start-spread-s = 30`: 5,000 agents restarted by one rollout or
    ///   one config push make their first GET + PATCH over 30 s (~330/s),
    ///   not in one second; a first write 0..30 s late is harmless (the
    ///   Node keeps the conditions of before the restart, with their times).
    /// - `change-spread-s = 0`: a change is written when it is seen (pod
    ///   problems within 5 s, docs/reporting.md). When every node's GPU goes
    ///   bad at once, that is the whole fleet within one check interval
    ///   (10 s); fleets of thousands of nodes set it (the simulation shows
    ///   30 s cutting the peak about 2.7-fold, 1,134 to 412 a second).
    fn default() -> Self {
        LoadPolicy {
            qps: 0.2,
            burst: 10,
            heartbeat_jitter_pct: 10,
            start_spread: Duration::from_secs(30),
            change_spread: Duration::ZERO,
        }
    }
}

/// Limits accepted by `ReportConfig::problems` (named there by key).
pub const MAX_QPS: f64 = 50.0;
pub const MAX_BURST: u32 = 100;
pub const MAX_HEARTBEAT_JITTER_PCT: u32 = 50;
pub const MAX_START_SPREAD_S: u64 = 3600;
pub const MAX_CHANGE_SPREAD_S: u64 = 300;

/// A token bucket like client-go's `flowcontrol.NewTokenBucketRateLimiter`
/// (qps, burst): full at start, refilled at `qps` tokens a second up to
/// `burst`, one token per request. Unlike client-go's it never blocks: it
/// says how long to wait, and the loop sleeps on its own clock.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    at: Option<SystemTime>,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: u32) -> Self {
        TokenBucket {
            qps,
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            at: None,
        }
    }

    fn unlimited(&self) -> bool {
        !self.qps.is_finite()
    }

    fn refill(&mut self, now: SystemTime) {
        if let Some(at) = self.at {
            // A clock stepped back refills nothing (and takes nothing back)
            // now, and refilling goes on from the new time: anchored at the
            // old one, nothing would refill until the clock caught up, and
            // writes would stop for as long as the step.
            let elapsed = now.duration_since(at).unwrap_or_default().as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        }
        self.at = Some(now);
    }

    /// A token spent on a request the API server never answered comes back
    /// (see `limited::Limited`).
    pub fn give_back(&mut self) {
        if !self.unlimited() {
            self.tokens = (self.tokens + 1.0).min(self.burst);
        }
    }

    /// Spend a token at `now`, or say how long until one is there.
    pub fn try_take(&mut self, now: SystemTime) -> Result<(), Duration> {
        if self.unlimited() {
            return Ok(());
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let missing = 1.0 - self.tokens;
        // Rounded up to the next millisecond so that waiting that long
        // always finds the token (no busy retry on float rounding).
        let wait = Duration::from_secs_f64(missing / self.qps);
        Err(Duration::from_millis(wait.as_millis() as u64 + 1))
    }
}

/// splitmix64: a well-mixed u64 from any u64, so `(seed, salt)` pairs that
/// differ in one bit give unrelated draws.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A uniform draw in `[0, 1)` for `(seed, salt)`: deterministic, so a
/// test pins every node's jitter by its seed.
pub fn unit(seed: u64, salt: u64) -> f64 {
    (mix(seed ^ mix(salt)) >> 11) as f64 / (1u64 << 53) as f64
}

/// The heartbeat period after a write: `base ± pct %`, `u` in `[0, 1)`.
pub fn jittered_heartbeat(base: Duration, pct: u32, u: f64) -> Duration {
    let band = f64::from(pct.min(MAX_HEARTBEAT_JITTER_PCT)) / 100.0;
    base.mul_f64(1.0 - band + 2.0 * band * u.clamp(0.0, 1.0))
}

/// When the first request may go out: `start + spread * u`.
pub fn first_write_at(start: SystemTime, spread: Duration, u: f64) -> SystemTime {
    start + spread.mul_f64(u.clamp(0.0, 1.0))
}

/// Salts of a node's draws (ASCII "START", "CHANGE"), so they are unrelated.
const START_SALT: u64 = 0x0053_5441_5254;
const CHANGE_SALT: u64 = 0x4348_414e_4745;

/// A wait on the wall clock, kept with the time it was set. A clock stepped
/// back before that time (an NTP step, a VM restored from a snapshot) ends
/// it: compared with its end alone, the wait would grow by the step (an
/// hour back, an hour without writes). A step forward ends it early, as it
/// ends any wait on this clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallWait {
    set: SystemTime,
    until: SystemTime,
}

impl WallWait {
    pub fn new(set: SystemTime, until: SystemTime) -> Self {
        WallWait { set, until }
    }

    /// Whether the wait is over at `now`.
    pub fn over(&self, now: SystemTime) -> bool {
        now >= self.until || now < self.set
    }

    pub fn until(&self) -> SystemTime {
        self.until
    }
}

/// One agent's start and change spread: the first flush waits for the
/// node's slot in `[start, start + start_spread)`, and a due status write
/// for its slot in `[since, since + change_spread)` (`since`: when it was
/// first found due). The draws are fixed per node (its seed), so a node is
/// always early or always late in the window, and the fleet covers it.
#[derive(Debug, Clone)]
pub struct Pacing {
    start_spread: Duration,
    start_draw: f64,
    first: Option<WallWait>,
    change_spread: Duration,
    change_draw: f64,
    change: Option<WallWait>,
}

impl Pacing {
    pub fn new(load: &LoadPolicy, seed: u64) -> Self {
        Pacing {
            start_spread: load.start_spread,
            start_draw: unit(seed, START_SALT),
            first: None,
            change_spread: load.change_spread,
            change_draw: unit(seed, CHANGE_SALT),
            change: None,
        }
    }

    /// Until when a flush at `now` must wait (None: go ahead).
    /// `status_due` says whether a status write is due at `now`.
    pub fn hold(
        &mut self,
        now: SystemTime,
        status_due: impl FnOnce() -> bool,
    ) -> Option<SystemTime> {
        let first = *self.first.get_or_insert_with(|| {
            WallWait::new(now, first_write_at(now, self.start_spread, self.start_draw))
        });
        if !first.over(now) {
            return Some(first.until());
        }
        if self.change_spread.is_zero() || !status_due() {
            return None;
        }
        let (spread, draw) = (self.change_spread, self.change_draw);
        let change = *self
            .change
            .get_or_insert_with(|| WallWait::new(now, now + spread.mul_f64(draw)));
        (!change.over(now)).then_some(change.until())
    }

    /// No start spread for this agent: its Node carries none of nodeproof's
    /// conditions yet (a node that just joined). The spread is for a fleet
    /// restarted together whose Nodes already carry them, where waiting
    /// costs nothing; a new Node needs its first conditions before the gate
    /// controller can place anything there.
    pub fn skip_start(&mut self, now: SystemTime) {
        if self.first.is_none_or(|w| !w.over(now)) {
            self.first = Some(WallWait::new(now, now));
        }
    }

    /// The flush went through: the next change waits anew.
    pub fn flushed(&mut self) {
        self.change = None;
    }
}

/// How far each retry delay is stretched at most (client-go's
/// `wait.Backoff.Jitter`: `d + rand * Jitter * d`).
pub const BACKOFF_JITTER: f64 = 0.5;

/// The delay before retry number `attempt` (0 = first): the exponential
/// `base * 2^attempt`, capped, then stretched by `0..BACKOFF_JITTER` of
/// itself, as `wait.Backoff{Factor: 2, Jitter: 0.5}` does. It was +0..25 %:
/// agents that fail in step (restarted together into an outage) then stay
/// within a quarter of the delay of each other for many rounds; half the
/// delay decorrelates them within a few, and at the cap (20 s) every retry
/// is 20..30 s after the last, so convergence after an outage stays under
/// 30 s while the fleet's retries are spread over at least 10 s.
pub fn backoff_delay(base: Duration, cap: Duration, attempt: u32, u: f64) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.min(16)).min(cap);
    exp.mul_f64(1.0 + BACKOFF_JITTER * u.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_millis(ms)
    }

    #[test]
    fn bucket_gives_the_burst_then_the_steady_rate_and_never_more() {
        let mut b = TokenBucket::new(0.5, 4);
        // Burst: 4 at once, then the 5th waits ~2 s.
        for _ in 0..4 {
            assert_eq!(b.try_take(t(0)), Ok(()));
        }
        let wait = b.try_take(t(0)).unwrap_err();
        assert!(
            wait >= Duration::from_secs(2) && wait <= Duration::from_millis(2001),
            "{wait:?}"
        );
        assert!(b.try_take(t(1999)).is_err());
        assert_eq!(b.try_take(t(2001)), Ok(()));
        // Hammering every 10 ms for 100 s: never more than burst + qps * t.
        let mut b = TokenBucket::new(0.5, 4);
        let mut granted = 0u32;
        for step in 0..10_000u64 {
            if b.try_take(t(step * 10)).is_ok() {
                granted += 1;
            }
            let allowed = 4.0 + 0.5 * (step * 10) as f64 / 1000.0;
            assert!(
                f64::from(granted) <= allowed,
                "{granted} > {allowed} at {step}"
            );
        }
        // ... and the rate is actually reached: 4 + 0.5 * 99.99 s.
        assert_eq!(granted, 4 + 49);
    }

    #[test]
    fn waiting_the_answer_finds_a_token() {
        let mut b = TokenBucket::new(0.2, 1);
        assert!(b.try_take(t(0)).is_ok());
        let wait = b.try_take(t(0)).unwrap_err();
        let then = t(wait.as_millis() as u64);
        assert_eq!(b.try_take(then), Ok(()));
    }

    #[test]
    fn unlimited_bucket_never_waits_and_a_clock_step_back_refills_from_the_new_time() {
        let mut b = TokenBucket::new(f64::INFINITY, 1);
        for _ in 0..1000 {
            assert!(b.try_take(t(0)).is_ok());
        }
        let mut b = TokenBucket::new(1.0, 1);
        assert!(b.try_take(t(10_000)).is_ok());
        assert!(b.try_take(t(0)).is_err(), "stepping back is no refill");
        assert!(b.try_take(t(500)).is_err());
        // One second after the step, not after the clock is back at 10 s:
        // anchored at the old time, writes would stop for as long as the step.
        assert!(b.try_take(t(1_000)).is_ok());
        assert!(b.try_take(t(1_000)).is_err());
    }

    #[test]
    fn heartbeat_jitter_stays_in_its_band_and_uses_it() {
        let base = Duration::from_secs(300);
        let (mut lo, mut hi) = (Duration::MAX, Duration::ZERO);
        for salt in 0..10_000 {
            let d = jittered_heartbeat(base, 10, unit(42, salt));
            assert!(
                d >= Duration::from_secs(270) && d <= Duration::from_secs(330),
                "{d:?}"
            );
            lo = lo.min(d);
            hi = hi.max(d);
        }
        assert!(lo < Duration::from_secs(272) && hi > Duration::from_secs(328));
        assert_eq!(jittered_heartbeat(base, 0, 0.99), base);
        // Deterministic per seed, different across seeds.
        assert_eq!(unit(7, 3), unit(7, 3));
        assert_ne!(unit(7, 3), unit(8, 3));
    }

    #[test]
    fn first_writes_spread_over_the_window() {
        let spread = Duration::from_secs(30);
        let mut per_second = [0u32; 30];
        for node in 0..3000u64 {
            let at = first_write_at(t(0), spread, unit(node, 0x5747));
            let off = at.duration_since(t(0)).unwrap();
            assert!(off < spread, "{off:?}");
            per_second[off.as_secs() as usize] += 1;
        }
        // 100 a second on average; no second gets twice that.
        assert!(
            per_second.iter().all(|n| (50..200).contains(n)),
            "{per_second:?}"
        );
        assert_eq!(first_write_at(t(0), Duration::ZERO, 0.7), t(0));
    }

    #[test]
    fn pacing_holds_the_first_flush_and_changes_for_the_nodes_slot() {
        let load = LoadPolicy {
            start_spread: Duration::from_secs(30),
            change_spread: Duration::from_secs(20),
            ..LoadPolicy::UNLIMITED
        };
        let mut p = Pacing::new(&load, 5);
        let start_off = Duration::from_secs(30).mul_f64(unit(5, START_SALT));
        let change_off = Duration::from_secs(20).mul_f64(unit(5, CHANGE_SALT));
        assert!(!start_off.is_zero() && !change_off.is_zero());
        // The slot is fixed at the first call, later calls wait for the same one.
        assert_eq!(p.hold(t(0), || false), Some(t(0) + start_off));
        assert_eq!(
            p.hold(t(0) + start_off / 2, || false),
            Some(t(0) + start_off)
        );
        let after_start = t(0) + start_off;
        assert_eq!(p.hold(after_start, || false), None);
        // A change found due at 100 s waits its offset, then goes.
        assert_eq!(p.hold(t(100_000), || true), Some(t(100_000) + change_off));
        assert_eq!(p.hold(t(100_000) + change_off, || true), None);
        p.flushed();
        assert_eq!(p.hold(t(200_000), || true), Some(t(200_000) + change_off));
        // Unlimited: never holds.
        let mut none = Pacing::new(&LoadPolicy::UNLIMITED, 5);
        assert_eq!(none.hold(t(0), || true), None);
    }

    /// An agent started at 1 h whose clock then steps back an hour must not
    /// wait for its start slot, or a change's slot, until the clock is back.
    #[test]
    fn pacing_slots_do_not_grow_by_a_clock_step_back() {
        let load = LoadPolicy {
            start_spread: Duration::from_secs(30),
            change_spread: Duration::from_secs(20),
            ..LoadPolicy::UNLIMITED
        };
        let hour = 3_600_000;
        let mut p = Pacing::new(&load, 5);
        assert!(p.hold(t(hour), || false).is_some(), "in its start slot");
        assert_eq!(p.hold(t(1000), || false), None, "stepped back: slot over");
        let mut p = Pacing::new(&load, 5);
        assert!(p.hold(t(hour), || false).is_some());
        assert_eq!(p.hold(t(hour + 30_000), || false), None);
        let held = p.hold(t(hour + 40_000), || true).expect("a change waits");
        assert!(held > t(hour + 40_000));
        assert_eq!(p.hold(t(1000), || true), None, "stepped back: slot over");
    }

    #[test]
    fn a_wall_wait_ends_at_its_end_or_when_the_clock_steps_back_past_its_start() {
        let w = WallWait::new(t(10_000), t(70_000));
        assert!(!w.over(t(10_000)) && !w.over(t(69_999)));
        assert!(w.over(t(70_000)));
        assert!(w.over(t(9_999)), "a step back before it was set");
    }

    #[test]
    fn backoff_grows_to_the_cap_and_is_jittered_by_up_to_half() {
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(20);
        for attempt in 0..20 {
            let exp = base.saturating_mul(1 << attempt.min(16)).min(cap);
            let (mut lo, mut hi) = (Duration::MAX, Duration::ZERO);
            for salt in 0..1000 {
                let d = backoff_delay(base, cap, attempt, unit(9, salt));
                assert!(
                    d >= exp && d <= exp.mul_f64(1.5),
                    "attempt {attempt}: {d:?}"
                );
                lo = lo.min(d);
                hi = hi.max(d);
            }
            // The band is used, not a point in it.
            assert!(
                hi - lo > exp.mul_f64(0.45),
                "attempt {attempt}: {lo:?}..{hi:?}"
            );
        }
        // Growth: attempt n+1's least beats attempt n's most, until the cap.
        for n in 0..4 {
            assert!(backoff_delay(base, cap, n + 1, 0.0) > backoff_delay(base, cap, n, 1.0));
        }
        assert_eq!(
            backoff_delay(base, cap, 10, 0.99),
            backoff_delay(base, cap, 5, 0.99)
        );
        assert_eq!(backoff_delay(base, cap, 5, 1.0), Duration::from_secs(30));
    }
}
