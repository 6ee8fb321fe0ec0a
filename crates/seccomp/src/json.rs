//! A JSON parser that keeps what the runtime's decoder throws away: byte
//! spans of every key and value, duplicate keys, and key spelling. The
//! grammar and its limits follow Go's `encoding/json` scanner (the decoder
//! containerd and runc use), so a document is valid here exactly when it is
//! valid there. Iterative, so deep nesting cannot overflow the stack.

use std::borrow::Cow;
use std::fmt;

/// Go's scanner refuses documents nested deeper than this.
pub const MAX_DEPTH: usize = 10_000;

/// Containers nested deeper than this are validated but kept empty: no
/// profile field lies that deep, and a shallow tree cannot overflow the
/// stack when it is dropped.
pub const KEEP_DEPTH: usize = 16;

/// Byte range `[start, end)` in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// The number's literal text; how it converts depends on the target field.
    Number(String),
    String(String),
    Array(Vec<Node>),
    Object(Vec<Member>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Profile field names are shared static strings; other keys are owned.
    pub key: Cow<'static, str>,
    pub key_span: Span,
    pub value: Node,
}

impl Value {
    /// Go's name for the JSON kind in `UnmarshalTypeError` messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }
}

/// A syntax error, worded like Go's `json.SyntaxError` so users recognise
/// what the runtime will print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub kind: SyntaxErrorKind,
    /// Byte offset where the problem was found.
    pub offset: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyntaxErrorKind {
    UnexpectedEnd,
    /// An unexpected byte; `context` is Go's "looking for ..." phrase.
    InvalidCharacter {
        found: u8,
        context: &'static str,
    },
    /// Nesting beyond [`MAX_DEPTH`] at the bracket `found`.
    TooDeep {
        found: u8,
    },
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            SyntaxErrorKind::UnexpectedEnd => f.write_str("unexpected end of JSON input"),
            SyntaxErrorKind::InvalidCharacter { found, context } => {
                write!(f, "invalid character {} {context}", quote_byte(*found))
            }
            SyntaxErrorKind::TooDeep { found } => {
                write!(
                    f,
                    "invalid character {} exceeded max depth",
                    quote_byte(*found)
                )
            }
        }
    }
}

impl std::error::Error for SyntaxError {}

/// Go quotes the offending character as a rune (`'x'`, `'\n'`); bytes of a
/// multi-byte sequence are shown as Latin-1, which is what users see for a BOM (`'ï'`).
fn quote_byte(b: u8) -> String {
    match b {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        b'\n' => "'\\n'".to_string(),
        b'\r' => "'\\r'".to_string(),
        b'\t' => "'\\t'".to_string(),
        0x20..=0x7e => format!("'{}'", b as char),
        0x80..=0xff => format!("'{}'", char::from(b)),
        _ => format!("'\\x{b:02x}'"),
    }
}

/// Parse a whole document: one value, optional surrounding whitespace.
pub fn parse(src: &[u8]) -> Result<Node, SyntaxError> {
    let mut p = Parser { src, pos: 0 };
    let node = p.parse_document()?;
    p.skip_ws();
    if p.pos < src.len() {
        return Err(p.invalid(src[p.pos], "after top-level value"));
    }
    Ok(node)
}

/// The keys of both profile dialects (a test in `model` holds this to the schemas).
pub(crate) const KNOWN_KEYS: &[&str] = &[
    "names",
    "action",
    "args",
    "comment",
    "includes",
    "excludes",
    "index",
    "value",
    "valueTwo",
    "op",
    "caps",
    "arches",
    "minKernel",
    "errnoRet",
    "errno",
    "name",
    "defaultAction",
    "defaultErrnoRet",
    "defaultErrno",
    "architectures",
    "archMap",
    "architecture",
    "subArchitectures",
    "syscalls",
    "flags",
    "listenerPath",
    "listenerMetadata",
];

enum Frame {
    Array {
        start: usize,
        items: Vec<Node>,
    },
    Object {
        start: usize,
        members: Vec<Member>,
        key: Option<(Cow<'static, str>, Span)>,
    },
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.src.get(self.pos) {
            self.pos += 1;
        }
    }

    fn invalid(&self, found: u8, context: &'static str) -> SyntaxError {
        SyntaxError {
            kind: SyntaxErrorKind::InvalidCharacter { found, context },
            offset: self.pos,
        }
    }

    fn end(&self) -> SyntaxError {
        SyntaxError {
            kind: SyntaxErrorKind::UnexpectedEnd,
            offset: self.src.len(),
        }
    }

    fn peek(&mut self) -> Result<u8, SyntaxError> {
        self.skip_ws();
        self.src.get(self.pos).copied().ok_or_else(|| self.end())
    }

