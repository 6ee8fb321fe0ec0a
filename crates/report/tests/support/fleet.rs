//! A fleet of real `ReportLoop`s against one in-memory API server on a
//! simulated clock: no network, no sleeping. Shared by the `fleet_load`
//! example (the figures in docs/reporting.md) and `tests/fleet_load.rs`
//! (the no-thundering-herd bound).
//!
//! Each node: the daemon's policy and load defaults (`ReportConfig::default()`
//! `.policy()` / `.load()`), a check round every `check_every` at its own
//! phase, its own seed. The server counts every request it is sent
//! (attempts, in 100 ms buckets) and fails every one while it is "down".

#![allow(dead_code)] // each includer uses part of it

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use nodeproof_findings::{Condition, ConditionStatus, ConditionType};
use nodeproof_report::conditions::{Policy, StatusUpdate};
use nodeproof_report::config::ReportConfig;
use nodeproof_report::driver::{LoopConfig, ReportLoop};
use nodeproof_report::events::EventWrite;
use nodeproof_report::marks::Taint;
use nodeproof_report::ratelimit::{self, LoadPolicy};
use nodeproof_report::reporter::{NodeState, ReportError, Reporter};

pub const BUCKET: Duration = Duration::from_millis(100);
const PER_SECOND: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read = 0,
    Status = 1,
    Event = 2,
    Other = 3,
}

/// What the fake API server saw.
pub struct Server {
    start: SystemTime,
    now: Cell<SystemTime>,
    down: Option<(SystemTime, SystemTime)>,
    /// Requests sent per 100 ms bucket, failed ones included.
    attempts: RefCell<Vec<u32>>,
    /// Successful requests per bucket, per kind.
    ok: RefCell<Vec<[u32; 4]>>,
    /// Per node: its successful status PATCHes, in order.
    status_times: RefCell<Vec<Vec<SystemTime>>>,
}

impl Server {
    pub fn new(
        start: SystemTime,
        duration: Duration,
        nodes: usize,
        down: Option<(SystemTime, SystemTime)>,
    ) -> Self {
        let buckets = (duration.as_millis() / BUCKET.as_millis()) as usize + 1;
        Server {
            start,
            now: Cell::new(start),
            down,
            attempts: RefCell::new(vec![0; buckets]),
            ok: RefCell::new(vec![[0; 4]; buckets]),
            status_times: RefCell::new(vec![Vec::new(); nodes]),
        }
    }

    pub fn set_now(&self, now: SystemTime) {
        self.now.set(now);
    }

    fn bucket(&self, t: SystemTime) -> usize {
        (t.duration_since(self.start).unwrap_or_default().as_millis() / BUCKET.as_millis()) as usize
    }

    fn request(&self, node: usize, name: &str, kind: Kind) -> Result<(), ReportError> {
        let now = self.now.get();
        let b = self.bucket(now);
        let mut attempts = self.attempts.borrow_mut();
        if b >= attempts.len() {
            return Ok(()); // past the end of the run: not counted
        }
        attempts[b] += 1;
        if self.down.is_some_and(|(from, to)| now >= from && now < to) {
            return Err(ReportError::Api {
                op: "simulated",
                node: name.to_string(),
                code: 503,
                message: "the API server is down".into(),
            });
        }
        self.ok.borrow_mut()[b][kind as usize] += 1;
        if kind == Kind::Status {
            self.status_times.borrow_mut()[node].push(now);
        }
        Ok(())
    }

    /// Successful requests of `kind` in `[from, to)`.
    pub fn ok_between(&self, kind: Kind, from: SystemTime, to: SystemTime) -> u64 {
        let ok = self.ok.borrow();
        let (a, b) = (self.bucket(from), self.bucket(to).min(ok.len()));
        ok[a..b].iter().map(|c| u64::from(c[kind as usize])).sum()
    }

    /// Requests sent (failed ones too) in `[from, to)`.
    pub fn attempts_between(&self, from: SystemTime, to: SystemTime) -> u64 {
        let attempts = self.attempts.borrow();
        let (a, b) = (self.bucket(from), self.bucket(to).min(attempts.len()));
        attempts[a..b].iter().map(|&n| u64::from(n)).sum()
    }

    /// The most requests sent in any 1-second window (sliding by 100 ms)
    /// starting in `[from, to)`, and where that window starts.
    pub fn peak_rps(&self, from: SystemTime, to: SystemTime) -> (u32, SystemTime) {
        let attempts = self.attempts.borrow();
        let (a, b) = (self.bucket(from), self.bucket(to).min(attempts.len()));
        let mut best = (0, from);
        for start in a..b {
            let end = (start + PER_SECOND).min(attempts.len());
            let n: u32 = attempts[start..end].iter().sum();
            if n > best.0 {
                best = (n, self.start + BUCKET * start as u32);
            }
        }
        best
    }

    /// When every node had had a successful status write at or after
    /// `since`: the latest of the nodes' first such writes (None: some node
    /// never wrote).
    pub fn all_written_since(&self, since: SystemTime) -> Option<SystemTime> {
        let times = self.status_times.borrow();
        times
            .iter()
            .map(|ts| ts.iter().copied().find(|t| *t >= since))
            .collect::<Option<Vec<_>>>()
            .map(|firsts| firsts.into_iter().max().unwrap_or(since))
    }
}

