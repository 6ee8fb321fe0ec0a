//! RuntimeClass contracts: what a class's pods need on a node, declared by
//! annotations on the RuntimeClass, and the Node label that says whether this
//! node meets them. Pure; shared by the node agent (which judges and labels
//! its node) and the cluster side (the gate controller, `cluster policy`,
//! `cluster check`), so both read one vocabulary.
//!
//! Upstream RuntimeClass has no seccomp field (node.k8s.io/v1 has `handler`,
//! `overhead`, `scheduling`), so the contract rides on annotations, and the
//! scheduler is steered with what it already obeys: the class's
//! `scheduling.nodeSelector` naming the label this module defines.
//!
//! ```yaml
//! metadata:
//!   name: vllm
//!   annotations:
//!     nodeproof.dev/localhost-profiles: "profiles/vllm-strict.json,profiles/vllm-init.json"
//!     nodeproof.dev/requires: "gpu"
//! scheduling:
//!   nodeSelector: {runtimeclass.nodeproof.dev/vllm: ready}
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use strum::{EnumString, IntoStaticStr};

/// The Localhost profiles a class's pods use, comma-separated, as pods write
/// them in `localhostProfile` (relative to the kubelet's seccomp root).
pub const ANNOTATION_PROFILES: &str = "nodeproof.dev/localhost-profiles";
/// Further needs, comma-separated (today: `gpu`).
pub const ANNOTATION_REQUIRES: &str = "nodeproof.dev/requires";
/// Every contract label key starts with this. Not under `kubernetes.io` or
/// `k8s.io`, so NodeRestriction lets the node identity set it on its own Node.
pub const LABEL_PREFIX: &str = "runtimeclass.nodeproof.dev/";
/// The longest name part of a label key (validation.IsQualifiedName).
const LABEL_NAME_MAX: usize = 63;
/// Hex digits of SHA-256 kept in a hashed label name.
const HASH_HEX: usize = 10;

/// A need beyond the profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Requirement {
    /// `GPUDriverReady` and `GPUHealthy` True on the node.
    Gpu,
}

impl Requirement {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub const ALL: [Requirement; 1] = [Requirement::Gpu];
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an annotated RuntimeClass asks of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    /// The RuntimeClass's name.
    pub class: String,
    /// `localhostProfile` paths, in the annotation's order, without repeats.
    pub profiles: Vec<String>,
    pub requires: BTreeSet<Requirement>,
}

impl Contract {
    /// The Node label that says whether this node meets the contract.
    pub fn label_key(&self) -> String {
        label_key(&self.class)
    }
}

/// An annotation that cannot be a contract; said on the node (a Node Event)
/// and by `cluster check`, never guessed around.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    #[error("RuntimeClass {class}: {ANNOTATION_PROFILES} lists no profile")]
    NoProfiles { class: String },
    #[error(
        "RuntimeClass {class}: {ANNOTATION_PROFILES} entry {path:?} is not a relative path below the seccomp root"
    )]
    BadProfilePath { class: String, path: String },
    #[error(
        "RuntimeClass {class}: {ANNOTATION_REQUIRES} names {word:?}; known: {}",
        Requirement::ALL.map(Requirement::as_str).join(", ")
    )]
    UnknownRequirement { class: String, word: String },
    /// A `nodeproof.dev/` annotation nodeproof does not read, or one a few
    /// edits from one it does: the contract it was meant to declare would
    /// otherwise be silently absent.
    #[error(
        "RuntimeClass {class}: annotation {key} is not one nodeproof reads; {}",
        match suggestion {
            Some(known) => format!("did you mean {known}? rename it"),
            None => format!("nodeproof reads {}", ANNOTATIONS.join(" and ")),
        }
    )]
    UnknownAnnotation {
        class: String,
        key: String,
        suggestion: Option<&'static str>,
    },
}

/// The annotations a contract is declared with.
pub const ANNOTATIONS: [&str; 2] = [ANNOTATION_PROFILES, ANNOTATION_REQUIRES];
/// nodeproof's annotation prefix: every key under it is one of [`ANNOTATIONS`].
const ANNOTATION_PREFIX: &str = "nodeproof.dev/";
/// Edits within which another key is taken for a misspelt contract annotation.
const NEAR: usize = 3;

