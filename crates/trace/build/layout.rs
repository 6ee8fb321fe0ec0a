//! The layout shared across the user/kernel boundary, defined once: a C
//! header in `bpf/` that the programs include, read here at build time into
//! Rust `#[repr(C)]` structs and constants (OUT_DIR, `include!`d by
//! `src/abi.rs`). It reads the small C subset such a header needs and fails
//! the build on anything else, naming the line: a construct it skipped would
//! be a field the Rust side silently lacks.
//!
//! The subset:
//! * comments, an include guard (`#ifndef G` / `#define G` / `#endif`),
//!   `_Static_assert(...);` (the C side's own checks, left to clang);
//! * `#define NAME EXPR`: integer literals (decimal or hex; no suffix is C's
//!   `int`, `U` `unsigned int`, `ULL` `unsigned long long`, as C types them),
//!   earlier defines, parentheses and `* / + - << |` on operands of one type;
//! * `struct name { FIELD; ... };` where a field is a fixed-width integer
//!   (`__u8`..`__u64`, `__s8`..`__s64`, `char` as a byte), an earlier struct
//!   of the header, or a one-dimensional array of either.
//!
//! A struct must have no implicit padding: the programs use these as hash
//! keys and copy them whole, so a hole the compiler leaves uninitialised
//! would make equal keys differ (the kernel's htab compares `key_size`
//! bytes, kernel/bpf/hashtab.c); the header spells padding as a field.
//!
//! Also included by the crate's tests (`src/abi.rs`), which run the unit
//! tests below.

use std::fmt::Write as _;

/// A C integer type the subset knows, with its Rust twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
}

impl Scalar {
    fn from_c(name: &str) -> Option<Scalar> {
        Some(match name {
            "__u8" => Scalar::U8,
            // The programs' `char comm[16]` is the kernel's task comm: bytes, not text.
            "char" => Scalar::U8,
            "__u16" => Scalar::U16,
            "__u32" => Scalar::U32,
            "__u64" => Scalar::U64,
            "__s8" => Scalar::I8,
            "__s16" => Scalar::I16,
            "__s32" => Scalar::I32,
            "__s64" => Scalar::I64,
            _ => return None,
        })
    }

    fn c_name(self) -> &'static str {
        match self {
            Scalar::U8 => "__u8",
            Scalar::U16 => "__u16",
            Scalar::U32 => "__u32 (suffix U)",
            Scalar::U64 => "__u64 (suffix ULL)",
            Scalar::I8 => "__s8",
            Scalar::I16 => "__s16",
            Scalar::I32 => "int (no suffix)",
            Scalar::I64 => "__s64",
        }
    }

    fn rust(self) -> &'static str {
        match self {
            Scalar::U8 => "u8",
            Scalar::U16 => "u16",
            Scalar::U32 => "u32",
            Scalar::U64 => "u64",
            Scalar::I8 => "i8",
            Scalar::I16 => "i16",
            Scalar::I32 => "i32",
            Scalar::I64 => "i64",
        }
    }

    /// Size and alignment, equal on the BPF target and on the hosts the
    /// agent builds for (x86_64, aarch64): both are LP64 with natural alignment.
    fn size(self) -> u64 {
        match self {
            Scalar::U8 | Scalar::I8 => 1,
            Scalar::U16 | Scalar::I16 => 2,
            Scalar::U32 | Scalar::I32 => 4,
            Scalar::U64 | Scalar::I64 => 8,
        }
    }

    fn range(self) -> (i128, i128) {
        match self {
            Scalar::U8 => (0, u8::MAX.into()),
            Scalar::U16 => (0, u16::MAX.into()),
            Scalar::U32 => (0, u32::MAX.into()),
            Scalar::U64 => (0, u64::MAX.into()),
            Scalar::I8 => (i8::MIN.into(), i8::MAX.into()),
            Scalar::I16 => (i16::MIN.into(), i16::MAX.into()),
            Scalar::I32 => (i32::MIN.into(), i32::MAX.into()),
            Scalar::I64 => (i64::MIN.into(), i64::MAX.into()),
        }
    }
}

