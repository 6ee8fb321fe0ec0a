//! The XID catalog: what each XID nodeproof classifies means, NVIDIA's
//! recommended actions, and nodeproof's default class. Shipped as data
//! (`data/xid-catalog.toml`, compiled in) and parsed once; the policy's
//! default fatal/ignored lists are derived from it, and verdict messages name
//! an XID by its meaning.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

/// How the policy treats an XID.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum XidClass {
    /// The GPU needs a reset or replacement: fails it at once.
    Fatal,
    /// Counted in the metrics, never judged (application faults, informational events).
    Ignored,
    /// Fails the GPU only when it repeats within its window.
    Other,
}

impl XidClass {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One row of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct XidEntry {
    pub code: u64,
    /// NVIDIA's mnemonic (nverror.h).
    pub mnemonic: String,
    /// NVIDIA's description.
    pub meaning: String,
    /// nodeproof's default class.
    pub class: XidClass,
    /// NVIDIA's immediate-action resolution bucket.
    pub immediate: String,
    /// NVIDIA's investigatory-action resolution bucket.
    pub investigatory: String,
    /// What depends on the driver branch or GPU generation.
    #[serde(default)]
    pub branch: Option<String>,
    /// Why this class.
    #[serde(default)]
    pub why: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    xid: Vec<XidEntry>,
}

#[derive(Debug, thiserror::Error)]
pub enum XidCatalogError {
    #[error("the XID catalog does not parse")]
    Parse {
        #[source]
        source: toml::de::Error,
    },
    #[error("the XID catalog lists XID {code} twice")]
    Duplicate { code: u64 },
    #[error("the XID catalog's codes are not in ascending order at XID {code}")]
    Unordered { code: u64 },
}

const SHIPPED: &str = include_str!("../data/xid-catalog.toml");

/// Parses catalog text: entries in ascending code order, each code once.
pub fn parse(text: &str) -> Result<Vec<XidEntry>, XidCatalogError> {
    let file: CatalogFile =
        toml::from_str(text).map_err(|source| XidCatalogError::Parse { source })?;
    for pair in file.xid.windows(2) {
        if pair[0].code == pair[1].code {
            return Err(XidCatalogError::Duplicate { code: pair[1].code });
        }
        if pair[0].code > pair[1].code {
            return Err(XidCatalogError::Unordered { code: pair[1].code });
        }
    }
    Ok(file.xid)
}

/// The shipped catalog, parsed on first use. It is compiled in and checked
/// by this module's tests, so a parse failure is a build defect.
pub fn catalog() -> &'static [XidEntry] {
    static CATALOG: OnceLock<Vec<XidEntry>> = OnceLock::new();
    CATALOG.get_or_init(|| {
        parse(SHIPPED).unwrap_or_else(|e| panic!("shipped data/xid-catalog.toml: {e}"))
    })
}

pub fn lookup(code: u64) -> Option<&'static XidEntry> {
    let c = catalog();
    c.binary_search_by_key(&code, |e| e.code)
        .ok()
        .map(|i| &c[i])
}

/// The catalog's codes of one class, ascending.
pub fn codes_of(class: XidClass) -> Vec<u64> {
    catalog()
        .iter()
        .filter(|e| e.class == class)
        .map(|e| e.code)
        .collect()
}

/// `XID 79 (GPU has fallen off the bus)`, or `XID 999` for a code the
/// catalog does not list.
pub fn describe(code: u64) -> String {
    match lookup(code) {
        Some(e) => format!("XID {code} ({})", e.meaning),
        None => format!("XID {code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_catalog_parses_and_classifies() {
        let c = catalog();
        assert!(c.len() >= 20, "{}", c.len());
        assert_eq!(
            codes_of(XidClass::Fatal),
            [46, 48, 62, 64, 74, 79, 95, 109, 119, 120, 140]
        );
        assert_eq!(
            codes_of(XidClass::Ignored),
            [13, 31, 43, 45, 63, 68, 92, 154]
        );
        assert_eq!(codes_of(XidClass::Other), [94]);
        for e in c {
            assert!(!e.meaning.is_empty() && !e.mnemonic.is_empty(), "{e:?}");
            assert!(!e.immediate.is_empty(), "{e:?}");
            // A fatal class must rest on NVIDIA asking for more than an application restart.
            if e.class == XidClass::Fatal {
                assert!(
                    !matches!(e.immediate.as_str(), "IGNORE" | "RESTART_APP"),
                    "{e:?}"
                );
            }
        }
    }

    #[test]
    fn lookup_and_describe() {
        let e = lookup(79).unwrap();
        assert_eq!(e.mnemonic, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS");
        assert_eq!(e.immediate, "RESTART_BM");
        assert_eq!(describe(79), "XID 79 (GPU has fallen off the bus)");
        assert_eq!(describe(999), "XID 999");
        assert!(lookup(999).is_none());
    }

    #[test]
    fn malformed_catalogs_are_refused() {
        let row = |code| {
            format!(
                "[[xid]]\ncode = {code}\nmnemonic = \"M\"\nmeaning = \"m\"\nclass = \"other\"\n\
                 immediate = \"IGNORE\"\ninvestigatory = \"IGNORE\"\n"
            )
        };
        assert_eq!(parse(&(row(1) + &row(2))).unwrap().len(), 2);
        assert!(matches!(
            parse(&(row(2) + &row(2))),
            Err(XidCatalogError::Duplicate { code: 2 })
        ));
        assert!(matches!(
            parse(&(row(3) + &row(2))),
            Err(XidCatalogError::Unordered { code: 2 })
        ));
        assert!(matches!(
            parse(&row(1).replace("other", "deadly")),
            Err(XidCatalogError::Parse { .. })
        ));
    }
}