/// Levenshtein distance, ASCII case-insensitive.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<u8> = b.bytes().map(|c| c.to_ascii_lowercase()).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().map(|c| c.to_ascii_lowercase()).enumerate() {
        let mut cur = vec![i + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The first annotation that looks meant for nodeproof but is not one it
/// reads: under `nodeproof.dev/`, or within [`NEAR`] edits of a contract
/// annotation (`nodeproof.dev/localhost-profile`, `nodeprof.dev/requires`).
fn unknown_annotation(
    class: &str,
    annotations: &BTreeMap<String, String>,
) -> Option<ContractError> {
    annotations.keys().find_map(|key| {
        if ANNOTATIONS.contains(&key.as_str()) {
            return None;
        }
        let closest = ANNOTATIONS
            .into_iter()
            .map(|known| (edit_distance(key, known), known))
            .min()
            .filter(|&(d, _)| d <= NEAR);
        let ours = key
            .get(..ANNOTATION_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(ANNOTATION_PREFIX));
        (ours || closest.is_some()).then(|| ContractError::UnknownAnnotation {
            class: class.to_string(),
            key: key.clone(),
            suggestion: closest.map(|(_, known)| known),
        })
    })
}

/// The label value of a contract's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, IntoStaticStr, EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum ContractState {
    Ready,
    NotReady,
}

impl ContractState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(value: &str) -> Option<ContractState> {
        value.parse().ok()
    }
}

impl fmt::Display for ContractState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The contract a RuntimeClass declares: `None` when it carries no
/// `nodeproof.dev/localhost-profiles` annotation (a class with only
/// `requires` declares no contract either: the profiles are the point), an
/// error when it carries a `nodeproof.dev/` annotation nodeproof does not
/// read or a near miss of one it does.
pub fn contract_of(
    class: &str,
    annotations: &BTreeMap<String, String>,
) -> Option<Result<Contract, ContractError>> {
    if let Some(e) = unknown_annotation(class, annotations) {
        return Some(Err(e));
    }
    let profiles = annotations.get(ANNOTATION_PROFILES)?;
    Some(parse(class, profiles, annotations.get(ANNOTATION_REQUIRES)))
}

fn parse(
    class: &str,
    profiles: &str,
    requires: Option<&String>,
) -> Result<Contract, ContractError> {
    let mut list: Vec<String> = Vec::new();
    for path in words(profiles) {
        // The kubelet joins localhostProfile to its seccomp root and refuses
        // what escapes it; a contract naming such a path could never be met.
        let escapes = path.starts_with('/') || path.split('/').any(|c| c == "..");
        if escapes {
            return Err(ContractError::BadProfilePath {
                class: class.to_string(),
                path: path.to_string(),
            });
        }
        if !list.iter().any(|p| p == path) {
            list.push(path.to_string());
        }
    }
    if list.is_empty() {
        return Err(ContractError::NoProfiles {
            class: class.to_string(),
        });
    }
    let mut needs = BTreeSet::new();
    for word in requires
        .map(String::as_str)
        .map(words)
        .into_iter()
        .flatten()
    {
        let Some(r) = Requirement::ALL
            .into_iter()
            .find(|r| r.as_str().eq_ignore_ascii_case(word))
        else {
            return Err(ContractError::UnknownRequirement {
                class: class.to_string(),
                word: word.to_string(),
            });
        };
        needs.insert(r);
    }
    Ok(Contract {
        class: class.to_string(),
        profiles: list,
        requires: needs,
    })
}

fn words(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|w| !w.is_empty())
}

/// `runtimeclass.nodeproof.dev/<class>`. A RuntimeClass name is a DNS
/// subdomain (up to 253 characters of `[a-z0-9.-]`, alphanumeric at both
/// ends), so one of up to 63 characters is a valid label name as it is. A
/// longer one is cut to its first 52 characters (trailing `-`/`.` removed)
/// and followed by `-` and the first 10 hex digits of the SHA-256 of the
/// whole name: `printf %s NAME | sha256sum | cut -c1-10`.
pub fn label_key(class: &str) -> String {
    format!("{LABEL_PREFIX}{}", label_name(class))
}