/// A `#define` with an integer value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Const {
    pub name: String,
    pub ty: Scalar,
    pub value: i128,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldType {
    Scalar(Scalar),
    /// Index into [`Header::structs`].
    Struct(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub ty: FieldType,
    /// `Some(n)`: an array of n.
    pub len: Option<u64>,
    pub offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Struct {
    pub name: String,
    pub fields: Vec<Field>,
    pub size: u64,
    pub align: u64,
}

/// A field as declared, before its offset is known.
struct Decl {
    name: String,
    ty: FieldType,
    len: Option<u64>,
    line: usize,
}

/// One header, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    pub consts: Vec<Const>,
    pub structs: Vec<Struct>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error("line {line}: `{text}`: {reason}")]
    Unsupported {
        line: usize,
        text: String,
        reason: &'static str,
    },
    #[error("line {line}: `{name}` is not defined above")]
    Undefined { line: usize, name: String },
    #[error("line {line}: `{name}` is defined twice")]
    Duplicate { line: usize, name: String },
    #[error("line {line}: {value} does not fit {}", ty.c_name())]
    Overflow {
        line: usize,
        value: i128,
        ty: Scalar,
    },
    #[error(
        "struct {name}: {gap} byte(s) of implicit padding at offset {offset}: spell it as a field (`__u32 _pad;`)"
    )]
    Padding { name: String, offset: u64, gap: u64 },
    #[error("line {line}: unexpected end of the header: {expected}")]
    Eof { line: usize, expected: &'static str },
}

