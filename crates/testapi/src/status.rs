//! kube-apiserver's `Status` answers: what every refusal here is made of
//! (k8s.io/apimachinery/pkg/api/errors/errors.go builds the same objects).

use serde_json::{json, Value};

/// An HTTP status and its JSON body.
pub type Answer = (u16, Value);

/// A `Status` with `reason`, `message` and `code`.
pub fn status(code: u16, reason: &str, message: &str) -> Answer {
    (
        code,
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
               "reason": reason, "message": message, "code": code}),
    )
}

/// `errors.NewInvalid`: 422, `<kind> "<name>" is invalid: <detail>`.
pub fn invalid(kind: &str, name: &str, detail: &str) -> Answer {
    status(
        422,
        "Invalid",
        &format!("{kind} \"{name}\" is invalid: {detail}"),
    )
}

/// The 404 of a path no API group version serves.
pub fn no_such_resource() -> Answer {
    status(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}