fn label_name(class: &str) -> String {
    if class.len() <= LABEL_NAME_MAX {
        return class.to_string();
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, class.as_bytes());
    let hex: String = digest.as_ref()[..HASH_HEX / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = LABEL_NAME_MAX - HASH_HEX - 1;
    let head = class[..keep].trim_end_matches(['-', '.']);
    format!("{head}-{hex}")
}

/// Whether `key` is a contract label (nodeproof owns it and removes it when
/// its class is gone or no longer annotated).
pub fn is_contract_label(key: &str) -> bool {
    key.starts_with(LABEL_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_class_without_the_profiles_annotation_has_no_contract() {
        assert_eq!(contract_of("runc", &ann(&[])), None);
        assert_eq!(
            contract_of("gpu", &ann(&[(ANNOTATION_REQUIRES, "gpu")])),
            None
        );
    }

    #[test]
    fn profiles_and_requirements_are_read_in_order_without_repeats() {
        let c = contract_of(
            "vllm",
            &ann(&[
                (
                    ANNOTATION_PROFILES,
                    " profiles/vllm-strict.json, profiles/vllm-init.json,,profiles/vllm-strict.json",
                ),
                (ANNOTATION_REQUIRES, "GPU"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.profiles,
            ["profiles/vllm-strict.json", "profiles/vllm-init.json"]
        );
        assert_eq!(c.requires, BTreeSet::from([Requirement::Gpu]));
        assert_eq!(c.label_key(), "runtimeclass.nodeproof.dev/vllm");
    }

    #[test]
    fn a_contract_that_can_never_be_met_is_an_error() {
        let err = |profiles: &str, requires: &str| {
            contract_of(
                "c",
                &ann(&[
                    (ANNOTATION_PROFILES, profiles),
                    (ANNOTATION_REQUIRES, requires),
                ]),
            )
            .unwrap()
            .unwrap_err()
        };
        assert_eq!(
            err(" , ", ""),
            ContractError::NoProfiles { class: "c".into() }
        );
        assert!(matches!(
            err("../etc/passwd", ""),
            ContractError::BadProfilePath { .. }
        ));
        assert!(matches!(
            err("/abs.json", ""),
            ContractError::BadProfilePath { .. }
        ));
        let e = err("a.json", "gpu,tpu");
        assert_eq!(
            e.to_string(),
            "RuntimeClass c: nodeproof.dev/requires names \"tpu\"; known: gpu"
        );
    }

    #[test]
    fn long_class_names_are_hashed_into_a_valid_label_name() {
        let short = "a".repeat(63);
        assert_eq!(label_key(&short), format!("{LABEL_PREFIX}{short}"));
        // 64 characters: cut, and a dash before the cut is not kept.
        let long = format!("{}-{}", "a".repeat(51), "b".repeat(12));
        let name = label_name(&long);
        assert!(name.len() <= 63, "{name}");
        // printf %s "$long" | sha256sum | cut -c1-10
        assert_eq!(name, format!("{}-{}", "a".repeat(51), "c391e01bc3"));
        let other = format!("{}-{}", "a".repeat(51), "c".repeat(12));
        assert_ne!(label_name(&other), name, "names sharing a head differ");
        assert!(name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
    }

    #[test]
    fn states_round_trip_as_label_values() {
        for s in [ContractState::Ready, ContractState::NotReady] {
            assert_eq!(ContractState::parse(s.as_str()), Some(s));
        }
        assert_eq!(ContractState::parse("true"), None);
        assert!(is_contract_label("runtimeclass.nodeproof.dev/x"));
        assert!(!is_contract_label("nodeproof.dev/x"));
    }

    #[test]
    fn a_misspelt_annotation_gets_a_did_you_mean() {
        let err = |key: &str| {
            contract_of("vllm", &ann(&[(key, "profiles/vllm-strict.json")]))
                .expect("said, not taken for no contract")
                .unwrap_err()
        };
        assert_eq!(
            err("nodeproof.dev/localhost-profile").to_string(),
            "RuntimeClass vllm: annotation nodeproof.dev/localhost-profile is not one nodeproof reads; did you mean nodeproof.dev/localhost-profiles? rename it"
        );
        assert!(matches!(
            err("nodeprof.dev/requires"),
            ContractError::UnknownAnnotation {
                suggestion: Some(ANNOTATION_REQUIRES),
                ..
            }
        ));
        assert_eq!(
            err("nodeproof.dev/owner").to_string(),
            "RuntimeClass vllm: annotation nodeproof.dev/owner is not one nodeproof reads; nodeproof reads nodeproof.dev/localhost-profiles and nodeproof.dev/requires"
        );
        // Beside a good contract, a misspelt requirement is said too.
        let both = ann(&[
            (ANNOTATION_PROFILES, "a.json"),
            ("nodeproof.dev/require", "gpu"),
        ]);
        assert!(matches!(
            contract_of("c", &both),
            Some(Err(ContractError::UnknownAnnotation { .. }))
        ));
        // Other owners' annotations are not nodeproof's business.
        let others = ann(&[
            (ANNOTATION_PROFILES, "a.json"),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
            ("example.com/localhost-profiles", "x"),
        ]);
        assert!(matches!(contract_of("c", &others), Some(Ok(_))));
        assert_eq!(contract_of("c", &ann(&[("example.com/team", "ml")])), None);
    }
}
