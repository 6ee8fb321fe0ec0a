//! The reporter without credentials: what would be written, logged.

use std::sync::Mutex;

use crate::conditions::StatusUpdate;
use crate::events::EventWrite;
use crate::marks::Taint;
use crate::reporter::{NodeState, ReportError, Reporter, FIELD_MANAGER};

/// The reporter without credentials: logs (to stderr and the journal)
/// exactly the requests it would have made, so the checks still run and
/// their result is still visible.
pub struct LogReporter {
    node: String,
    lines: Mutex<Vec<String>>,
}

impl LogReporter {
    pub fn new(node: &str) -> Self {
        LogReporter {
            node: node.to_string(),
            lines: Mutex::new(Vec::new()),
        }
    }

    /// Everything logged so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn log(&self, method: &str, path: &str, body: &serde_json::Value) {
        let line = format!("would {method} {path}?fieldManager={FIELD_MANAGER} {body}");
        tracing::info!(node = %self.node, method, path, %body, "no credentials: not written");
        eprintln!("nodeproof: {line}");
        if let Ok(mut lines) = self.lines.lock() {
            lines.push(line);
        }
    }
}

impl Reporter for LogReporter {
    fn node(&self) -> &str {
        &self.node
    }

    async fn read_node(&self) -> Result<NodeState, ReportError> {
        // Nothing to read: every condition is reported as first seen.
        Ok(NodeState::default())
    }

    async fn patch_status(&self, update: &StatusUpdate) -> Result<(), ReportError> {
        let path = format!("/api/v1/nodes/{}/status", self.node);
        self.log("PATCH", &path, &update.patch_body());
        Ok(())
    }

    async fn write_event(&self, write: &EventWrite) -> Result<(), ReportError> {
        let ns = write.key().object.event_namespace();
        let (method, path) = match write {
            EventWrite::Create { .. } => ("POST", format!("/api/v1/namespaces/{ns}/events")),
            EventWrite::Update { name, .. } => {
                ("PATCH", format!("/api/v1/namespaces/{ns}/events/{name}"))
            }
        };
        self.log(method, &path, &write.body(&self.node));
        Ok(())
    }

    async fn patch_labels(&self, body: &serde_json::Value) -> Result<(), ReportError> {
        self.log("PATCH", &format!("/api/v1/nodes/{}", self.node), body);
        Ok(())
    }

    async fn set_taints(&self, ours: &[Taint]) -> Result<(), ReportError> {
        let list: Vec<_> = ours.iter().map(Taint::to_json).collect();
        let body = serde_json::json!({ "nodeproofTaints": list });
        self.log("PATCH", &format!("/api/v1/nodes/{}", self.node), &body);
        Ok(())
    }
}
