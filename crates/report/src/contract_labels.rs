//! The contract labels this node publishes (`runtimeclass.nodeproof.dev/<class>`
//! = `ready` / `not-ready`, see [`crate::contract`]) from the agent's
//! verdicts, with the conditions' hysteresis and restart continuity. Pure:
//! time is an argument.
//!
//! - hysteresis: a published `ready` turns `not-ready` after `to_bad`
//!   consecutive not-ready verdicts, and back after `to_good` ready ones
//!   (the conditions' [`Hysteresis`]), so a profile rewritten in place does
//!   not evict the class's scheduling for one round;
//! - continuity: the labels already on the Node are read back at start
//!   ([`ContractLabels::resume`]) and smoothed against, so a restart neither
//!   flaps a label nor says a not-ready class is news again;
//! - stale cleanup: each verdict set is every annotated class there is, so a
//!   label whose class is no longer in it (deleted, or its annotation
//!   removed) is dropped at once: that is a fact about the cluster, not a
//!   measurement to smooth. Nothing is dropped before the first verdict set
//!   (the RuntimeClasses are not listed yet).

use std::collections::{BTreeMap, VecDeque};
use std::time::SystemTime;

use crate::conditions::Hysteresis;
use crate::contract::{self, ContractState};
use crate::events::EventType;
use nodeproof_findings::reason::ContractReason;

/// The agent's judgement of one annotated RuntimeClass on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractVerdict {
    pub class: String,
    pub state: ContractState,
    /// Why it is not ready ("profiles/vllm-strict.json: missing"); empty when ready.
    pub cause: String,
}

impl ContractVerdict {
    pub fn label_key(&self) -> String {
        contract::label_key(&self.class)
    }
}

/// A published label's change; not-ready ones become Warning Node Events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelTransition {
    pub class: String,
    /// None the first time this node publishes the class.
    pub from: Option<ContractState>,
    pub to: ContractState,
    pub cause: String,
    pub at: SystemTime,
}

/// The Node Event's reason for a class that turned (or stays, with a new
/// cause) not ready here.
pub const EVENT_NOT_READY: &str = ContractReason::NotReady.into_str();
/// The Node Event's reason for a class ready again.
pub const EVENT_READY: &str = ContractReason::Ready.into_str();

