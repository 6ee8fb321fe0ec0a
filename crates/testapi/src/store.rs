//! The store, as etcd and kube-apiserver's registry keep objects: typed
//! objects by resource and key, one resourceVersion counter, the history
//! of changes (what lists of an older snapshot and watches from a version
//! are served from), compaction, and `limit`/`continue` pagination.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use serde_json::json;

use crate::kinds::{kind_of, Object};
use crate::status::{status, Answer};

/// One write: the version it made, the resource, the object before and after.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub resource: &'static str,
    pub before: Option<Object>,
    pub after: Option<Object>,
}

#[derive(Default)]
pub struct Store {
    /// The latest resourceVersion handed out.
    pub rv: u64,
    /// Objects by (resource, `ns/name` or name).
    pub objects: BTreeMap<(&'static str, String), Object>,
    /// Every change of `objects`, in resourceVersion order.
    pub changes: Vec<Change>,
    /// Core Events by (namespace, name): written and listed, never watched.
    pub events: BTreeMap<(String, String), Event>,
    /// The next watch of this resource ends with a 410 Gone ERROR event.
    pub expire_watch: Option<&'static str>,
    /// History up to here is compacted away (etcd's compaction): a watch from
    /// an older resourceVersion, or a continue token of an older list, gets
    /// 410 Gone.
    pub compacted: u64,
    /// How many 410 Gone answers were given (watch ERROR events and list pages).
    pub gone: usize,
}

impl Store {
    pub fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Stores `obj` under a new resourceVersion, for GETs, lists and watches.
    pub fn write(&mut self, resource: &'static str, mut obj: Object) -> Object {
        obj.metadata_mut().resource_version = Some(self.next_rv());
        let before = self.objects.insert((resource, obj.key()), obj.clone());
        self.changes.push(Change {
            rv: self.rv,
            resource,
            before,
            after: Some(obj.clone()),
        });
        obj
    }

    /// Removes an object; watchers see it DELETED at the deletion's version.
    pub fn remove(&mut self, resource: &'static str, key: &str) -> Option<Object> {
        let version = self.next_rv();
        let mut before = self.objects.remove(&(resource, key.to_string()))?;
        before.metadata_mut().resource_version = Some(version);
        self.changes.push(Change {
            rv: self.rv,
            resource,
            before: Some(before.clone()),
            after: None,
        });
        Some(before)
    }

    pub fn get(&self, resource: &'static str, key: &str) -> Option<&Object> {
        self.objects.get(&(resource, key.to_string()))
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.get("nodes", name).and_then(Object::as_node)
    }

    pub fn pod(&self, key: &str) -> Option<&Pod> {
        self.get("pods", key).and_then(Object::as_pod)
    }

    /// The objects of one resource, by key.
    pub fn all<'a>(
        &'a self,
        resource: &'static str,
    ) -> impl Iterator<Item = (&'a String, &'a Object)> + 'a {
        self.objects
            .range((resource, String::new())..)
            .take_while(move |((r, _), _)| *r == resource)
            .map(|((_, k), o)| (k, o))
    }

    pub fn nodes(&self) -> impl Iterator<Item = (&String, &Node)> {
        self.all("nodes")
            .filter_map(|(k, o)| Some((k, o.as_node()?)))
    }

    pub fn pods(&self) -> impl Iterator<Item = (&String, &Pod)> {
        self.all("pods").filter_map(|(k, o)| Some((k, o.as_pod()?)))
    }

    /// The objects of `resource` as they were at resourceVersion `rv`, by
    /// key (the order etcd keeps them in): what every page of one
    /// paginated list is cut from.
    pub fn snapshot(&self, resource: &str, rv: u64) -> BTreeMap<String, &Object> {
        let mut objects = BTreeMap::new();
        let end = self.changes.partition_point(|c| c.rv <= rv);
        for c in self.changes[..end]
            .iter()
            .filter(|c| c.resource == resource)
        {
            match (&c.before, &c.after) {
                (_, Some(a)) => {
                    objects.insert(a.key(), a);
                }
                (Some(b), None) => {
                    objects.remove(&b.key());
                }
                (None, None) => {}
            }
        }
        objects
    }

    /// One page of a list of `resource`, as etcd serves it: cut from the
    /// snapshot its list started at (the continue token carries that
    /// version and the last key sent); a token from before a compaction is
    /// 410 Gone (staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go,
    /// `GetList`; the message is apierrors' `NewResourceExpired` text for
    /// an expired continue).
    pub fn list_page(
        &mut self,
        resource: &'static str,
        selector: Option<&str>,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Answer {
        let (version, after) = match continue_token.filter(|c| !c.is_empty()) {
            None => (self.rv, None),
            Some(token) => match token
                .split_once(':')
                .and_then(|(v, k)| Some((v.parse::<u64>().ok()?, k.to_string())))
            {
                Some(cut) => (cut.0, Some(cut.1)),
                None => return status(400, "BadRequest", "invalid continue token"),
            },
        };
        if version < self.compacted {
            self.gone += 1;
            return status(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            );
        }
        let snapshot = self.snapshot(resource, version);
        let mut matching = snapshot
            .iter()
            .filter(|(key, _)| after.as_ref().is_none_or(|a| *key > a))
            .filter(|(_, o)| selects(selector, o));
        let mut items = Vec::new();
        let mut last = None;
        while limit.is_none_or(|l| items.len() < l) {
            let Some((key, o)) = matching.next() else {
                break;
            };
            items.push(o.to_json());
            last = Some(key);
        }
        let rest = matching.count();
        let (kind, api_version) = kind_of(resource);
        let kind = format!("{kind}List");
        let mut metadata = json!({"resourceVersion": version.to_string()});
        if let (true, Some(last)) = (rest > 0, last) {
            metadata["continue"] = json!(format!("{version}:{last}"));
            // Counted only without a selector (the API server cannot know it cheaply with one).
            if selector.is_none() {
                metadata["remainingItemCount"] = json!(rest);
            }
        }
        (
            200,
            json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "items": items}),
        )
    }
}

/// `spec.nodeName=<n>` (pods, ResourceSlices) and `metadata.name=<n>` are
/// the field selectors served (pkg/registry/core/pod/strategy.go
/// `ToSelectableFields`; every kind's `metadata.name`).
pub fn selects(selector: Option<&str>, obj: &Object) -> bool {
    let Some(s) = selector else {
        return true;
    };
    if let Some(node) = s.strip_prefix("spec.nodeName=") {
        // An absent field is the empty string to a field selector:
        // `spec.nodeName=` selects the unbound pods.
        return obj.spec_node_name().unwrap_or("") == node;
    }
    if let Some(name) = s.strip_prefix("metadata.name=") {
        return obj.metadata().name.as_deref() == Some(name);
    }
    true
}
