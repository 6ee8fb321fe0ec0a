//! What crosses the user/kernel boundary, defined once in C: `build/main.rs`
//! generates these structs and constants from the programs' own headers
//! (`bpf/np_trace.h`, `bpf/np_record.h`; the generator is `build/layout.rs`),
//! so the two sides cannot be written apart. The tests below check rustc's
//! layout of each against clang's, as the compiled objects' BTF records it.

/// The tracer's records: ring-buffer samples, the count key, the stats indexes.
pub mod trace {
    include!(concat!(env!("OUT_DIR"), "/np_trace.rs"));
}

/// The recorder's map keys and values, slots, arches and defaults.
pub mod record {
    include!(concat!(env!("OUT_DIR"), "/np_record.rs"));
}

/// A struct's layout as rustc gives it (generated `LAYOUTS`).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct CStruct {
    pub name: &'static str,
    pub size: usize,
    pub fields: &'static [CField],
}

#[cfg(test)]
#[derive(Debug)]
pub(crate) struct CField {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
}

#[cfg(test)]
mod btf;

/// The generator's own unit tests run with the crate's.
#[cfg(test)]
#[path = "../build/layout.rs"]
mod generator;

#[cfg(test)]
mod tests {
    use super::btf::{self, BtfStruct};
    use super::*;
    use crate::bpf;
    use nodeproof_testkit::{require, Need};

    fn generated() -> impl Iterator<Item = &'static CStruct> {
        trace::LAYOUTS.iter().chain(record::LAYOUTS)
    }

    /// Equal when the size and every field's name, offset and size are.
    fn matches(rust: &CStruct, c: &BtfStruct) -> Result<(), String> {
        let clang: Vec<(&str, usize, usize)> = c
            .members
            .iter()
            .map(|m| (m.name.as_str(), m.offset, m.size))
            .collect();
        let ours: Vec<(&str, usize, usize)> = rust
            .fields
            .iter()
            .map(|f| (f.name, f.offset, f.size))
            .collect();
        if rust.size != c.size || ours != clang {
            return Err(format!(
                "struct {}: Rust {} bytes {ours:?}, clang {} bytes {clang:?} (name, offset, size)",
                rust.name, rust.size, c.size
            ));
        }
        Ok(())
    }

    /// Every generated struct against the anchors object (which holds them
    /// all), and against each program's object wherever it names the struct:
    /// a program that declared its own copy of a shared struct would differ here.
    #[test]
    fn generated_structs_have_the_layout_clang_gives_the_programs() {
        if require(&[Need::EbpfPrograms {
            built: !bpf::is_stub(),
        }])
        .is_none()
        {
            return;
        }
        let anchors = btf::structs(bpf::LAYOUT).unwrap();
        let mut seen_in_programs = 0;
        for rust in generated() {
            let c = anchors
                .get(rust.name)
                .unwrap_or_else(|| panic!("struct {} is not in layout.bpf.o's BTF", rust.name));
            matches(rust, c).unwrap();
            for (object, bytes) in bpf::PROGRAMS {
                if let Some(c) = btf::structs(bytes).unwrap().get(rust.name) {
                    matches(rust, c).unwrap_or_else(|e| panic!("{object}: {e}"));
                    seen_in_programs += 1;
                }
            }
        }
        // The map keys and values (np_count_key in two objects, np_rec_* in one).
        assert!(seen_in_programs >= 6, "{seen_in_programs}");
    }

    const fn field(name: &'static str, offset: usize, size: usize) -> CField {
        CField { name, offset, size }
    }

    const SAME: &[CField] = &[field("n", 0, 4), field("over", 4, 4)];
    /// A field's size, the order, a field fewer.
    const DRIFTED: [&[CField]; 3] = [
        &[field("n", 0, 4), field("over", 4, 2)],
        &[field("over", 0, 4), field("n", 4, 4)],
        &[field("n", 0, 8)],
    ];

    /// The comparison itself fails on a drift: [`DRIFTED`], the struct's size.
    #[test]
    fn a_layout_that_drifted_is_told_apart() {
        let member = |name: &str, offset, size| btf::BtfMember {
            name: name.into(),
            offset,
            size,
        };
        let c = BtfStruct {
            size: 8,
            members: vec![member("n", 0, 4), member("over", 4, 4)],
        };
        let same = CStruct {
            name: "np_rec_count",
            size: 8,
            fields: SAME,
        };
        matches(&same, &c).unwrap();
        for fields in DRIFTED {
            let drifted = CStruct { fields, ..same };
            assert!(matches(&drifted, &c).is_err(), "{drifted:?}");
        }
        let bigger = CStruct { size: 16, ..same };
        assert!(matches(&bigger, &c).is_err());
    }
}
