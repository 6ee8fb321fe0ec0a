//! The reads of `nodeproof cluster check` with a cluster reader's
//! credentials (deploy/base/rbac-cluster-check.yaml grants exactly these):
//! paged lists of typed and dynamic kinds, Events by field selector, an
//! APIService. What the check makes of them is `nodeproof-cluster`'s
//! (`check/read.rs`).

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::Client;

use crate::list::list_all;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {what}")]
    Read {
        what: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
}

impl ReadError {
    /// The API server did not answer (refused, reset, timed out: kube-rs's
    /// transport errors) or answered that it cannot serve now (5xx, 429):
    /// worth reading again after a while. Anything else (403, 404, a body
    /// that does not decode) would answer the same again.
    pub fn is_transient(&self) -> bool {
        let ReadError::Read { source, .. } = self;
        match source.as_ref() {
            kube::Error::Api(s) => s.code >= 500 || s.code == 429,
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                true
            }
            _ => false,
        }
    }

    /// The API server's answer, when it answered with a Status: its code
    /// and message.
    pub fn answered(&self) -> Option<(u16, &str)> {
        let ReadError::Read { source, .. } = self;
        match source.as_ref() {
            kube::Error::Api(s) => Some((s.code, s.message.as_str())),
            _ => None,
        }
    }
}

fn failed(what: &'static str) -> impl FnOnce(kube::Error) -> ReadError {
    move |e| ReadError::Read {
        what,
        source: Box::new(e),
    }
}

/// A kind read without a k8s-openapi type (an aggregated API such as
/// metrics.k8s.io, or a version newer than k8s-openapi's types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DynamicKind<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub plural: &'a str,
}

impl DynamicKind<'_> {
    pub(crate) fn resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.into(),
            version: self.version.into(),
            api_version: format!("{}/{}", self.group, self.version),
            kind: self.kind.into(),
            plural: self.plural.into(),
        }
    }
}

/// Every object of `kind`, every page (`what` names it in the error).
pub async fn all_dynamic(
    client: &Client,
    kind: DynamicKind<'_>,
    what: &'static str,
) -> Result<Vec<DynamicObject>, ReadError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource());
    list_all(&api, ListParams::default())
        .await
        .map_err(failed(what))
}

/// Every object of a typed kind, every page (`what` names it in the error).
pub async fn all<K>(client: &Client, what: &'static str) -> Result<Vec<K>, ReadError>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    list_all(&Api::<K>::all(client.clone()), ListParams::default())
        .await
        .map_err(failed(what))
}

/// The Events that `field_selector` selects, every page.
pub async fn events(
    client: &Client,
    field_selector: &str,
    what: &'static str,
) -> Result<Vec<Event>, ReadError> {
    list_all(
        &Api::<Event>::all(client.clone()),
        ListParams::default().fields(field_selector),
    )
    .await
    .map_err(failed(what))
}

/// The APIService `name`, if registered.
pub async fn api_service(
    client: &Client,
    name: &str,
    what: &'static str,
) -> Result<Option<APIService>, ReadError> {
    Api::<APIService>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(failed(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("injected", "Injected")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn what_is_read_again_is_what_the_server_could_not_answer() {
        let read = |e| failed("Nodes")(e).is_transient();
        assert!(read(kube::Error::Service("connection refused".into())));
        assert!(read(api(503)));
        assert!(read(api(500)));
        assert!(read(api(429)));
        assert!(!read(api(403)), "a missing role answers the same again");
        assert!(!read(api(404)));
    }

    #[test]
    fn an_answer_is_told_from_no_answer() {
        assert_eq!(
            failed("Nodes")(api(404)).answered(),
            Some((404, "injected"))
        );
        let refused = kube::Error::Service("connection refused".into());
        assert_eq!(failed("Nodes")(refused).answered(), None);
    }

    #[test]
    fn a_dynamic_kind_is_its_group_version() {
        let r = DynamicKind {
            group: "metrics.k8s.io",
            version: "v1beta1",
            kind: "NodeMetrics",
            plural: "nodes",
        }
        .resource();
        assert_eq!(r.api_version, "metrics.k8s.io/v1beta1");
        assert_eq!(r.plural, "nodes");
    }
}