impl Header {
    /// Reads `text`, the whole header.
    pub fn parse(text: &str) -> Result<Header, LayoutError> {
        let text = strip_comments(text)?;
        let mut header = Header::default();
        let mut guard: Option<(String, bool)> = None;
        let mut endif = false;
        let mut code = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() {
                continue;
            }
            let unsupported = |reason| LayoutError::Unsupported {
                line,
                text: l.to_string(),
                reason,
            };
            if endif {
                return Err(unsupported("nothing may follow the include guard's #endif"));
            }
            let Some(directive) = l.strip_prefix('#') else {
                code.extend(tokenize(l, line)?);
                continue;
            };
            let words: Vec<&str> = directive.split_whitespace().collect();
            match words.as_slice() {
                ["ifndef", g] if guard.is_none() && header.is_empty() && code.is_empty() => {
                    guard = Some((g.to_string(), false));
                }
                ["define", g] => match &mut guard {
                    Some((name, defined @ false)) if name == g => *defined = true,
                    _ => {
                        return Err(unsupported(
                            "a #define without a value is only the include guard's",
                        ))
                    }
                },
                ["endif"] if guard.is_some() => endif = true,
                ["define", name, ..] => {
                    let rest = directive
                        .trim_start()
                        .strip_prefix("define")
                        .and_then(|r| r.trim_start().strip_prefix(name))
                        .unwrap_or_default();
                    if !is_ident(name) {
                        return Err(unsupported("a function-like or odd #define"));
                    }
                    let tokens = tokenize(rest, line)?;
                    let (ty, value) = Expr::new(&tokens, &header, line).whole()?;
                    header.add_const(
                        Const {
                            name: name.to_string(),
                            ty,
                            value,
                        },
                        line,
                    )?;
                }
                _ => {
                    return Err(unsupported(
                        "only #define NAME VALUE and an include guard (#ifndef, #define, #endif)",
                    ))
                }
            }
        }
        if let Some((_, defined)) = &guard {
            if !defined || !endif {
                return Err(LayoutError::Eof {
                    line: text.lines().count(),
                    expected: "the include guard's #define and #endif",
                });
            }
        }
        header.items(&code)?;
        Ok(header)
    }

    fn is_empty(&self) -> bool {
        self.consts.is_empty() && self.structs.is_empty()
    }

    fn add_const(&mut self, c: Const, line: usize) -> Result<(), LayoutError> {
        if self.consts.iter().any(|k| k.name == c.name) {
            return Err(LayoutError::Duplicate { line, name: c.name });
        }
        self.consts.push(c);
        Ok(())
    }

    /// The code outside directives: structs and static asserts.
    fn items(&mut self, tokens: &[Token]) -> Result<(), LayoutError> {
        let mut p = Cursor { tokens, at: 0 };
        while let Some(t) = p.peek() {
            match t.text.as_str() {
                "_Static_assert" => {
                    p.next();
                    p.expect("(")?;
                    let mut depth = 1;
                    while depth > 0 {
                        let t = p.next_or("the static assert's `)`")?;
                        match t.text.as_str() {
                            "(" => depth += 1,
                            ")" => depth -= 1,
                            _ => {}
                        }
                    }
                    p.expect(";")?;
                }
                "struct" => {
                    let line = t.line;
                    p.next();
                    let name = p.ident()?;
                    p.expect("{")?;
                    let mut fields = Vec::new();
                    while p.peek().map(|t| t.text.as_str()) != Some("}") {
                        fields.push(self.field(&mut p)?);
                    }
                    p.expect("}")?;
                    p.expect(";")?;
                    self.add_struct(&name, line, fields)?;
                }
                _ => {
                    return Err(t.unsupported(
                        "only `struct name { ... };` and `_Static_assert(...);` outside directives",
                    ))
                }
            }
        }
        Ok(())
    }

    /// `TYPE name;` or `TYPE name[LEN];`, TYPE a scalar or `struct s`.
    fn field(&self, p: &mut Cursor) -> Result<Decl, LayoutError> {
        let first = p.next_or("a field")?;
        let ty = match first.text.as_str() {
            "struct" => {
                let t = p.next_or("a struct name")?;
                let i = self
                    .structs
                    .iter()
                    .position(|s| s.name == t.text)
                    .ok_or_else(|| LayoutError::Undefined {
                        line: t.line,
                        name: format!("struct {}", t.text),
                    })?;
                FieldType::Struct(i)
            }
            "union" | "enum" => {
                return Err(first.unsupported("unions and enums are not in the subset"))
            }
            other => FieldType::Scalar(Scalar::from_c(other).ok_or_else(|| {
                first.unsupported(
                    "not a fixed-width integer (__u8..__u64, __s8..__s64, char) or struct",
                )
            })?),
        };
        let name = p.ident()?;
        let len = if p.peek().map(|t| t.text.as_str()) == Some("[") {
            p.next();
            let start = p.at;
            while p.peek().map(|t| t.text.as_str()) != Some("]") {
                p.next_or("the array's `]`")?;
            }
            let (_, n) = Expr::new(&p.tokens[start..p.at], self, first.line).whole()?;
            p.expect("]")?;
            if n <= 0 {
                return Err(first.unsupported("an array needs a positive length"));
            }
            Some(n as u64)
        } else {
            None
        };
        let end = p.next_or("`;` after the field")?;
        if end.text != ";" {
            return Err(end.unsupported(
                "one field per declaration, no bitfields, pointers, attributes or multi-dimensional arrays",
            ));
        }
        Ok(Decl {
            name,
            ty,
            len,
            line: first.line,
        })
    }

    fn add_struct(
        &mut self,
        name: &str,
        line: usize,
        fields: Vec<Decl>,
    ) -> Result<(), LayoutError> {
        if self.structs.iter().any(|s| s.name == name) {
            return Err(LayoutError::Duplicate {
                line,
                name: format!("struct {name}"),
            });
        }
        if fields.is_empty() {
            return Err(LayoutError::Unsupported {
                line,
                text: format!("struct {name}"),
                reason: "an empty struct",
            });
        }
        let mut offset = 0;
        let mut align = 1;
        let mut out = Vec::new();
        for Decl {
            name: fname,
            ty,
            len,
            line: fline,
        } in fields
        {
            if out.iter().any(|f: &Field| f.name == fname) {
                return Err(LayoutError::Duplicate {
                    line: fline,
                    name: fname,
                });
            }
            let (size, a) = match ty {
                FieldType::Scalar(s) => (s.size(), s.size()),
                FieldType::Struct(i) => (self.structs[i].size, self.structs[i].align),
            };
            if offset % a != 0 {
                return Err(LayoutError::Padding {
                    name: name.to_string(),
                    offset,
                    gap: a - offset % a,
                });
            }
            align = align.max(a);
            out.push(Field {
                name: fname,
                ty,
                len,
                offset,
            });
            offset += size * len.unwrap_or(1);
        }
        if offset % align != 0 {
            return Err(LayoutError::Padding {
                name: name.to_string(),
                offset,
                gap: align - offset % align,
            });
        }
        self.structs.push(Struct {
            name: name.to_string(),
            fields: out,
            size: offset,
            align,
        });
        Ok(())
    }

    /// The Rust side: constants, `#[repr(C)]` structs with their size and
    /// offsets asserted at compile time, and (for the crate's tests) each
    /// struct's layout as rustc lays it out.
    pub fn to_rust(&self, source: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "// Generated by crates/trace/build/layout.rs from bpf/{source}: edit the header, not this."
        );
        for c in &self.consts {
            let _ = writeln!(s, "/// `{}` (bpf/{source}).", c.name);
            let _ = writeln!(s, "pub const {}: {} = {};", c.name, c.ty.rust(), c.value);
        }
        for st in &self.structs {
            let rust = self.rust_name(st);
            let _ = writeln!(s, "\n/// `struct {}` (bpf/{source}).", st.name);
            let _ = writeln!(s, "#[repr(C)]");
            let _ = writeln!(s, "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]");
            let _ = writeln!(s, "pub struct {rust} {{");
            for f in &st.fields {
                let _ = writeln!(s, "    pub {}: {},", f.name, self.field_type(f));
            }
            let _ = writeln!(s, "}}");
            let _ = writeln!(
                s,
                "const _: () = assert!(::core::mem::size_of::<{rust}>() == {});",
                st.size
            );
            for f in &st.fields {
                let _ = writeln!(
                    s,
                    "const _: () = assert!(::core::mem::offset_of!({rust}, {}) == {});",
                    f.name, f.offset
                );
            }
            let _ = writeln!(
                s,
                "// SAFETY: integers and arrays of them, every bit pattern valid, no implicit padding\n\
                 // (the generator refuses a hole; the asserts above pin the offsets).\n\
                 unsafe impl aya::Pod for {rust} {{}}"
            );
        }
        let _ = writeln!(
            s,
            "\n/// Each struct as rustc laid it out, for the test against the programs' BTF."
        );
        let _ = writeln!(s, "#[cfg(test)]");
        let _ = writeln!(s, "pub(crate) const LAYOUTS: &[crate::abi::CStruct] = &[");
        for st in &self.structs {
            let rust = self.rust_name(st);
            let _ = writeln!(s, "    crate::abi::CStruct {{");
            let _ = writeln!(s, "        name: {:?},", st.name);
            let _ = writeln!(s, "        size: ::core::mem::size_of::<{rust}>(),");
            let _ = writeln!(s, "        fields: &[");
            for f in &st.fields {
                let _ = writeln!(
                    s,
                    "            crate::abi::CField {{ name: {:?}, offset: ::core::mem::offset_of!({rust}, {}), size: ::core::mem::size_of::<{}>() }},",
                    f.name,
                    f.name,
                    self.field_type(f)
                );
            }
            let _ = writeln!(s, "        ],\n    }},");
        }
        let _ = writeln!(s, "];");
        s
    }

    /// A C file that makes clang write every struct of `headers` into the
    /// object's BTF (a struct only a local variable uses is left out of it):
    /// one global of each, in `.rodata` (const), no program.
    pub fn anchors_c(headers: &[(&str, &Header)]) -> String {
        let mut s = String::from(
            "/* Generated by crates/trace/build/layout.rs: a global of each shared struct, so that its\n \
             * layout as clang sees it is in this object's BTF for the crate's layout test. */\n\
             #include \"include/np_core.h\"\n",
        );
        for (file, _) in headers {
            let _ = writeln!(s, "#include \"{file}\"");
        }
        for (_, h) in headers {
            for st in &h.structs {
                let _ = writeln!(s, "const struct {0} np_layout_{0} = {{}};", st.name);
            }
        }
        s
    }

    fn rust_name(&self, st: &Struct) -> String {
        st.name
            .split('_')
            .filter(|w| !w.is_empty())
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect()
    }

    fn field_type(&self, f: &Field) -> String {
        let base = match f.ty {
            FieldType::Scalar(s) => s.rust().to_string(),
            FieldType::Struct(i) => self.rust_name(&self.structs[i]),
        };
        match f.len {
            Some(n) => format!("[{base}; {n}]"),
            None => base,
        }
    }
}