    fn parse_document(&mut self) -> Result<Node, SyntaxError> {
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            // Parse one value start; containers push a frame.
            let b = self.peek()?;
            let mut done = match b {
                b'[' | b'{' => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(SyntaxError {
                            kind: SyntaxErrorKind::TooDeep { found: b },
                            offset: self.pos,
                        });
                    }
                    let start = self.pos;
                    self.pos += 1;
                    let array = b == b'[';
                    if self.peek()? == if array { b']' } else { b'}' } {
                        self.pos += 1;
                        let value = if array {
                            Value::Array(Vec::new())
                        } else {
                            Value::Object(Vec::new())
                        };
                        Some(Node {
                            value,
                            span: Span {
                                start,
                                end: self.pos,
                            },
                        })
                    } else {
                        stack.push(if array {
                            Frame::Array {
                                start,
                                items: Vec::new(),
                            }
                        } else {
                            Frame::Object {
                                start,
                                members: Vec::new(),
                                key: Some(self.parse_key()?),
                            }
                        });
                        continue;
                    }
                }
                _ => Some(self.parse_scalar()?),
            };
            // Attach completed values to their parents, closing containers as we go.
            while let Some(node) = done.take() {
                let depth = stack.len();
                let Some(frame) = stack.last_mut() else {
                    return Ok(node);
                };
                let b = self.peek()?;
                match frame {
                    Frame::Array { start, items } => {
                        if depth <= KEEP_DEPTH {
                            items.push(node);
                        }
                        match b {
                            b',' => self.pos += 1,
                            b']' => {
                                self.pos += 1;
                                let span = Span {
                                    start: *start,
                                    end: self.pos,
                                };
                                let items = std::mem::take(items);
                                stack.pop();
                                done = Some(Node {
                                    value: Value::Array(items),
                                    span,
                                });
                            }
                            _ => return Err(self.invalid(b, "after array element")),
                        }
                    }
                    Frame::Object {
                        start,
                        members,
                        key,
                    } => {
                        let (k, key_span) = key.take().unwrap_or_default();
                        if depth <= KEEP_DEPTH {
                            members.push(Member {
                                key: k,
                                key_span,
                                value: node,
                            });
                        }
                        match b {
                            b',' => {
                                self.pos += 1;
                                let next = self.parse_key()?;
                                if let Some(Frame::Object { key, .. }) = stack.last_mut() {
                                    *key = Some(next);
                                }
                            }
                            b'}' => {
                                self.pos += 1;
                                let span = Span {
                                    start: *start,
                                    end: self.pos,
                                };
                                let members = std::mem::take(members);
                                stack.pop();
                                done = Some(Node {
                                    value: Value::Object(members),
                                    span,
                                });
                            }
                            _ => return Err(self.invalid(b, "after object key:value pair")),
                        }
                    }
                }
            }
        }
    }

    /// `"key" :` — leaves the position at the value.
    fn parse_key(&mut self) -> Result<(Cow<'static, str>, Span), SyntaxError> {
        let b = self.peek()?;
        if b != b'"' {
            return Err(self.invalid(b, "looking for beginning of object key string"));
        }
        let start = self.pos;
        let key = self.parse_key_string()?;
        let span = Span {
            start,
            end: self.pos,
        };
        let b = self.peek()?;
        if b != b':' {
            return Err(self.invalid(b, "after object key"));
        }
        self.pos += 1;
        Ok((key, span))
    }

    /// A key: the profile's field names (every object has a few) without an
    /// allocation each.
    fn parse_key_string(&mut self) -> Result<Cow<'static, str>, SyntaxError> {
        let rest = &self.src[self.pos + 1..];
        if let Some(end) = rest.iter().position(|&c| c == b'"' || c == b'\\') {
            if rest[end] == b'"' {
                if let Some(known) = KNOWN_KEYS.iter().find(|k| k.as_bytes() == &rest[..end]) {
                    self.pos += end + 2;
                    return Ok(Cow::Borrowed(known));
                }
            }
        }
        self.parse_string().map(Cow::Owned)
    }

    fn parse_scalar(&mut self) -> Result<Node, SyntaxError> {
        let start = self.pos;
        let b = self.peek()?;
        let value = match b {
            b'"' => Value::String(self.parse_string()?),
            b'-' | b'0'..=b'9' => Value::Number(self.parse_number()?),
            b't' => {
                self.literal(b"true")?;
                Value::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Value::Bool(false)
            }
            b'n' => {
                self.literal(b"null")?;
                Value::Null
            }
            _ => return Err(self.invalid(b, "looking for beginning of value")),
        };
        Ok(Node {
            value,
            span: Span {
                start,
                end: self.pos,
            },
        })
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), SyntaxError> {
        let context = match word[0] {
            b't' => "in literal true (expecting 'r')",
            b'f' => "in literal false (expecting 'a')",
            _ => "in literal null (expecting 'u')",
        };
        for (i, &w) in word.iter().enumerate() {
            match self.src.get(self.pos) {
                None => return Err(self.end()),
                Some(&c) if c == w => self.pos += 1,
                Some(&c) => {
                    let _ = i;
                    return Err(self.invalid(c, context));
                }
            }
        }
        Ok(())
    }

    fn parse_number(&mut self) -> Result<String, SyntaxError> {
        let start = self.pos;
        if self.src.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match self.src.get(self.pos) {
            None => return Err(self.end()),
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            Some(&c) => return Err(self.invalid(c, "in numeric literal")),
        }
        if self.src.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            match self.src.get(self.pos) {
                None => return Err(self.end()),
                Some(b'0'..=b'9') => self.digits(),
                Some(&c) => return Err(self.invalid(c, "after decimal point in numeric literal")),
            }
        }
        if let Some(b'e' | b'E') = self.src.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.src.get(self.pos) {
                self.pos += 1;
            }
            match self.src.get(self.pos) {
                None => return Err(self.end()),
                Some(b'0'..=b'9') => self.digits(),
                Some(&c) => return Err(self.invalid(c, "in exponent of numeric literal")),
            }
        }
        // Only ASCII was consumed.
        Ok(String::from_utf8_lossy(&self.src[start..self.pos]).into_owned())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.src.get(self.pos) {
            self.pos += 1;
        }
    }

    /// A string literal. Like Go, invalid UTF-8 and lone surrogates become U+FFFD.
    fn parse_string(&mut self) -> Result<String, SyntaxError> {
        debug_assert_eq!(self.src.get(self.pos), Some(&b'"'));
        self.pos += 1;
        // Most strings have no escape: take them in one copy.
        let rest = &self.src[self.pos..];
        if let Some(end) = rest
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        {
            if rest[end] == b'"' {
                self.pos += end + 1;
                return Ok(match std::str::from_utf8(&rest[..end]) {
                    Ok(s) => s.to_owned(),
                    Err(_) => String::from_utf8_lossy(&rest[..end]).into_owned(),
                });
            }
        }
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(&c) = self.src.get(self.pos) else {
                return Err(self.end());
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    return Ok(String::from_utf8(out)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()));
                }
                b'\\' => {
                    self.pos += 1;
                    let Some(&e) = self.src.get(self.pos) else {
                        return Err(self.end());
                    };
                    self.pos += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => {
                            self.pos -= 1;
                            return Err(self.invalid(e, "in string escape code"));
                        }
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                0x00..=0x1f => return Err(self.invalid(c, "in string literal")),
                _ => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn hex4(&mut self) -> Result<u16, SyntaxError> {
        let mut v: u16 = 0;
        for _ in 0..4 {
            let Some(&h) = self.src.get(self.pos) else {
                return Err(self.end());
            };
            let d = match h {
                b'0'..=b'9' => h - b'0',
                b'a'..=b'f' => h - b'a' + 10,
                b'A'..=b'F' => h - b'A' + 10,
                _ => return Err(self.invalid(h, "in \\u hexadecimal character escape")),
            };
            v = v << 4 | u16::from(d);
            self.pos += 1;
        }
        Ok(v)
    }

    fn unicode_escape(&mut self) -> Result<char, SyntaxError> {
        let hi = self.hex4()?;
        if (0xD800..0xDC00).contains(&hi) && self.src.get(self.pos..self.pos + 2) == Some(b"\\u") {
            let save = self.pos;
            self.pos += 2;
            let lo = self.hex4()?;
            if (0xDC00..0xE000).contains(&lo) {
                let c = 0x10000 + ((u32::from(hi) - 0xD800) << 10) + (u32::from(lo) - 0xDC00);
                return Ok(char::from_u32(c).unwrap_or('\u{fffd}'));
            }
            // Not a pair: Go emits U+FFFD for the lone high half and re-reads the second escape.
            self.pos = save;
        }
        Ok(char::from_u32(u32::from(hi)).unwrap_or('\u{fffd}'))
    }
}