/// One agent's view of the server.
pub struct FakeNode {
    index: usize,
    name: String,
    server: Rc<Server>,
}

impl FakeNode {
    pub fn new(index: usize, server: Rc<Server>) -> Self {
        FakeNode {
            index,
            name: format!("node-{index:05}"),
            server,
        }
    }
}

impl Reporter for FakeNode {
    fn node(&self) -> &str {
        &self.name
    }

    async fn read_node(&self) -> Result<NodeState, ReportError> {
        self.server.request(self.index, &self.name, Kind::Read)?;
        Ok(NodeState {
            uid: Some(format!("uid-{}", self.index)),
            ..NodeState::default()
        })
    }

    async fn patch_status(&self, _: &StatusUpdate) -> Result<(), ReportError> {
        self.server.request(self.index, &self.name, Kind::Status)
    }

    async fn write_event(&self, _: &EventWrite) -> Result<(), ReportError> {
        self.server.request(self.index, &self.name, Kind::Event)
    }

    async fn patch_labels(&self, _: &serde_json::Value) -> Result<(), ReportError> {
        self.server.request(self.index, &self.name, Kind::Other)
    }

    async fn set_taints(&self, _: &[Taint]) -> Result<(), ReportError> {
        self.server.request(self.index, &self.name, Kind::Other)
    }
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub nodes: usize,
    pub duration: Duration,
    /// Time between check rounds of one node (the daemon's gpu-interval-s).
    pub check_every: Duration,
    /// Every node's GPUHealthy check says False in `[from, to)` (offsets from start).
    pub gpu_bad: Option<(Duration, Duration)>,
    /// The API server fails every request in `[from, to)`.
    pub outage: Option<(Duration, Duration)>,
    pub policy: Policy,
    pub load: LoadPolicy,
    pub seed: u64,
}

impl Scenario {
    /// The daemon's defaults, `nodes` agents all started at time 0.
    pub fn daemon(nodes: usize, duration: Duration) -> Self {
        let config = ReportConfig::default();
        Scenario {
            nodes,
            duration,
            check_every: Duration::from_secs(10),
            gpu_bad: None,
            outage: None,
            policy: config.policy(),
            load: config.load(),
            seed: 1,
        }
    }
}

pub const START: SystemTime = SystemTime::UNIX_EPOCH;

pub fn at(offset: Duration) -> SystemTime {
    // Far from the epoch, so RFC 3339 formatting and event names look real.
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + offset
}

fn conditions(gpu_ok: bool) -> Vec<Condition> {
    ConditionType::ALL
        .into_iter()
        .map(|kind| {
            let ok = kind != ConditionType::GPUHealthy || gpu_ok;
            Condition {
                kind,
                status: ConditionStatus::from_bool(ok),
                reason: if ok { "Healthy" } else { "XidError" }.into(),
                message: if ok { "ok" } else { "xid 79 on GPU 0" }.into(),
            }
        })
        .collect()
}

/// Run `s` to its end; the server holds what it saw.
pub fn run(s: &Scenario) -> Rc<Server> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(simulate(s))
}

async fn simulate(s: &Scenario) -> Rc<Server> {
    let start = at(Duration::ZERO);
    let end = at(s.duration);
    let down = s.outage.map(|(a, b)| (at(a), at(b)));
    let server = Rc::new(Server::new(start, s.duration, s.nodes, down));
    let healthy = conditions(true);
    let incident = conditions(false);
    let gpu_bad = s.gpu_bad.map(|(a, b)| (at(a), at(b)));
    let mut loops = Vec::with_capacity(s.nodes);
    let mut next_check = Vec::with_capacity(s.nodes);
    let mut queue = BinaryHeap::with_capacity(s.nodes);
    for i in 0..s.nodes {
        let seed = ratelimit::mix(s.seed.wrapping_mul(0x1_0000_0001) ^ i as u64);
        let node = FakeNode::new(i, server.clone());
        let config = LoopConfig {
            policy: s.policy.clone(),
            load: s.load,
            ..LoopConfig::default()
        };
        loops.push(ReportLoop::new(node, config, seed));
        // Each agent's checks tick at their own phase (the agents started
        // together, the first probe cycle takes a node-dependent time).
        let phase = s.check_every.mul_f64(ratelimit::unit(seed, 0xC4EC));
        next_check.push(start + phase);
        queue.push(Reverse((start, i)));
    }
    while let Some(Reverse((now, i))) = queue.pop() {
        if now >= end {
            break;
        }
        server.now.set(now);
        let lp = &mut loops[i];
        if now >= next_check[i] {
            let bad = gpu_bad.is_some_and(|(a, b)| now >= a && now < b);
            lp.observe(now, if bad { &incident } else { &healthy });
            next_check[i] += s.check_every;
        }
        if lp.next_wake(now).is_some_and(|t| t <= now) {
            // Errors are the simulated outage; the loop schedules its retry.
            let _ = lp.flush(now).await;
        }
        let wake = match lp.next_wake(now) {
            // Still due right after a flush: try again a millisecond later
            // rather than spin at one instant.
            Some(t) if t <= now => now + Duration::from_millis(1),
            Some(t) => t,
            None => next_check[i],
        };
        queue.push(Reverse((wake.min(next_check[i]), i)));
    }
    server
}
