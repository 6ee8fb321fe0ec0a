//! The server's state: the store and each concern's own part.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use crate::admission::NamespacePhase;
use crate::auth::Authn;
use crate::cluster_check::ClusterState;
use crate::dra::DraState;
use crate::faults::Fault;
use crate::leases::LeaseState;
use crate::persist::{persist_objects, persist_request, Logged};
use crate::pods::PodState;
use crate::scheduler::SchedulerState;
use crate::store::Store;

#[derive(Default)]
pub struct State {
    pub store: Store,
    pub authn: Authn,
    pub fault: Option<Fault>,
    pub log: Vec<Logged>,
    /// When each TCP connection was accepted, those refused while down included.
    pub accepted: Vec<Instant>,
    /// Namespaces NamespaceLifecycle refuses Events in.
    pub namespaces: BTreeMap<String, NamespacePhase>,
    /// APIServices, NodeMetrics and PodMetrics.
    pub cluster: ClusterState,
    pub leases: LeaseState,
    pub pods: PodState,
    pub scheduler: SchedulerState,
    pub dra: DraState,
    /// Where the objects and the request log are kept across a restart of
    /// the process, as etcd keeps them.
    pub storage: Option<PathBuf>,
    /// The resourceVersion last written to `storage`.
    pub stored_rv: u64,
}

impl State {
    /// Logs an answered request; with storage, appends it to the request
    /// log on disk and writes the objects whenever they changed, before the
    /// answer leaves (etcd has the write before the client hears of it).
    pub fn record(&mut self, logged: Logged) {
        if let Some(dir) = self.storage.clone() {
            persist_request(&dir, &logged);
            // Event PATCHes (a repeat's count) change no resourceVersion here.
            if self.store.rv != self.stored_rv || logged.method != "GET" {
                persist_objects(&dir, &self.store);
                self.stored_rv = self.store.rv;
            }
        }
        self.log.push(logged);
    }

    pub fn store_of(s: &mut State) -> &mut Store {
        &mut s.store
    }
}