impl LabelTransition {
    /// The Node Event: a class first seen ready is not news.
    pub fn event(&self) -> Option<(EventType, &'static str, String)> {
        match (self.from, self.to) {
            (None, ContractState::Ready) => None,
            (_, ContractState::Ready) => Some((
                EventType::Normal,
                EVENT_READY,
                format!("RuntimeClass {} is ready on this node", self.class),
            )),
            (_, ContractState::NotReady) => Some((
                EventType::Warning,
                EVENT_NOT_READY,
                format!(
                    "RuntimeClass {} is not ready on this node: {}",
                    self.class, self.cause
                ),
            )),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    class: Option<String>,
    published: ContractState,
    cause: String,
    /// Consecutive verdicts that differ from `published`.
    streak: u32,
}

/// As for the conditions: only the last rounds before the Node was read can matter.
const PRE_RESUME_ROUNDS: usize = 16;

#[derive(Debug, Clone, Default)]
pub struct ContractLabels {
    /// By label key.
    entries: BTreeMap<String, Entry>,
    resumed: bool,
    /// A verdict set arrived: the RuntimeClasses are known, labels may be dropped.
    observed: bool,
    before_resume: VecDeque<(SystemTime, Vec<ContractVerdict>)>,
}

impl ContractLabels {
    /// Adopt the contract labels on the Node (its other labels are ignored;
    /// a value that is neither `ready` nor `not-ready` is not adopted, so it
    /// is rewritten or removed). Verdicts observed before are replayed.
    pub fn resume(
        &mut self,
        on_node: &BTreeMap<String, String>,
        hysteresis: Hysteresis,
    ) -> Vec<LabelTransition> {
        self.entries = on_node
            .iter()
            .filter(|(k, _)| contract::is_contract_label(k))
            .filter_map(|(k, v)| {
                let state = ContractState::parse(v)?;
                let entry = Entry {
                    class: None,
                    published: state,
                    cause: String::new(),
                    streak: 0,
                };
                Some((k.clone(), entry))
            })
            .collect();
        self.resumed = true;
        let replay: Vec<_> = self.before_resume.drain(..).collect();
        replay
            .into_iter()
            .flat_map(|(at, v)| self.observe(at, &v, hysteresis))
            .collect()
    }

    pub fn is_resumed(&self) -> bool {
        self.resumed
    }

    /// One verdict set: every annotated RuntimeClass in the cluster, judged.
    pub fn observe(
        &mut self,
        now: SystemTime,
        verdicts: &[ContractVerdict],
        hysteresis: Hysteresis,
    ) -> Vec<LabelTransition> {
        if !self.resumed {
            if self.before_resume.len() == PRE_RESUME_ROUNDS {
                self.before_resume.pop_front();
            }
            self.before_resume.push_back((now, verdicts.to_vec()));
            return Vec::new();
        }
        self.observed = true;
        let keys: BTreeMap<String, &ContractVerdict> =
            verdicts.iter().map(|v| (v.label_key(), v)).collect();
        self.entries.retain(|k, _| keys.contains_key(k));
        let mut out = Vec::new();
        for (key, v) in keys {
            let transition = |from| LabelTransition {
                class: v.class.clone(),
                from,
                to: v.state,
                cause: v.cause.clone(),
                at: now,
            };
            let Some(e) = self.entries.get_mut(&key) else {
                // Nothing to smooth against: the first verdict is the state.
                self.entries.insert(
                    key,
                    Entry {
                        class: Some(v.class.clone()),
                        published: v.state,
                        cause: v.cause.clone(),
                        streak: 0,
                    },
                );
                out.push(transition(None));
                continue;
            };
            e.class = Some(v.class.clone());
            if e.published == v.state {
                e.streak = 0;
                // Still not ready, for another reason: that is news too.
                if v.state == ContractState::NotReady && e.cause != v.cause && !e.cause.is_empty() {
                    out.push(transition(Some(e.published)));
                }
                e.cause = v.cause.clone();
                continue;
            }
            e.streak += 1;
            let needed = match v.state {
                ContractState::Ready => hysteresis.to_good,
                ContractState::NotReady => hysteresis.to_bad,
            };
            if e.streak < needed.max(1) {
                continue;
            }
            out.push(transition(Some(e.published)));
            e.streak = 0;
            e.published = v.state;
            e.cause = v.cause.clone();
        }
        out
    }

    /// The contract labels wanted on the Node; `None` until the first
    /// verdict set after the Node was read (then the Node's stay as they are).
    pub fn wanted(&self) -> Option<BTreeMap<String, String>> {
        (self.resumed && self.observed).then(|| {
            self.entries
                .iter()
                .map(|(k, e)| (k.clone(), e.published.as_str().to_string()))
                .collect()
        })
    }

    /// The published state of `class`, if any.
    pub fn state(&self, class: &str) -> Option<ContractState> {
        let e = self.entries.get(&contract::label_key(class))?;
        e.class
            .as_deref()
            .is_none_or(|c| c == class)
            .then_some(e.published)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    fn v(class: &str, ready: bool) -> ContractVerdict {
        ContractVerdict {
            class: class.into(),
            state: if ready {
                ContractState::Ready
            } else {
                ContractState::NotReady
            },
            cause: if ready {
                String::new()
            } else {
                "profiles/p.json: missing".into()
            },
        }
    }

    fn wanted(c: &ContractLabels) -> Vec<(String, String)> {
        c.wanted().unwrap_or_default().into_iter().collect()
    }

    const H: Hysteresis = Hysteresis {
        to_bad: 2,
        to_good: 3,
    };

    #[test]
    fn nothing_is_wanted_before_the_node_is_read_and_the_classes_judged() {
        let mut c = ContractLabels::default();
        assert!(c.observe(t(0), &[v("vllm", true)], H).is_empty());
        assert_eq!(c.wanted(), None);
        let on_node = [("runtimeclass.nodeproof.dev/old".into(), "ready".into())].into();
        let tr = c.resume(&on_node, H);
        // Replayed: vllm is new (published at once, first seen ready: no event); old is gone.
        assert_eq!(tr.len(), 1);
        assert_eq!(tr[0].event(), None);
        assert_eq!(
            wanted(&c),
            [("runtimeclass.nodeproof.dev/vllm".into(), "ready".into())]
        );
        // Without any verdict yet, the Node's labels stay.
        let mut fresh = ContractLabels::default();
        fresh.resume(&on_node, H);
        assert_eq!(fresh.wanted(), None);
    }

    #[test]
    fn hysteresis_both_ways_and_an_event_per_change() {
        let mut c = ContractLabels::default();
        c.resume(&BTreeMap::new(), H);
        c.observe(t(0), &[v("vllm", true)], H);
        assert!(c.observe(t(1), &[v("vllm", false)], H).is_empty());
        assert_eq!(c.state("vllm"), Some(ContractState::Ready));
        let tr = c.observe(t(2), &[v("vllm", false)], H);
        let (kind, reason, message) = tr[0].event().unwrap();
        assert_eq!(kind, EventType::Warning);
        assert_eq!(reason, EVENT_NOT_READY);
        assert_eq!(
            message,
            "RuntimeClass vllm is not ready on this node: profiles/p.json: missing"
        );
        assert_eq!(c.state("vllm"), Some(ContractState::NotReady));
        // A new cause while not ready is said; the same one is not.
        let mut other = v("vllm", false);
        other.cause = "handler \"kata\" is not configured".into();
        assert_eq!(c.observe(t(3), &[other.clone()], H).len(), 1);
        assert!(c.observe(t(4), &[other], H).is_empty());
        // Three ready verdicts to recover; one bad one in between starts over.
        c.observe(t(5), &[v("vllm", true)], H);
        c.observe(t(6), &[v("vllm", true)], H);
        c.observe(t(7), &[v("vllm", false)], H);
        c.observe(t(8), &[v("vllm", true)], H);
        c.observe(t(9), &[v("vllm", true)], H);
        assert_eq!(c.state("vllm"), Some(ContractState::NotReady));
        let tr = c.observe(t(10), &[v("vllm", true)], H);
        assert_eq!(tr[0].event().unwrap().1, EVENT_READY);
        assert_eq!(
            wanted(&c),
            [("runtimeclass.nodeproof.dev/vllm".into(), "ready".into())]
        );
    }

    #[test]
    fn a_restart_resumes_from_the_node_without_flapping_or_repeating() {
        let mut c = ContractLabels::default();
        let on_node = [
            ("runtimeclass.nodeproof.dev/vllm".into(), "ready".into()),
            ("runtimeclass.nodeproof.dev/kata".into(), "not-ready".into()),
            ("runtimeclass.nodeproof.dev/odd".into(), "maybe".into()),
            ("nodeproof.dev/gpu-healthy".into(), "true".into()),
        ]
        .into();
        c.resume(&on_node, H);
        // One bad verdict after a restart: still ready. kata still not ready: not news.
        let tr = c.observe(
            t(0),
            &[v("vllm", false), v("kata", false), v("odd", true)],
            H,
        );
        assert_eq!(tr.len(), 1, "{tr:?}");
        assert_eq!(tr[0].class, "odd");
        assert_eq!(
            wanted(&c),
            [
                ("runtimeclass.nodeproof.dev/kata".into(), "not-ready".into()),
                ("runtimeclass.nodeproof.dev/odd".into(), "ready".into()),
                ("runtimeclass.nodeproof.dev/vllm".into(), "ready".into()),
            ]
        );
    }

    #[test]
    fn a_class_gone_from_the_verdicts_loses_its_label_at_once() {
        let mut c = ContractLabels::default();
        c.resume(&BTreeMap::new(), H);
        c.observe(t(0), &[v("vllm", true), v("kata", false)], H);
        c.observe(t(1), &[v("kata", false)], H);
        assert_eq!(
            wanted(&c),
            [("runtimeclass.nodeproof.dev/kata".into(), "not-ready".into())]
        );
        // Annotated again: a new class, published at once.
        let tr = c.observe(t(2), &[v("kata", false), v("vllm", false)], H);
        assert_eq!(tr.len(), 1);
        assert_eq!(tr[0].from, None);
        c.observe(t(3), &[], H);
        assert_eq!(c.wanted(), Some(BTreeMap::new()));
    }

    #[test]
    fn a_long_class_name_is_labelled_by_its_hashed_key() {
        let long = format!("{}.example", "a".repeat(244));
        assert_eq!(long.len(), 252);
        let mut c = ContractLabels::default();
        c.resume(&BTreeMap::new(), H);
        c.observe(t(0), &[v(&long, true)], H);
        let w = wanted(&c);
        assert_eq!(w[0].0, contract::label_key(&long));
        assert!(w[0].0.len() <= contract::LABEL_PREFIX.len() + 63);
        assert_eq!(c.state(&long), Some(ContractState::Ready));
    }
}
