//! The cluster side of nodeproof: what acts on the node agents' findings.
//! The node agents prove each node's state and write it on the Node
//! (conditions, `runtimeclass.nodeproof.dev/<class>` contract labels); this
//! crate reads it back cluster-wide and steers scheduling with the APIs
//! Kubernetes really has (scheduling gates, RuntimeClass `scheduling`,
//! ValidatingAdmissionPolicy). It depends on `nodeproof-kube` for the shared
//! vocabulary (contracts, toleration matching), never the other way.

pub mod gate;