/// Blanks comments, keeping the line breaks so that line numbers hold.
fn strip_comments(text: &str) -> Result<String, LayoutError> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('/', Some('*')) => {
                let start = line;
                chars.next();
                let mut prev = ' ';
                loop {
                    let Some(c) = chars.next() else {
                        return Err(LayoutError::Eof {
                            line: start,
                            expected: "the comment's `*/`",
                        });
                    };
                    if c == '\n' {
                        line += 1;
                        out.push('\n');
                    }
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
                out.push(' ');
            }
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        out.push('\n');
                        break;
                    }
                }
            }
            _ => {
                if c == '\n' {
                    line += 1;
                }
                out.push(c);
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Clone)]
struct Token {
    text: String,
    line: usize,
}

impl Token {
    fn unsupported(&self, reason: &'static str) -> LayoutError {
        LayoutError::Unsupported {
            line: self.line,
            text: self.text.clone(),
            reason,
        }
    }
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f == '_' || f.is_ascii_alphabetic())
        && c.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn tokenize(text: &str, line: usize) -> Result<Vec<Token>, LayoutError> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'_' || c.is_ascii_alphanumeric() {
            while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
        } else if text[i..].starts_with("<<") {
            i += 2;
        } else if c == b'"' {
            // A string (a static assert's message) is one token, escapes and all.
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            if i >= b.len() {
                return Err(LayoutError::Eof {
                    line,
                    expected: "the string's closing quote",
                });
            }
            i += 1;
        } else if b"{}[]();*/+-|,:&=<>^~!?.'".contains(&c) {
            // Kept as tokens so that the parser names them in its refusal.
            i += 1;
        } else {
            return Err(LayoutError::Unsupported {
                line,
                text: text.to_string(),
                reason: "a character outside the subset",
            });
        }
        out.push(Token {
            text: text[start..i].to_string(),
            line,
        });
    }
    Ok(out)
}

