//! `Retry-After` on a 429 as kube-rs can see it.
//!
//! kube-apiserver's throttling filters (max-in-flight and API Priority and
//! Fairness) answer 429 in plain text, `Too many requests, please try again
//! later.`, with a `Retry-After` header and no Status body; kube-rs turns an
//! error response into a `Status` from the body alone, so the header would
//! be lost. client-go reads the header (rest `checkWait`, seconds only); this
//! layer copies it into the Status kube-rs parses
//! (`details.retryAfterSeconds`), where the API server's own JSON 429s put
//! it already.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use kube::client::Body;
use kube::core::Status;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type LayerBody = UnsyncBoxBody<bytes::Bytes, BoxError>;

#[derive(Debug, Clone, Copy, Default)]
pub struct RetryAfterLayer;

impl<S> tower::Layer<S> for RetryAfterLayer {
    type Service = RetryAfter<S>;
    fn layer(&self, inner: S) -> RetryAfter<S> {
        RetryAfter(inner)
    }
}

#[derive(Debug, Clone)]
pub struct RetryAfter<S>(S);

impl<S, B> tower::Service<Request<Body>> for RetryAfter<S>
where
    S: tower::Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Send,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<LayerBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let fut = self.0.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(carry_retry_after(resp).await)
        })
    }
}

/// Seconds of a `Retry-After` header; the HTTP-date form is not used by
/// kube-apiserver and, as in client-go, not understood.
fn retry_after_secs(resp: &Response<impl http_body::Body>) -> Option<u32> {
    resp.headers()
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn carry_retry_after<B>(resp: Response<B>) -> Response<LayerBody>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let secs = match retry_after_secs(&resp) {
        Some(secs) if resp.status() == StatusCode::TOO_MANY_REQUESTS => secs,
        _ => return resp.map(|b| b.map_err(Into::into).boxed_unsync()),
    };
    let (mut parts, body) = resp.into_parts();
    let bytes = match body.collect().await {
        Ok(c) => c.to_bytes(),
        // The body is lost either way; the status and header still say 429.
        Err(_) => bytes::Bytes::new(),
    };
    let mut status = serde_json::from_slice::<Status>(&bytes).unwrap_or_else(|_| {
        let text = String::from_utf8_lossy(&bytes);
        Status::failure(text.trim(), "TooManyRequests").with_code(429)
    });
    let details = status
        .details
        .get_or_insert_with(|| kube::core::response::StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        });
    if details.retry_after_seconds == 0 {
        details.retry_after_seconds = secs;
    }
    let body = serde_json::to_vec(&status).unwrap_or_default();
    parts.headers.remove(CONTENT_LENGTH);
    parts.headers.insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(
        parts,
        Full::new(bytes::Bytes::from(body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_plain_text_429_becomes_a_status_with_retry_after() {
        let resp = Response::builder()
            .status(429)
            .header(RETRY_AFTER, "7")
            .header(CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Full::new(bytes::Bytes::from_static(
                b"Too many requests, please try again later.\n",
            )))
            .unwrap();
        let out = carry_retry_after(resp).await;
        let bytes = out.into_body().collect().await.unwrap().to_bytes();
        let status: Status = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(status.code, 429);
        assert_eq!(status.message, "Too many requests, please try again later.");
        assert_eq!(status.details.unwrap().retry_after_seconds, 7);
    }

    #[tokio::test]
    async fn other_responses_pass_unchanged() {
        let resp = Response::builder()
            .status(500)
            .header(RETRY_AFTER, "7")
            .body(Full::new(bytes::Bytes::from_static(b"boom")))
            .unwrap();
        let out = carry_retry_after(resp).await;
        assert_eq!(out.status(), 500);
        let bytes = out.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"boom");
    }
}
