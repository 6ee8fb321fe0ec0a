//! A mirror of Go's `encoding/json` decoding a profile into the runtime's
//! structs, driven by a schema of those structs. It reproduces what the
//! runtime keeps (case-insensitive keys, the last duplicate wins and merges
//! into array elements already decoded, unknown keys dropped, `null` leaves
//! scalars alone and clears slices and pointers, wrong types and negative
//! numbers for unsigned fields fail) and records, as diagnostics, every
//! place where that differs from what the author wrote.

use std::fmt::Write as _;
use std::marker::PhantomData;

use crate::diagnostic::{Code, Diagnostic};
use crate::json::{pointer_token, Member, Node, Value};

/// The Go type of a struct field, as far as decoding cares.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    Str,
    Uint,
    /// `*uint`: `null` makes it absent again.
    OptUint,
    StrList,
    Obj(&'static Schema),
    ObjList(&'static Schema),
}

#[derive(Debug)]
pub struct Field {
    /// The json tag.
    pub name: &'static str,
    pub ty: Ty,
    /// Go's spelling of the type, for error messages.
    pub go_type: &'static str,
}

#[derive(Debug)]
pub struct Schema {
    /// Go struct name, e.g. `LinuxSyscall`.
    pub go_name: &'static str,
    /// Qualified type name, e.g. `specs.LinuxSyscall`.
    pub go_type: &'static str,
    pub fields: &'static [Field],
}

impl Schema {
    /// The index of the field with json tag `name`, looked up at run time:
    /// for tests and tools. Code reads fields through the [`FieldId`]
    /// handles `schema!` makes, whose indices are resolved at compile time.
    pub fn index(&self, name: &str) -> usize {
        self.fields
            .iter()
            .position(|f| f.name == name)
            .unwrap_or_else(|| panic!("schema {} has no field {name}", self.go_name))
    }
}

/// What a [`FieldId`] reads, one marker per [`Ty`] variant. `schema!`
/// takes a handle's kind from the same token as its field's `Ty`, so
/// reading a string field as a list does not compile.
pub mod kind {
    #[derive(Debug, Clone, Copy)]
    pub struct Str;
    #[derive(Debug, Clone, Copy)]
    pub struct Uint;
    #[derive(Debug, Clone, Copy)]
    pub struct OptUint;
    #[derive(Debug, Clone, Copy)]
    pub struct StrList;
    #[derive(Debug, Clone, Copy)]
    pub struct Obj;
    #[derive(Debug, Clone, Copy)]
    pub struct ObjList;
}

/// One field of one schema, by name: where [`DObj`] keeps its value. The
/// index is resolved at compile time from the schema's own field list (by
/// `schema!`, below), so reading a field costs what indexing by position
/// did, and reordering the list moves the handles with it. The handles
/// live next to their schema, e.g. `model::oci_syscall::NAMES`: a name that
/// is not a field does not compile.
#[derive(Clone, Copy)]
pub struct FieldId<K> {
    index: usize,
    /// The schema the field belongs to, for the checks of debug builds.
    schema: &'static Schema,
    /// The json tag.
    name: &'static str,
    kind: PhantomData<K>,
}

impl<K> FieldId<K> {
    /// For `schema!`, the one place that knows the index.
    #[doc(hidden)]
    pub const fn new(index: usize, schema: &'static Schema, name: &'static str) -> FieldId<K> {
        FieldId {
            index,
            schema,
            name,
            kind: PhantomData,
        }
    }

    pub const fn index(self) -> usize {
        self.index
    }

    /// The json tag.
    pub const fn name(self) -> &'static str {
        self.name
    }

    pub const fn schema(self) -> &'static Schema {
        self.schema
    }
}

impl<K> std::fmt::Debug for FieldId<K> {
    // The schema is a tree of statics; its name is what tells handles apart.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{} (#{})", self.schema.go_name, self.name, self.index)
    }
}