/// Names the generated Rust could not use as a field (the strict and reserved keywords).
const RUST_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

struct Cursor<'a> {
    tokens: &'a [Token],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<&Token> {
        let t = self.tokens.get(self.at);
        self.at += 1;
        t
    }

    fn last_line(&self) -> usize {
        self.tokens.last().map_or(0, |t| t.line)
    }

    fn next_or(&mut self, expected: &'static str) -> Result<Token, LayoutError> {
        let line = self.last_line();
        self.next()
            .cloned()
            .ok_or(LayoutError::Eof { line, expected })
    }

    fn expect(&mut self, what: &'static str) -> Result<(), LayoutError> {
        let t = self.next_or(what)?;
        if t.text == what {
            Ok(())
        } else {
            Err(t.unsupported(match what {
                ";" => "expected `;`",
                "{" => "expected `{`",
                "}" => "expected `}`",
                "(" => "expected `(`",
                _ => "expected `]`",
            }))
        }
    }

    fn ident(&mut self) -> Result<String, LayoutError> {
        let t = self.next_or("a name")?;
        if !is_ident(&t.text) || Scalar::from_c(&t.text).is_some() {
            Err(t.unsupported("expected a name"))
        } else if RUST_KEYWORDS.contains(&t.text.as_str()) {
            Err(t.unsupported("a Rust keyword: rename it in the header"))
        } else {
            Ok(t.text)
        }
    }
}

