//! The server's state and the handle tests hold ([`TestApiServer`]).
//!
//! The state is the store and one part per concern, each kept by its type
//! (as `http::Extensions` keeps a request's), so that this module names no
//! concern: each concern defines its part (`LeaseState`, `DraState`,
//! `Authn`...) and its `impl TestApiServer` block next to its requests,
//! above this module. The handle's own methods here are the store's: put,
//! delete, the resourceVersion.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::kinds::Object;
use crate::store::Store;

/// Each concern's part of the state, by type; a part is created (its
/// `Default`) when first asked for.
#[derive(Default)]
pub struct Parts(HashMap<TypeId, Box<dyn Any + Send>>);

impl Parts {
    pub fn get<T: Default + Send + 'static>(&mut self) -> &mut T {
        self.0
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()))
            .downcast_mut()
            .expect("a part is kept under its own type")
    }
}

#[derive(Default)]
pub struct State {
    pub store: Store,
    pub parts: Parts,
}

impl State {
    /// The part of type `T` (see [`Parts`]).
    pub fn part<T: Default + Send + 'static>(&mut self) -> &mut T {
        self.parts.get()
    }

    /// The store and the part of type `T`, both writable.
    pub fn store_and<T: Default + Send + 'static>(&mut self) -> (&mut Store, &mut T) {
        (&mut self.store, self.parts.get())
    }

    pub fn store_of(s: &mut State) -> &mut Store {
        &mut s.store
    }
}

/// The test API server: its address, its state, and what it signs and
/// serves with. Started by [`TestApiServer::start`] (`server`); every
/// concern adds the methods tests call about it (JSON in, JSON out; typed
/// inside).
pub struct TestApiServer {
    pub addr: SocketAddr,
    pub(crate) state: Arc<Mutex<State>>,
    pub(crate) ca_pem: String,
    /// Signs client certificates.
    pub(crate) client_ca: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// Bumped to close every open connection.
    pub(crate) cut: tokio::sync::watch::Sender<u64>,
    pub(crate) _runtime: std::thread::JoinHandle<()>,
}

impl TestApiServer {
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// The latest resourceVersion handed out.
    pub fn resource_version(&self) -> u64 {
        self.with(|s| s.store.rv)
    }

    /// Create or replace an object of `resource` (a Pod by
    /// `metadata.namespace`/`name`, a RuntimeClass, a workload, a
    /// ResourceSlice...); watchers see ADDED/MODIFIED, or ADDED/DELETED when
    /// it starts/stops matching their field selector (as the real API server
    /// does). Panics when it does not decode as that kind (a test's mistake).
    pub fn put(&self, resource: &'static str, obj: Value) {
        let obj = Object::decode(resource, obj)
            .unwrap_or_else(|e| panic!("a {resource} object that does not decode: {e}"));
        self.with(|s| s.store.write(resource, obj));
    }

    pub fn delete(&self, resource: &'static str, key: &str) {
        // A version is spent even when there was nothing to delete.
        self.with(|s| s.store.remove(resource, key));
    }
}