/// Define a schema and its field handles from one list, so the two cannot
/// disagree:
///
/// ```text
/// schema! {
///     pub static OCI_ARG, mod oci_arg: "LinuxSeccompArg" = "specs.LinuxSeccompArg" {
///         INDEX: Uint = "index", "uint";
///         OP: Str = "op", "specs.LinuxSeccompOperator";
///     }
/// }
/// ```
///
/// makes `static OCI_ARG: Schema` with the fields in the order listed (the
/// order of the Go struct, which decides which field a key folds onto),
/// and `mod oci_arg` with one `FieldId<kind::K>` const per field, named
/// after it. A private enum with one variant per field counts the indices
/// (macro_rules cannot count), and a const assertion keeps each schema
/// under the 64 fields of [`DObj`]'s `present` bitset.
macro_rules! schema {
    (
        $(#[$meta:meta])*
        $vis:vis static $schema:ident, mod $fields:ident: $go_name:literal = $go_type:literal {
            $(
                $konst:ident: $kind:ident $(($sub:expr))? = $name:literal, $field_go_type:literal;
            )*
        }
    ) => {
        $(#[$meta])*
        $vis static $schema: $crate::decode::Schema = $crate::decode::Schema {
            go_name: $go_name,
            go_type: $go_type,
            fields: &[$(
                $crate::decode::Field {
                    name: $name,
                    ty: $crate::decode::Ty::$kind $(($sub))?,
                    go_type: $field_go_type,
                },
            )*],
        };

        #[doc = concat!("The fields of `", stringify!($schema), "` (", $go_type, "), by name.")]
        $vis mod $fields {
            use $crate::decode::{kind, FieldId};

            // Discriminants count from 0 in declaration order: the fields' indices.
            #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
            enum Index {
                $($konst,)*
            }

            const _: () = assert!(
                [$($name),*].len() < 64,
                concat!(stringify!($schema), " outgrows the `present` bitset of DObj")
            );

            $(
                #[doc = concat!("`", $name, "` (", $field_go_type, ").")]
                pub const $konst: FieldId<kind::$kind> =
                    FieldId::new(Index::$konst as usize, &super::$schema, $name);
            )*

            /// Every handle as (const name, index, json tag), for the test
            /// that they name the fields they index.
            #[cfg(test)]
            pub(crate) const ALL: &[(&str, usize, &str)] = &[$(
                (stringify!($konst), $konst.index(), $konst.name()),
            )*];
        }
    };
}
pub(crate) use schema;

/// A decoded value of one field.
#[derive(Debug, Clone, PartialEq)]
pub enum DVal {
    Str(String),
    Uint(u64),
    OptUint(Option<u64>),
    /// `None` is Go's nil slice.
    StrList(Option<Vec<String>>),
    Obj(DObj),
    ObjList(Option<Vec<DObj>>),
}

/// A decoded struct: one value per schema field, plus where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct DObj {
    pub schema_name: &'static str,
    pub values: Vec<DVal>,
    /// Pointer of the JSON object last decoded into this struct.
    pub pointer: String,
    /// Keys present in the JSON object(s): bit `i` for field `i` (schemas
    /// have fewer than 64 fields; a bitset saves an allocation per object).
    present: u64,
}

impl DObj {
    pub fn zero(schema: &'static Schema) -> DObj {
        debug_assert!(
            schema.fields.len() < 64,
            "{} outgrows `present`",
            schema.go_name
        );
        DObj {
            schema_name: schema.go_name,
            values: schema.fields.iter().map(|f| zero(f.ty)).collect(),
            pointer: String::new(),
            present: 0,
        }
    }

    /// Whether this value was decoded with `schema`.
    pub fn is_a(&self, schema: &Schema) -> bool {
        self.schema_name == schema.go_name
    }

    /// Where field `f` is kept. Debug builds check that `f` is a field of
    /// this object's schema and indexes the field it is named after: a
    /// handle of another schema would read whatever sits at its index.
    #[inline]
    fn slot<K>(&self, f: FieldId<K>) -> usize {
        debug_assert!(
            self.schema_name == f.schema.go_name,
            "`{}` is a field of {}, read on a {}",
            f.name,
            f.schema.go_name,
            self.schema_name
        );
        debug_assert!(
            f.schema
                .fields
                .get(f.index)
                .is_some_and(|x| x.name == f.name),
            "{f:?} does not index its field"
        );
        f.index
    }

    /// Whether the JSON object(s) had a key for field `f`.
    pub fn present<K>(&self, f: FieldId<K>) -> bool {
        self.present & (1 << self.slot(f)) != 0
    }

    pub fn str(&self, f: FieldId<kind::Str>) -> &str {
        match &self.values[self.slot(f)] {
            DVal::Str(s) => s,
            _ => "",
        }
    }

    pub fn uint(&self, f: FieldId<kind::Uint>) -> u64 {
        match &self.values[self.slot(f)] {
            DVal::Uint(v) => *v,
            _ => 0,
        }
    }

    pub fn opt_uint(&self, f: FieldId<kind::OptUint>) -> Option<u64> {
        match &self.values[self.slot(f)] {
            DVal::OptUint(v) => *v,
            _ => None,
        }
    }

    pub fn str_list(&self, f: FieldId<kind::StrList>) -> &[String] {
        match &self.values[self.slot(f)] {
            DVal::StrList(Some(v)) => v,
            _ => &[],
        }
    }

    pub fn obj(&self, f: FieldId<kind::Obj>) -> Option<&DObj> {
        match &self.values[self.slot(f)] {
            DVal::Obj(o) => Some(o),
            _ => None,
        }
    }

    pub fn obj_list(&self, f: FieldId<kind::ObjList>) -> &[DObj] {
        match &self.values[self.slot(f)] {
            DVal::ObjList(Some(v)) => v,
            _ => &[],
        }
    }

    // Moving out, for the views built from a decoded value it no longer needs.

    pub fn take_str(&mut self, f: FieldId<kind::Str>) -> String {
        let i = self.slot(f);
        match &mut self.values[i] {
            DVal::Str(s) => std::mem::take(s),
            _ => String::new(),
        }
    }

    pub fn take_str_list(&mut self, f: FieldId<kind::StrList>) -> Vec<String> {
        let i = self.slot(f);
        match &mut self.values[i] {
            DVal::StrList(Some(v)) => std::mem::take(v),
            _ => Vec::new(),
        }
    }

    pub fn take_obj_list(&mut self, f: FieldId<kind::ObjList>) -> Vec<DObj> {
        let i = self.slot(f);
        match &mut self.values[i] {
            DVal::ObjList(Some(v)) => std::mem::take(v),
            _ => Vec::new(),
        }
    }
}

fn zero(ty: Ty) -> DVal {
    match ty {
        Ty::Str => DVal::Str(String::new()),
        Ty::Uint => DVal::Uint(0),
        Ty::OptUint => DVal::OptUint(None),
        Ty::StrList => DVal::StrList(None),
        Ty::Obj(s) => DVal::Obj(DObj::zero(s)),
        Ty::ObjList(_) => DVal::ObjList(None),
    }
}

/// Keys the Docker/containers-common template format adds. Decoding an
/// OCI struct drops them; they get their own diagnostics instead of
/// "unknown field".
pub const TEMPLATE_KEYS: &[&str] = &[
    "archMap",
    "includes",
    "excludes",
    "comment",
    "name",
    "defaultErrno",
    "errno",
    "minKernel",
];

/// What the runtime loses when it drops a misspelling of a field, by the
/// field's json tag. A table rather than a `match`, so that a test can check
/// every tag is a field of some schema (a tag misspelled here would quietly
/// leave its diagnostic without the consequence).
const DROPPED_FIELD_COSTS: &[(&str, &str)] = &[
    ("args", ", so this rule applies unconditionally"),
    ("names", ", so this rule matches no syscall"),
    (
        "action",
        ", so the action is empty and the runtime refuses the profile",
    ),
    (
        "defaultAction",
        ", so the action is empty and the runtime refuses the profile",
    ),
    ("errnoRet", ", so the errno is EPERM"),
    ("defaultErrnoRet", ", so the errno is EPERM"),
    (
        "architectures",
        ", so the filter covers only the native architecture",
    ),
];

/// What the decoder produced and what it noticed.
#[derive(Debug)]
pub struct Decoded {
    pub root: DObj,
    pub diagnostics: Vec<Diagnostic>,
    /// The message the runtime would print (Go's first `UnmarshalTypeError`), if any.
    pub type_error: Option<String>,
    /// Template keys seen (whatever the schema), to name the dialect.
    pub template_keys_seen: bool,
}

/// Decode `node` into a zero value of `schema`, the way `json.Unmarshal` does.
/// Strings are moved out of the tree (the tree keeps its shape, keys and
/// spans for locating diagnostics).
pub fn decode(node: &mut Node, schema: &'static Schema) -> Decoded {
    let mut d = Decoder {
        diagnostics: Vec::new(),
        type_error: None,
        template_keys_seen: false,
        field_stack: Vec::new(),
    };
    let mut root = DObj::zero(schema);
    match &mut node.value {
        Value::Object(members) => d.object(members, schema, &mut root, &mut String::new()),
        Value::Null => {}
        other => {
            let msg = format!(
                "json: cannot unmarshal {} into Go value of type {}",
                other.kind_name(),
                schema.go_type
            );
            d.type_error(
                "",
                msg,
                format!(
                    "the profile must be a JSON object, not {}",
                    article(other.kind_name())
                ),
            );
        }
    }
    Decoded {
        root,
        diagnostics: d.diagnostics,
        type_error: d.type_error,
        template_keys_seen: d.template_keys_seen,
    }
}

fn article(kind: &str) -> String {
    match kind {
        "array" | "object" => format!("an {kind}"),
        _ => format!("a {kind}"),
    }
}

struct Decoder {
    diagnostics: Vec<Diagnostic>,
    type_error: Option<String>,
    template_keys_seen: bool,
    /// JSON field names from the root, as Go reports them in errors.
    field_stack: Vec<&'static str>,
}

/// Go 1.19's case folding for field names: ASCII case-insensitive, plus the
/// Kelvin sign for `k` and the long s for `s` (encoding/json's `equalFoldRight`).
pub fn go_equal_fold(name: &str, key: &str) -> bool {
    let mut n = name.chars();
    for kc in key.chars() {
        let Some(nc) = n.next() else { return false };
        let ok = kc.eq_ignore_ascii_case(&nc)
            || (kc == '\u{212a}' && nc.eq_ignore_ascii_case(&'k'))
            || (kc == '\u{17f}' && nc.eq_ignore_ascii_case(&'s'));
        if !ok {
            return false;
        }
    }
    n.next().is_none()
}

/// Which field a key selects: an exact match first, then the first fold match.
pub fn match_field(schema: &Schema, key: &str) -> Option<usize> {
    schema
        .fields
        .iter()
        .position(|f| f.name == key)
        .or_else(|| {
            schema
                .fields
                .iter()
                .position(|f| go_equal_fold(f.name, key))
        })
}

/// Levenshtein distance, case-insensitive.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

impl Decoder {
    fn type_error(&mut self, pointer: &str, go_message: String, message: String) {
        if self.type_error.is_none() {
            self.type_error = Some(go_message.clone());
        }
        self.diagnostics.push(
            Diagnostic::error(Code::JsonType, pointer, message)
                .with_help(format!("the runtime refuses the profile: {go_message}")),
        );
    }

    fn field_type_error(&mut self, pointer: &str, found: String, schema: &Schema, field: &Field) {
        let go_message = format!(
            "json: cannot unmarshal {found} into Go struct field {}.{} of type {}",
            schema.go_name,
            self.field_stack.join("."),
            field.go_type
        );
        let expected = match field.ty {
            Ty::Str => "a string",
            Ty::Uint | Ty::OptUint => "an unsigned integer",
            Ty::StrList => "an array of strings",
            Ty::Obj(_) => "an object",
            Ty::ObjList(_) => "an array of objects",
        };
        self.type_error(
            pointer,
            go_message,
            format!("`{}` must be {expected}, found {found}", field.name),
        );
    }

    fn object(
        &mut self,
        members: &mut [Member],
        schema: &'static Schema,
        target: &mut DObj,
        // This object's pointer; members are appended in place and removed
        // again, so no pointer is formatted unless a diagnostic needs it.
        path: &mut String,
    ) {
        target.pointer.clone_from(path);
        let base = path.len();
        // The member each field was last set from (schemas have a dozen fields at most).
        let mut seen: Vec<Option<usize>> = vec![None; schema.fields.len()];
        for mi in 0..members.len() {
            let m = &members[mi];
            path.truncate(base);
            path.push('/');
            path.push_str(&pointer_token(&m.key));
            let member_ptr = path.as_str();
            let Some(i) = match_field(schema, &m.key) else {
                self.unknown_key(m, schema, members, member_ptr);
                continue;
            };
            let field = &schema.fields[i];
            if m.key != field.name {
                self.diagnostics.push(
                    Diagnostic::warning(
                        Code::FieldCase,
                        member_ptr,
                        format!(
                            "`{}` is read as `{}` only because Go matches keys case-insensitively",
                            m.key, field.name
                        ),
                    )
                    .with_span(m.key_span)
                    .with_help(format!("spell it `{}`", field.name)),
                );
            }
            if let Some(prev) = seen[i].replace(mi) {
                let prev = &members[prev].key;
                self.diagnostics.push(
                    Diagnostic::warning(
                        Code::DuplicateField,
                        member_ptr,
                        format!(
                            "`{}` appears more than once (earlier as `{prev}`); the runtime keeps the last value{}",
                            m.key,
                            match field.ty {
                                Ty::ObjList(_) | Ty::Obj(_) =>
                                    ", merged field by field into the elements decoded before",
                                _ => "",
                            }
                        ),
                    )
                    .with_span(m.key_span)
                    .with_help("remove the duplicate key"),
                );
            }
            target.present |= 1 << i;
            if matches!(m.value.value, Value::Null) {
                self.diagnostics.push(
                    Diagnostic::note(
                        Code::NullValue,
                        member_ptr,
                        format!("`{}` is null, which the runtime treats as absent", m.key),
                    )
                    .with_span(m.value.span),
                );
            }
            self.field_stack.push(field.name);
            self.field(
                &mut members[mi].value,
                schema,
                field,
                &mut target.values[i],
                path,
            );
            self.field_stack.pop();
        }
        path.truncate(base);
    }

    fn unknown_key(&mut self, m: &Member, schema: &Schema, members: &[Member], ptr: &str) {
        if TEMPLATE_KEYS.contains(&&*m.key) {
            self.template_keys_seen = true;
            // Template keys of a struct that knows them are matched above;
            // here the schema is the runtime's, which drops them.
            self.diagnostics.extend(template_key_dropped(m, ptr));
            return;
        }
        let near = schema.fields.iter().find(|f| {
            f.name.len() >= 4
                && edit_distance(&m.key, f.name) <= 2
                && !members.iter().any(|o| {
                    match_field(schema, &o.key).is_some_and(|i| schema.fields[i].name == f.name)
                })
        });
        let d = match near {
            Some(f) => {
                let consequence = DROPPED_FIELD_COSTS
                    .iter()
                    .find(|(tag, _)| *tag == f.name)
                    .map_or("", |(_, cost)| cost);
                Diagnostic::error(
                    Code::MisspelledField,
                    ptr,
                    format!(
                        "`{}` is not a field of {}; the runtime silently drops it{consequence}",
                        m.key, schema.go_name
                    ),
                )
                .with_help(format!("did you mean `{}`?", f.name))
            }
            None => Diagnostic::warning(
                Code::UnknownField,
                ptr,
                format!(
                    "unknown field `{}` of {} is ignored by the runtime",
                    m.key, schema.go_name
                ),
            ),
        };
        self.diagnostics.push(d.with_span(m.key_span));
    }

    fn field(
        &mut self,
        node: &mut Node,
        schema: &'static Schema,
        field: &Field,
        target: &mut DVal,
        path: &mut String,
    ) {
        let ptr = path.as_str();
        match (&mut node.value, field.ty) {
            (Value::Null, Ty::OptUint) => *target = DVal::OptUint(None),
            (Value::Null, Ty::StrList) => *target = DVal::StrList(None),
            (Value::Null, Ty::ObjList(_)) => *target = DVal::ObjList(None),
            (Value::Null, _) => {}
            (Value::String(s), Ty::Str) => *target = DVal::Str(std::mem::take(s)),
            (Value::Number(n), Ty::Uint) => match n.parse::<u64>() {
                Ok(v) => *target = DVal::Uint(v),
                Err(_) => self.field_type_error(ptr, format!("number {n}"), schema, field),
            },
            (Value::Number(n), Ty::OptUint) => match n.parse::<u64>() {
                Ok(v) => *target = DVal::OptUint(Some(v)),
                Err(_) => self.field_type_error(ptr, format!("number {n}"), schema, field),
            },
            (Value::Array(items), Ty::StrList) => {
                let mut list = match std::mem::replace(target, DVal::StrList(None)) {
                    DVal::StrList(Some(v)) => v,
                    _ => Vec::new(),
                };
                let mut n = 0;
                for (i, item) in items.iter_mut().enumerate() {
                    if n >= list.len() {
                        list.push(String::new());
                    }
                    match &mut item.value {
                        Value::String(s) => list[n] = std::mem::take(s),
                        Value::Null => {}
                        other => {
                            let kind = other.kind_name().to_string();
                            let found = if kind == "number" {
                                "number".to_string()
                            } else {
                                kind
                            };
                            self.element_type_error(&format!("{path}/{i}"), found, schema, field);
                        }
                    }
                    n += 1;
                }
                list.truncate(n);
                *target = DVal::StrList(Some(list));
            }
            (Value::Object(members), Ty::Obj(sub)) => {
                if let DVal::Obj(obj) = target {
                    self.object(members, sub, obj, path);
                }
            }
            (Value::Array(items), Ty::ObjList(sub)) => {
                let mut list = match std::mem::replace(target, DVal::ObjList(None)) {
                    DVal::ObjList(Some(v)) => v,
                    _ => Vec::new(),
                };
                let mut n = 0;
                let base = path.len();
                for (i, item) in items.iter_mut().enumerate() {
                    if n >= list.len() {
                        list.push(DObj::zero(sub));
                    }
                    path.truncate(base);
                    let _ = write!(path, "/{i}");
                    match &mut item.value {
                        Value::Object(members) => self.object(members, sub, &mut list[n], path),
                        // A null element of []T leaves the element as it was.
                        Value::Null => {}
                        other => {
                            let msg = format!(
                                "json: cannot unmarshal {} into Go struct field {}.{} of type {}",
                                other.kind_name(),
                                schema.go_name,
                                self.field_stack.join("."),
                                sub.go_type
                            );
                            let item_ptr = path.clone();
                            self.type_error(
                                &item_ptr,
                                msg,
                                format!(
                                    "elements of `{}` must be objects, found {}",
                                    field.name,
                                    other.kind_name()
                                ),
                            );
                        }
                    }
                    n += 1;
                }
                path.truncate(base);
                list.truncate(n);
                *target = DVal::ObjList(Some(list));
            }
            (other, _) => {
                let found = match other {
                    Value::Number(_) if matches!(field.ty, Ty::Str) => "number".to_string(),
                    v => v.kind_name().to_string(),
                };
                self.field_type_error(ptr, found, schema, field);
            }
        }
    }

    fn element_type_error(&mut self, ptr: &str, found: String, schema: &Schema, field: &Field) {
        let elem = field.go_type.trim_start_matches("[]");
        let go_message = format!(
            "json: cannot unmarshal {found} into Go struct field {}.{} of type {elem}",
            schema.go_name,
            self.field_stack.join(".")
        );
        self.type_error(
            ptr,
            go_message,
            format!(
                "elements of `{}` must be strings, found {found}",
                field.name
            ),
        );
    }
}

fn template_key_dropped(m: &Member, ptr: &str) -> Option<Diagnostic> {
    let non_empty = match &m.value.value {
        Value::Object(ms) => !ms.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::String(s) => !s.is_empty(),
        Value::Null => false,
        _ => true,
    };
    let d = match &*m.key {
        "includes" | "excludes" if non_empty => Diagnostic::error(
            Code::ConditionalRuleIgnored,
            ptr,
            format!(
                "`{}` is a Docker/CRI-O template condition; containerd hands the file to runc as-is and runc drops it, so this rule applies unconditionally",
                m.key
            ),
        )
        .with_help("give containerd a profile with the conditions resolved for this node (or use --runtime crio if CRI-O loads it)"),
        "archMap" if non_empty => Diagnostic::warning(
            Code::TemplateFieldIgnored,
            ptr,
            "`archMap` is a Docker/CRI-O template field that runc drops; the filter covers only the native architecture and 32-bit syscalls are killed",
        )
        .with_help("list the architectures in `architectures` (e.g. SCMP_ARCH_X86_64, SCMP_ARCH_X86, SCMP_ARCH_X32)"),
        "name" if non_empty => Diagnostic::error(
            Code::LegacyNameField,
            ptr,
            "`name` is the pre-2016 Docker rule format; runc drops it, so this rule names no syscall",
        )
        .with_help(match &m.value.value {
            Value::String(s) => format!("write \"names\": [\"{s}\"]"),
            _ => "use `names`, an array of syscall names".to_string(),
        }),
        _ => return None,
    };
    Some(d.with_span(m.key_span))
}

/// Find the span a pointer refers to, resolving keys the way the decoder
/// does (fold match, the last duplicate wins).
pub fn resolve_pointer(root: &Node, pointer: &str) -> Option<crate::json::Span> {
    let mut node = root;
    let mut key_span = None;
    if pointer.is_empty() {
        return Some(root.span);
    }
    for raw in pointer.trim_start_matches('/').split('/') {
        let token = raw.replace("~1", "/").replace("~0", "~");
        match &node.value {
            Value::Object(members) => {
                let m = members
                    .iter()
                    .rev()
                    .find(|m| m.key == token)
                    .or_else(|| members.iter().rev().find(|m| go_equal_fold(&token, &m.key)))?;
                key_span = Some(m.key_span);
                node = &m.value;
            }
            Value::Array(items) => {
                node = items.get(token.parse::<usize>().ok()?)?;
                key_span = None;
            }
            _ => return key_span,
        }
    }
    // Point at the value; for containers, at the key that holds them.
    match node.value {
        Value::Object(_) | Value::Array(_) => key_span.or(Some(node.span)),
        _ => Some(node.span),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_fold_matches_kelvin_and_long_s() {
        assert!(go_equal_fold("syscalls", "SYSCALLS"));
        assert!(go_equal_fold("syscalls", "\u{17f}yscalls"));
        assert!(go_equal_fold("kind", "\u{212a}ind"));
        assert!(!go_equal_fold("args", "agrs"));
        assert!(!go_equal_fold("args", "arg"));
    }

    /// Debug builds catch a handle read on an object of another schema
    /// (release builds index without checking, as they did by position).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "`action` is a field of LinuxSyscall, read on a LinuxSeccompArg")]
    fn a_field_of_another_schema_is_caught_in_debug_builds() {
        use crate::model::{oci_syscall, OCI_ARG};
        let _ = DObj::zero(&OCI_ARG).str(oci_syscall::ACTION);
    }

    /// And a handle made by hand with an index that is not its field's.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "LinuxSyscall.action (#0) does not index its field")]
    fn a_handle_off_its_field_is_caught_in_debug_builds() {
        use crate::model::OCI_SYSCALL;
        let action: FieldId<kind::Str> = FieldId::new(0, &OCI_SYSCALL, "action");
        let _ = DObj::zero(&OCI_SYSCALL).str(action);
    }

    #[test]
    fn the_costs_of_dropped_fields_name_fields() {
        use crate::model::{OCI_SECCOMP, TPL_SECCOMP};
        fn has(schema: &Schema, tag: &str) -> bool {
            schema.fields.iter().any(|f| {
                f.name == tag || matches!(f.ty, Ty::Obj(sub) | Ty::ObjList(sub) if has(sub, tag))
            })
        }
        for (tag, _) in DROPPED_FIELD_COSTS {
            assert!(
                has(&OCI_SECCOMP, tag) || has(&TPL_SECCOMP, tag),
                "`{tag}` is no field"
            );
        }
    }

    #[test]
    fn edit_distance_small_cases() {
        assert_eq!(edit_distance("agrs", "args"), 2);
        assert_eq!(edit_distance("nmaes", "names"), 2);
        assert_eq!(edit_distance("action", "action"), 0);
    }
}