/// An integer expression over literals and earlier defines.
struct Expr<'a> {
    p: Cursor<'a>,
    header: &'a Header,
    line: usize,
}

impl<'a> Expr<'a> {
    fn new(tokens: &'a [Token], header: &'a Header, line: usize) -> Self {
        Expr {
            p: Cursor { tokens, at: 0 },
            header,
            line,
        }
    }

    /// The value of all the tokens, nothing left over.
    fn whole(mut self) -> Result<(Scalar, i128), LayoutError> {
        if self.p.tokens.is_empty() {
            return Err(LayoutError::Eof {
                line: self.line,
                expected: "a value",
            });
        }
        let v = self.binary(0)?;
        match self.p.peek() {
            None => Ok(v),
            Some(t) => Err(t.unsupported("not an integer expression of the subset")),
        }
    }

    /// Precedence climbing over C's levels for the operators kept.
    fn binary(&mut self, min: u8) -> Result<(Scalar, i128), LayoutError> {
        let mut lhs = self.primary()?;
        loop {
            let Some(op) = self.p.peek().cloned() else {
                return Ok(lhs);
            };
            let prec = match op.text.as_str() {
                "|" => 1,
                "<<" => 2,
                "+" | "-" => 3,
                "*" | "/" => 4,
                _ => return Ok(lhs),
            };
            if prec < min {
                return Ok(lhs);
            }
            self.p.next();
            let rhs = self.binary(prec + 1)?;
            // C: a shift has its left operand's type; the others convert both
            // to one, which the subset asks the header to write out.
            if lhs.0 != rhs.0 && op.text != "<<" {
                return Err(
                    op.unsupported("operands of different C types: give both the same suffix")
                );
            }
            let v = match op.text.as_str() {
                "|" => lhs.1 | rhs.1,
                "<<" if (0..64).contains(&rhs.1) => lhs.1 << rhs.1,
                "+" => lhs.1 + rhs.1,
                "-" => lhs.1 - rhs.1,
                "*" => lhs.1 * rhs.1,
                "/" if rhs.1 != 0 => lhs.1 / rhs.1,
                _ => return Err(op.unsupported("a shift outside 0..64 or a division by zero")),
            };
            lhs = (lhs.0, self.fits(lhs.0, v)?);
        }
    }

    fn primary(&mut self) -> Result<(Scalar, i128), LayoutError> {
        let line = self.line;
        let t = self.p.next_or("a value")?;
        if t.text == "(" {
            let v = self.binary(0)?;
            self.p.expect(")")?;
            return Ok(v);
        }
        if t.text == "-" {
            let (ty, v) = self.primary()?;
            if ty.range().0 == 0 {
                return Err(t.unsupported("a negated unsigned value"));
            }
            return Ok((ty, self.fits(ty, -v)?));
        }
        if t.text.starts_with(|c: char| c.is_ascii_digit()) {
            return self.literal(&t);
        }
        if is_ident(&t.text) {
            return match self.header.consts.iter().find(|c| c.name == t.text) {
                Some(c) => Ok((c.ty, c.value)),
                None => Err(LayoutError::Undefined { line, name: t.text }),
            };
        }
        Err(t.unsupported("not an integer expression of the subset"))
    }