/// Maps byte offsets to 1-based line and column (columns count characters).
pub struct LineIndex<'a> {
    src: &'a [u8],
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub fn new(src: &'a [u8]) -> Self {
        // Eight bytes at a time: most words of a profile hold no newline.
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        const NEWLINES: u64 = 0x0a0a_0a0a_0a0a_0a0a;
        let mut line_starts = Vec::with_capacity(src.len() / 16 + 1);
        line_starts.push(0);
        let mut words = src.chunks_exact(8);
        let mut at = 0;
        for w in &mut words {
            let x = u64::from_le_bytes(w.try_into().unwrap_or([0; 8])) ^ NEWLINES;
            // a zero byte in x is a newline in w
            if x.wrapping_sub(ONES) & !x & HIGH != 0 {
                line_starts.extend((0..8).filter(|&j| w[j] == b'\n').map(|j| at + j + 1));
            }
            at += 8;
        }
        line_starts.extend(
            (0..words.remainder().len())
                .filter(|&j| words.remainder()[j] == b'\n')
                .map(|j| at + j + 1),
        );
        LineIndex { src, line_starts }
    }

    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.src.len());
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        let col = String::from_utf8_lossy(&self.src[start..offset])
            .chars()
            .count();
        (line + 1, col + 1)
    }

    /// The text of a 1-based line, without its newline.
    pub fn line_text(&self, line: usize) -> String {
        let Some(&start) = self.line_starts.get(line.wrapping_sub(1)) else {
            return String::new();
        };
        let end = self
            .line_starts
            .get(line)
            .map_or(self.src.len(), |&e| e.saturating_sub(1));
        String::from_utf8_lossy(&self.src[start..end.max(start)])
            .trim_end_matches('\r')
            .to_string()
    }
}

