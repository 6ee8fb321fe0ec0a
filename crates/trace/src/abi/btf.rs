//! The structs of a compiled eBPF object's `.BTF` section, as clang laid
//! them out: the evidence the layout test holds the generated Rust against.
//! Reads the format of the kernel's Documentation/bpf/btf.rst (the type
//! section's records, one per kind), only as far as structs and the sizes of
//! their members need.

use std::collections::HashMap;

use object::{Object, ObjectSection};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BtfMember {
    pub name: String,
    /// Bytes from the struct's start.
    pub offset: usize,
    pub size: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BtfStruct {
    pub size: usize,
    pub members: Vec<BtfMember>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BtfReadError {
    #[error("not an ELF object")]
    Elf(#[source] object::read::Error),
    #[error("the object has no .BTF section")]
    NoSection,
    #[error("BTF: bad magic {0:#x}")]
    Magic(u16),
    #[error("BTF: truncated at byte {0}")]
    Truncated(usize),
    #[error("BTF: type {id} has kind {kind}, which this reader does not know")]
    Kind { id: u32, kind: u32 },
    #[error("BTF: type {0} is referenced but not defined, or its size loops")]
    Type(u32),
    #[error("BTF: struct {name} has a bitfield or unaligned member {member}")]
    Bitfield { name: String, member: String },
}

/// One type record: kind, vlen, kind_flag, name, size-or-type, and what follows.
struct Type {
    kind: u32,
    kind_flag: bool,
    name: u32,
    size_or_type: u32,
    /// Array: (element type, count); struct/union: (name, type, offset) per member.
    array: Option<(u32, u32)>,
    members: Vec<(u32, u32, u32)>,
}

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// The named structs of the object `elf`, by name.
pub(crate) fn structs(elf: &[u8]) -> Result<HashMap<String, BtfStruct>, BtfReadError> {
    let file = object::File::parse(elf).map_err(BtfReadError::Elf)?;
    let section = file
        .section_by_name(".BTF")
        .ok_or(BtfReadError::NoSection)?;
    let data = section.data().map_err(BtfReadError::Elf)?;
    parse(data)
}

fn parse(data: &[u8]) -> Result<HashMap<String, BtfStruct>, BtfReadError> {
    let u32_at = |at: usize| -> Result<u32, BtfReadError> {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(BtfReadError::Truncated(at))
    };
    let magic = u16::from_le_bytes([
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
    ]);
    if magic != 0xeb9f {
        return Err(BtfReadError::Magic(magic));
    }
    let hdr_len = u32_at(4)? as usize;
    let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
    let str_off = u32_at(16)? as usize;
    let strings = data
        .get(hdr_len + str_off..)
        .ok_or(BtfReadError::Truncated(hdr_len + str_off))?;
    let name = |off: u32| -> String {
        let s = strings.get(off as usize..).unwrap_or_default();
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        String::from_utf8_lossy(&s[..end]).into_owned()
    };

    // Type ids start at 1; index 0 is `void`.
    let mut types: Vec<Option<Type>> = vec![None];
    let (mut at, end) = (hdr_len + type_off, hdr_len + type_off + type_len);
    while at < end {
        let id = types.len() as u32;
        let info = u32_at(at + 4)?;
        let (vlen, kind) = ((info & 0xffff) as usize, (info >> 24) & 0x1f);
        let mut t = Type {
            kind,
            kind_flag: info >> 31 == 1,
            name: u32_at(at)?,
            size_or_type: u32_at(at + 8)?,
            array: None,
            members: Vec::new(),
        };
        at += 12;
        at += match kind {
            KIND_INT | 14 /* VAR */ | 17 /* DECL_TAG */ => 4,
            KIND_PTR | 7 /* FWD */ | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
            | 12 /* FUNC */ | 16 /* FLOAT */ | KIND_TYPE_TAG => 0,
            KIND_ARRAY => {
                t.array = Some((u32_at(at)?, u32_at(at + 8)?));
                12
            }
            KIND_STRUCT | KIND_UNION => {
                for i in 0..vlen {
                    let m = at + 12 * i;
                    t.members.push((u32_at(m)?, u32_at(m + 4)?, u32_at(m + 8)?));
                }
                12 * vlen
            }
            KIND_ENUM | 13 /* FUNC_PROTO */ => 8 * vlen,
            15 /* DATASEC */ | KIND_ENUM64 => 12 * vlen,
            _ => return Err(BtfReadError::Kind { id, kind }),
        };
        types.push(Some(t));
    }

    let size_of = |mut id: u32| -> Result<usize, BtfReadError> {
        let mut times = 1usize;
        // A chain of typedefs and qualifiers ends within the table's length.
        for _ in 0..types.len() {
            let t = types
                .get(id as usize)
                .and_then(Option::as_ref)
                .ok_or(BtfReadError::Type(id))?;
            match t.kind {
                KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 => {
                    return Ok(times * t.size_or_type as usize)
                }
                KIND_PTR => return Ok(times * 8),
                KIND_ARRAY => {
                    let (elem, n) = t.array.expect("array records carry their element");
                    times *= n as usize;
                    id = elem;
                }
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type;
                }
                _ => return Err(BtfReadError::Type(id)),
            }
        }
        Err(BtfReadError::Type(id))
    };

    let mut out = HashMap::new();
    for t in types.iter().flatten() {
        if t.kind != KIND_STRUCT || t.name == 0 {
            continue;
        }
        let sname = name(t.name);
        let mut members = Vec::new();
        for &(mname, mtype, offset) in &t.members {
            if t.kind_flag || offset % 8 != 0 {
                return Err(BtfReadError::Bitfield {
                    name: sname,
                    member: name(mname),
                });
            }
            members.push(BtfMember {
                name: name(mname),
                offset: (offset / 8) as usize,
                size: size_of(mtype)?,
            });
        }
        out.insert(
            sname,
            BtfStruct {
                size: t.size_or_type as usize,
                members,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_btf() {
        assert!(matches!(structs(b"not an elf"), Err(BtfReadError::Elf(_))));
        assert!(matches!(parse(&[0u8; 24]), Err(BtfReadError::Magic(0))));
        assert!(matches!(
            parse(&[0x9f, 0xeb, 1, 0]),
            Err(BtfReadError::Truncated(4))
        ));
    }
}