    fn literal(&self, t: &Token) -> Result<(Scalar, i128), LayoutError> {
        let lower = t.text.to_ascii_lowercase();
        let (digits, radix) = match lower.strip_prefix("0x") {
            Some(hex) => (hex, 16),
            None => (lower.as_str(), 10),
        };
        let end = digits
            .find(|c: char| !c.is_digit(radix))
            .unwrap_or(digits.len());
        let (digits, suffix) = digits.split_at(end);
        let ty = match suffix {
            "" => Scalar::I32,
            "u" => Scalar::U32,
            "ull" => Scalar::U64,
            _ => return Err(t.unsupported("a suffix other than none, U or ULL")),
        };
        if digits.is_empty() || (radix == 10 && digits.len() > 1 && digits.starts_with('0')) {
            return Err(t.unsupported("not a decimal or hex literal (octal is not in the subset)"));
        }
        let v = i128::from_str_radix(digits, radix)
            .map_err(|_| t.unsupported("a literal beyond 128 bits"))?;
        // C would widen an unsuffixed literal past int; the Rust side wants the
        // type written down, so one that does not fit its suffix is refused.
        Ok((ty, self.fits(ty, v)?))
    }

    fn fits(&self, ty: Scalar, value: i128) -> Result<i128, LayoutError> {
        let (lo, hi) = ty.range();
        if (lo..=hi).contains(&value) {
            Ok(value)
        } else {
            Err(LayoutError::Overflow {
                line: self.line,
                value,
                ty,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every construct of the subset, with the layout clang gives it.
    const ALL: &str = r#"/* SPDX */
#ifndef T_H
#define T_H
// a line comment
#define T_A 3            /* int */
#define T_B 0x10U
#define T_C (T_B * 2U + 1U)
#define T_D (1ULL << 40)
#define T_E (T_C / 3U - 1U) | 0x100U
#define T_NEG -1
struct t_inner {
	__u16 a;
	__s8 b[2];
};
struct t_outer { __u64 x; struct t_inner inner; __s16 y; char name[T_B]; __u16 _pad; __u32 z; struct t_inner two[2]; __u32 r; __s64 w; __u8 p[4]; __s32 q; };
_Static_assert(sizeof(struct t_outer) == 64, "t_outer: 100% \"packed\" # ok");
#endif
"#;

    #[test]
    fn reads_every_construct_of_the_subset() {
        let h = Header::parse(ALL).unwrap();
        let consts: Vec<(&str, Scalar, i128)> = h
            .consts
            .iter()
            .map(|c| (c.name.as_str(), c.ty, c.value))
            .collect();
        assert_eq!(
            consts,
            [
                ("T_A", Scalar::I32, 3),
                ("T_B", Scalar::U32, 16),
                ("T_C", Scalar::U32, 33),
                ("T_D", Scalar::U64, 1 << 40),
                ("T_E", Scalar::U32, 10 | 0x100),
                ("T_NEG", Scalar::I32, -1),
            ]
        );
        let outer = &h.structs[1];
        let offsets: Vec<(&str, u64)> = outer
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.offset))
            .collect();
        assert_eq!(
            offsets,
            [
                ("x", 0),
                ("inner", 8),
                ("y", 12),
                ("name", 14),
                ("_pad", 30),
                ("z", 32),
                ("two", 36),
                ("r", 44),
                ("w", 48),
                ("p", 56),
                ("q", 60)
            ]
        );
        assert_eq!((outer.size, outer.align), (64, 8));
        assert_eq!((h.structs[0].size, h.structs[0].align), (4, 2));
        let rust = h.to_rust("t.h");
        for line in [
            "pub const T_E: u32 = 266;",
            "pub const T_NEG: i32 = -1;",
            "pub struct TOuter {",
            "    pub inner: TInner,",
            "    pub y: i16,",
            "    pub z: u32,",
            "    pub w: i64,",
            "    pub q: i32,",
            "    pub name: [u8; 16],",
            "    pub two: [TInner; 2],",
            "const _: () = assert!(::core::mem::size_of::<TOuter>() == 64);",
            "const _: () = assert!(::core::mem::offset_of!(TOuter, q) == 60);",
            "unsafe impl aya::Pod for TInner {}",
        ] {
            assert!(rust.lines().any(|l| l == line), "{line}\n{rust}");
        }
        let c = Header::anchors_c(&[("t.h", &h)]);
        assert!(c.contains("#include \"t.h\"\nconst struct t_inner np_layout_t_inner = {};\nconst struct t_outer np_layout_t_outer = {};\n"), "{c}");
    }

    fn refusal(text: &str) -> LayoutError {
        Header::parse(text).expect_err(text)
    }

    #[test]
    fn refuses_what_it_does_not_read_naming_the_line() {
        let unsupported = |text: &str, line_no: usize| match refusal(text) {
            LayoutError::Unsupported { line, .. } => assert_eq!(line, line_no, "{text}"),
            e => panic!("{text}: {e}"),
        };
        unsupported("#include <x.h>", 1);
        unsupported("#if X\n#endif", 1);
        unsupported("#define F(x) x", 1);
        unsupported("\n#define A 1UL", 2);
        unsupported("#define A 010", 1);
        unsupported("#define A 1.5", 1);
        unsupported("#define A 1U + 1", 1);
        unsupported("#define A (1 % 2)", 1);
        unsupported("#define A 1 / 0", 1);
        unsupported("#define G\n", 1);
        unsupported("struct s {\n\tunion { __u32 a; } u;\n};", 2);
        unsupported("struct s {\n\t__u32 a : 3;\n};", 2);
        unsupported("struct s {\n\t__u32 *a;\n};", 2);
        unsupported("struct s {\n\t__u32 a, b;\n};", 2);
        unsupported("struct s {\n\t__u32 a[2][2];\n};", 2);
        unsupported("struct s {\n\tint a;\n};", 2);
        unsupported("struct s {\n\tunsigned long a;\n};", 2);
        unsupported("struct s {\n\t__u32 a;\n} __attribute__((packed));", 3);
        unsupported("struct s {\n\t__u32 a[0];\n};", 2);
        unsupported("typedef __u32 x;", 1);
        unsupported("struct s {\n\t__u32 type;\n};", 2);
        unsupported("#define A -1U", 1);
        unsupported("enum { A = 1 };", 1);
        unsupported("struct s {};", 1);
        unsupported("#ifndef G\n#define G\n#endif\n#define A 1", 4);
        assert!(matches!(
            refusal("struct s {\n\tstruct t a;\n};"),
            LayoutError::Undefined { line: 2, .. }
        ));
        assert!(matches!(
            refusal("#define A B"),
            LayoutError::Undefined { line: 1, .. }
        ));
        assert!(matches!(
            refusal("#define A 1\n#define A 2"),
            LayoutError::Duplicate { line: 2, .. }
        ));
        assert!(matches!(
            refusal("#define A 2147483648"),
            LayoutError::Overflow { line: 1, .. }
        ));
        assert!(matches!(
            refusal("#define A 0xffffffffU + 1U"),
            LayoutError::Overflow { line: 1, .. }
        ));
        assert!(matches!(
            refusal("/* open"),
            LayoutError::Eof { line: 1, .. }
        ));
        assert!(matches!(
            refusal("_Static_assert(1, \"open);"),
            LayoutError::Eof { line: 1, .. }
        ));
        assert!(matches!(
            refusal("#ifndef G\n#define G\n"),
            LayoutError::Eof { .. }
        ));
        assert!(matches!(
            refusal("struct s {\n\t__u32 a;\n"),
            LayoutError::Eof { .. }
        ));
    }

    #[test]
    fn refuses_implicit_padding_inside_and_at_the_end() {
        assert_eq!(
            refusal("struct s {\n\t__u32 a;\n\t__u64 b;\n};"),
            LayoutError::Padding {
                name: "s".into(),
                offset: 4,
                gap: 4
            }
        );
        assert_eq!(
            refusal("struct s {\n\t__u64 a;\n\t__u8 b;\n};"),
            LayoutError::Padding {
                name: "s".into(),
                offset: 9,
                gap: 7
            }
        );
        // The nested struct's alignment counts, not only its size.
        assert!(matches!(
            refusal("struct i {\n\t__u32 a;\n};\nstruct s {\n\t__u16 x;\n\tstruct i y;\n};"),
            LayoutError::Padding {
                offset: 2,
                gap: 2,
                ..
            }
        ));
    }
}
