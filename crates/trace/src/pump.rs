//! The one loop between an [`EventSource`] and its readers: samples polled
//! and attributed to their cgroup while it still exists, exact counts read
//! into rows. `nodeproof trace`, the daemon's tracer and `nodeproof pods`
//! all pump through this, so attribution and naming are done one way.

use std::time::Duration;

use crate::attribution::{Attribution, CgroupResolver, PodLookup};
use crate::event::Denial;
use crate::names::SyscallNames;
use crate::retire::Retired;
use crate::summary::{self, Filter, SummaryRow};
use crate::{EventSource, Stats, TraceError};

/// A sample as the readers get it: the denial, its syscall's name and where it ran.
pub struct Sample<'a> {
    pub denial: &'a Denial,
    pub syscall: &'a str,
    pub attribution: &'a Attribution,
}

/// Polls `S` and keeps the per-source state (cgroup cache, syscall names).
pub struct Pump<S> {
    source: S,
    resolver: CgroupResolver,
    names: SyscallNames,
    filter: Filter,
    /// Set by [`Pump::retire_exited`]: how to tell a process is gone.
    exited: Option<fn(u32) -> bool>,
    retired: Retired,
}

impl<S: EventSource> Pump<S> {
    pub fn new(source: S, resolver: CgroupResolver, filter: Filter) -> Self {
        Pump {
            source,
            resolver,
            names: SyscallNames::default(),
            filter,
            exited: None,
            retired: Retired::default(),
        }
    }

    /// From now on, each [`Pump::rows`] first moves the counts of exited
    /// processes out of the kernel (see [`crate::retire`]): their rows come
    /// back folded, with pid 0. For a long-running reader (the daemon);
    /// `nodeproof trace` keeps every pid.
    pub fn retire_exited(mut self, exited: fn(u32) -> bool) -> Self {
        self.exited = Some(exited);
        self
    }

    /// Folded rows of exited processes held.
    pub fn retired_rows(&self) -> usize {
        self.retired.len()
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    /// Waits up to `wait` for samples and hands each one that passes the
    /// filter (the process part first, the workload part once attributed)
    /// to `on_sample`. The sample resolves its cgroup now: the
    /// counts are read later, when a short-lived container may be gone.
    /// Cgroup creations are read after the samples arrive: a cgroup is
    /// created before any of its tasks runs, so its record is in by then.
    pub fn poll(
        &mut self,
        wait: Duration,
        pods: &dyn PodLookup,
        on_sample: &mut dyn FnMut(Sample<'_>),
    ) -> Result<(), TraceError> {
        let Pump {
            source,
            resolver,
            names,
            filter,
            ..
        } = self;
        let mut batch = Vec::new();
        source.poll(wait, &mut |d| {
            if filter.matches(d.pid, &d.comm) {
                batch.push(d);
            }
        })?;
        source.created_cgroups(&mut |c| resolver.learn(c.id, c.path))?;
        for d in &batch {
            let attribution = resolver.attribute(d.cgroup_id, d.pid, pods);
            if !filter.matches_workload(&attribution) {
                continue;
            }
            let syscall = names.get(d.arch, d.nr);
            on_sample(Sample {
                denial: d,
                syscall,
                attribution: &attribution,
            });
        }
        Ok(())
    }

    /// The exact in-kernel counts so far as attributed rows, and the
    /// programs' own counters.
    pub fn rows(&mut self, pods: &dyn PodLookup) -> Result<(Vec<SummaryRow>, Stats), TraceError> {
        let stats = self.source.stats()?;
        let resolver = &mut self.resolver;
        self.source
            .created_cgroups(&mut |c| resolver.learn(c.id, c.path))?;
        if let Some(exited) = self.exited {
            // Before the live counts are read: a count is in one or the other.
            let gone = self.source.retire(&exited)?;
            for row in summary::aggregate(gone, &self.filter, &mut self.names, &mut |cg, pid| {
                resolver.attribute(cg, pid, pods)
            }) {
                self.retired.add(row);
            }
        }
        let mut rows = summary::aggregate(
            self.source.counts()?,
            &self.filter,
            &mut self.names,
            &mut |cg, pid| resolver.attribute(cg, pid, pods),
        );
        if !self.retired.is_empty() {
            rows.extend(self.retired.rows().cloned());
            summary::sort_rows(&mut rows);
        }
        Ok((rows, stats))
    }
}