/// Escape a key for a JSON pointer (RFC 6901).
pub fn pointer_token(key: &str) -> std::borrow::Cow<'_, str> {
    if key.contains(['~', '/']) {
        key.replace('~', "~0").replace('/', "~1").into()
    } else {
        key.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        parse(src.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn syntax_errors_read_like_go() {
        let cases = [
            ("", "unexpected end of JSON input"),
            ("   ", "unexpected end of JSON input"),
            ("{", "unexpected end of JSON input"),
            ("{\"a\":1", "unexpected end of JSON input"),
            (
                "\u{feff}{}",
                "invalid character 'ï' looking for beginning of value",
            ),
            ("{} x", "invalid character 'x' after top-level value"),
            ("{\"a\" 1}", "invalid character '1' after object key"),
            (
                "{\"a\":1,}",
                "invalid character '}' looking for beginning of object key string",
            ),
            ("[1 2]", "invalid character '2' after array element"),
            ("01", "invalid character '1' after top-level value"),
            ("-", "unexpected end of JSON input"),
            ("1.", "unexpected end of JSON input"),
            (
                "1.x",
                "invalid character 'x' after decimal point in numeric literal",
            ),
            ("tru", "unexpected end of JSON input"),
            (
                "nul!",
                "invalid character '!' in literal null (expecting 'u')",
            ),
            ("\"a\nb\"", "invalid character '\\n' in string literal"),
            ("\"\\q\"", "invalid character 'q' in string escape code"),
            (
                "'a'",
                "invalid character '\\'' looking for beginning of value",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(err(src), want, "input {src:?}");
        }
    }

    #[test]
    fn keeps_duplicates_spans_and_lossy_strings() {
        let src = b"{\"a\":1,\"A\":\"x\xffy\",\"a\":[true,null]}";
        let node = parse(src).unwrap();
        let Value::Object(members) = node.value else {
            panic!("not an object")
        };
        let keys: Vec<_> = members.iter().map(|m| &*m.key).collect();
        assert_eq!(keys, ["a", "A", "a"]);
        assert_eq!(members[1].value.value, Value::String("x\u{fffd}y".into()));
        assert_eq!(members[0].key_span, Span { start: 1, end: 4 });
        assert_eq!(members[2].value.span, Span { start: 21, end: 32 });
    }

    #[test]
    fn unicode_escapes() {
        let node = parse(br#""\u00e9\ud83d\ude00\ud800x""#).unwrap();
        assert_eq!(node.value, Value::String("é😀\u{fffd}x".into()));
    }

    #[test]
    fn depth_limit_is_an_error_not_a_crash() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(
            parse(deep.as_bytes()).unwrap_err().to_string(),
            "invalid character '[' exceeded max depth"
        );
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(ok.as_bytes()).is_ok());
    }

    #[test]
    fn line_and_column() {
        let src = b"{\n  \"\xc3\xa9\": x}";
        let idx = LineIndex::new(src);
        let e = parse(src).unwrap_err();
        assert_eq!(idx.line_col(e.offset), (2, 8));
        assert_eq!(idx.line_text(2), "  \"é\": x}");
    }

    #[test]
    fn line_starts_match_a_byte_by_byte_scan() {
        // newlines at every offset within a word, runs of them, and a tail
        for len in 0..40 {
            for step in 1..11 {
                let src: Vec<u8> = (0..len)
                    .map(|i| if i % step == step - 1 { b'\n' } else { b'a' })
                    .collect();
                let mut expected = vec![0];
                expected.extend((0..len).filter(|&i| src[i] == b'\n').map(|i| i + 1));
                assert_eq!(
                    LineIndex::new(&src).line_starts,
                    expected,
                    "len {len} step {step}"
                );
            }
        }
    }
}
