//! What CRI-O hands the OCI runtime for a Localhost profile. CRI-O does not
//! splice the file: containers/common reads it with Go's `encoding/json`
//! into its template type, evaluates the template for this host
//! (`setupSeccomp`), and CRI-O marshals the resulting `specs.LinuxSeccomp`
//! into the bundle's config.json. So crun always reads canonical JSON.
//!
//! The decoding and the template are nodeproof's own mirror of them
//! (`nodeproof_seccomp::decode` and `template`), which the runc oracle checks
//! against real Go decoding (runc decodes config.json with the same
//! `encoding/json`). The crun oracle is thus "CRI-O's front end, mirrored, then
//! real crun": it judges crun's part (the filter crun builds, crun's init),
//! not Go's.

use nodeproof_seccomp::decode;
use nodeproof_seccomp::filter::Arch;
use nodeproof_seccomp::json;
use nodeproof_seccomp::model::{Seccomp, TPL_SECCOMP};
use nodeproof_seccomp::template::{self, TemplateContext};
use serde_json::{json, Map, Value};

/// What CRI-O does with a profile file's bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Handoff {
    /// CRI-O refuses the file (CreateContainer fails); no runtime runs. Why.
    Refused(String),
    /// The `linux.seccomp` value CRI-O writes into config.json.
    Seccomp(Value),
    /// No default action and no rules: `setupSeccomp` returns nil ("assume
    /// seccomp disabled") and config.json has no `linux.seccomp`.
    Unconfined,
}

/// The profile as CRI-O hands it to the runtime, on this host's architecture.
pub fn handoff(profile: &[u8]) -> Handoff {
    let mut root = match json::parse(profile) {
        Ok(root) => root,
        Err(e) => return Handoff::Refused(format!("invalid JSON: {e}")),
    };
    let decoded = decode::decode(&mut root, &TPL_SECCOMP);
    if let Some(e) = decoded.type_error {
        return Handoff::Refused(e);
    }
    match template::evaluate(decoded.root, &TemplateContext::for_host(Arch::native())) {
        Ok(p) if p.disables_seccomp() => Handoff::Unconfined,
        Ok(p) => Handoff::Seccomp(runtime_spec_json(&p)),
        Err(d) => Handoff::Refused(d.message),
    }
}

/// `json.Marshal` of `specs.LinuxSeccomp` (runtime-spec's field tags: which
/// fields are `omitempty`).
pub fn runtime_spec_json(p: &Seccomp) -> Value {
    let mut o = Map::new();
    o.insert("defaultAction".into(), json!(p.default_action));
    if let Some(e) = p.default_errno_ret {
        o.insert("defaultErrnoRet".into(), json!(e));
    }
    if !p.architectures.is_empty() {
        o.insert("architectures".into(), json!(p.architectures));
    }
    if !p.flags.is_empty() {
        o.insert("flags".into(), json!(p.flags));
    }
    if !p.listener_path.is_empty() {
        o.insert("listenerPath".into(), json!(p.listener_path));
    }
    if !p.listener_metadata.is_empty() {
        o.insert("listenerMetadata".into(), json!(p.listener_metadata));
    }
    if !p.syscalls.is_empty() {
        let rules: Vec<Value> = p
            .syscalls
            .iter()
            .map(|r| {
                let mut s = Map::new();
                s.insert("names".into(), json!(r.names));
                s.insert("action".into(), json!(r.action));
                if let Some(e) = r.errno_ret {
                    s.insert("errnoRet".into(), json!(e));
                }
                if !r.args.is_empty() {
                    let args: Vec<Value> = r
                        .args
                        .iter()
                        .map(|a| {
                            let mut m = Map::new();
                            m.insert("index".into(), json!(a.index));
                            m.insert("value".into(), json!(a.value));
                            if a.value_two != 0 {
                                m.insert("valueTwo".into(), json!(a.value_two));
                            }
                            m.insert("op".into(), json!(a.op));
                            Value::Object(m)
                        })
                        .collect();
                    s.insert("args".into(), Value::Array(args));
                }
                Value::Object(s)
            })
            .collect();
        o.insert("syscalls".into(), Value::Array(rules));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_decoding_is_applied_before_the_runtime_sees_the_profile() {
        // Case-folded key, last duplicate wins, docker-template `name`.
        let h = handoff(
            br#"{"DefaultAction":"SCMP_ACT_ALLOW","defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"name":"mkdir","action":"SCMP_ACT_ALLOW"}]}"#,
        );
        assert_eq!(
            h,
            Handoff::Seccomp(json!({"defaultAction":"SCMP_ACT_ERRNO",
                "syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ALLOW"}]}))
        );
        assert!(matches!(handoff(b"\xef\xbb\xbf{}"), Handoff::Refused(_)));
        assert_eq!(handoff(b"null"), Handoff::Unconfined);
        assert_eq!(handoff(b"{}"), Handoff::Unconfined);
        assert!(matches!(
            handoff(br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"SCMP_ACT_ERRNO","errnoRet":-1}]}"#),
            Handoff::Refused(_)
        ));
    }
}
