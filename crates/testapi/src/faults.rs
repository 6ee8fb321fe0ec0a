//! Fault injection: the API server down, failing, throttling or slow, its
//! connections cut, and the filters' answers
//! (staging/src/k8s.io/apiserver/pkg/server/filters).

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::TestApiServer;
use crate::status::{status, Answer};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// New connections are reset; requests on open ones get 503.
    Down,
    Error500,
    TooManyRequests {
        retry_after_secs: u32,
    },
    Slow(Duration),
    /// The next Node patch gets a 409.
    ConflictOnce,
    /// The max-in-flight / APF filters' plain-text 429 (see [`write_fault`]).
    TooManyRequestsPlain {
        retry_after_secs: u32,
    },
    /// Event writes fail with 500 (see [`write_fault`]).
    EventsError500,
}

/// The faults' part of the state.
#[derive(Default)]
pub struct FaultState {
    pub fault: Option<Fault>,
    /// When each TCP connection was accepted, those refused while down included.
    pub accepted: Vec<Instant>,
}

/// The Status a fault answers every request with, and its Retry-After.
pub fn fault_status(fault: Option<Fault>) -> Option<(Answer, Option<u32>)> {
    match fault? {
        Fault::Down => Some((status(503, "ServiceUnavailable", "apiserver is down"), None)),
        Fault::Error500 => Some((status(500, "InternalError", "injected failure"), None)),
        Fault::TooManyRequests { retry_after_secs } => {
            let (c, mut v) = status(429, "TooManyRequests", "too many requests");
            v["details"] = json!({"retryAfterSeconds": retry_after_secs});
            Some(((c, v), Some(retry_after_secs)))
        }
        Fault::None
        | Fault::Slow(_)
        | Fault::ConflictOnce
        | Fault::TooManyRequestsPlain { .. }
        | Fault::EventsError500 => None,
    }
}

/// Faults answered before routing: the max-in-flight / APF filters' 429
/// (plain text, `Retry-After`, no Status body, exactly as
/// staging/src/k8s.io/apiserver/pkg/server/filters answer it), and a 500 for
/// Event writes only.
pub fn write_fault(fault: Option<Fault>, method: &Method, uri: &Uri) -> Option<Response> {
    match fault? {
        Fault::TooManyRequestsPlain { retry_after_secs } => {
            let mut resp = (
                StatusCode::TOO_MANY_REQUESTS,
                [("content-type", "text/plain; charset=utf-8")],
                "Too many requests, please try again later.\n",
            )
                .into_response();
            resp.headers_mut()
                .insert("retry-after", retry_after_secs.to_string().parse().unwrap());
            Some(resp)
        }
        Fault::EventsError500 if method != Method::GET && uri.path().contains("/events") => {
            let (c, v) = status(500, "InternalError", "injected failure of an event write");
            Some(
                (
                    StatusCode::from_u16(c).unwrap(),
                    [("content-type", "application/json")],
                    v.to_string(),
                )
                    .into_response(),
            )
        }
        _ => None,
    }
}

/// `Fault::ConflictOnce`: whether this write gets its one 409 (and the fault is spent).
pub fn take_conflict(fault: &mut Option<Fault>) -> bool {
    if *fault == Some(Fault::ConflictOnce) {
        *fault = None;
        return true;
    }
    false
}

impl TestApiServer {
    pub fn set_fault(&self, fault: Fault) {
        self.with(|s| s.part::<FaultState>().fault = Some(fault));
    }

    pub fn clear_fault(&self) {
        self.with(|s| s.part::<FaultState>().fault = None);
    }

    /// Closes every open connection at once (in-flight watches included), as a
    /// restarting API server or a dropped network path does. New connections
    /// are served as before unless [`Fault::Down`] is set.
    pub fn cut_connections(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// TCP connections accepted (refused ones included) since `from`.
    pub fn connections_since(&self, from: Instant) -> Vec<Duration> {
        self.with(|s| {
            s.part::<FaultState>()
                .accepted
                .iter()
                .filter(|t| **t >= from)
                .map(|t| t.duration_since(from))
                .collect()
        })
    }
}
