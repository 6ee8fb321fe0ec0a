//! Diagnostics: what nodeproof says about a profile, each with a stable
//! code, a severity, a JSON pointer and (once resolved against the source)
//! a line and column.

use serde::Serialize;
use std::fmt;

use crate::json::{LineIndex, Span};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Note,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        })
    }
}

macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// Stable diagnostic codes. The string form is part of the JSON output
        /// and of CI pipelines' allow-lists: never rename one.
        /// Each name is spelled out beside its variant, not derived from it
        /// (`serialize_all`), so that renaming a variant renames no code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr)]
        pub enum Code {
            $($(#[$doc])* #[strum(serialize = $name)] $variant,)*
        }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }
    };
}

codes! {
    // Reading and decoding (what Go's encoding/json does with the bytes).
    IoError => "io-error",
    TooLarge => "too-large",
    /// A security-profiles-operator SeccompProfile object, not the profile the operator writes from it.
    SpoSeccompProfile => "spo-seccomp-profile",
    JsonSyntax => "json-syntax",
    JsonType => "json-type",
    UnknownField => "unknown-field",
    MisspelledField => "misspelled-field",
    FieldCase => "field-case",
    DuplicateField => "duplicate-field",
    NullValue => "null-value",
    TemplateFieldIgnored => "template-field-ignored",
    ConditionalRuleIgnored => "conditional-rule-ignored",
    LegacyNameField => "legacy-name-field",
    // What the runtime does with the decoded profile.
    SeccompDisabled => "seccomp-disabled",
    FlagsUnsupported => "flags-unsupported",
    UnknownArch => "unknown-arch",
    UnknownAction => "unknown-action",
    UnknownOperator => "unknown-operator",
    TemplateConflict => "template-conflict",
    EmptySyscallName => "empty-syscall-name",
    /// A syscall name with a NUL, which runc's C-string lookup cuts off.
    NulInSyscallName => "nul-in-syscall-name",
    ArgIndexOutOfRange => "arg-index-out-of-range",
    NotifyNotAllowed => "notify-not-allowed",
    ListenerPathMissing => "listener-path-missing",
    ListenerUnreachable => "listener-unreachable",
    UnknownSyscall => "unknown-syscall",
    /// A real syscall newer than the name table of the libseccomp the runtime
    /// links (`syscalls::NEWER_THAN_2_5_4`): the runtime skips the rule.
    SyscallNewerThanLibseccomp => "syscall-newer-than-libseccomp",
    CompileFailed => "compile-failed",
    FilterTooLarge => "filter-too-large",
    /// `architectures` leaves out the node's arch, so runc's -ENOSYS stub does not cover it.
    NativeArchUnlisted => "native-arch-unlisted",
    RuntimeSyscallDenied => "runtime-syscall-denied",
    EntrypointSyscallDenied => "entrypoint-syscall-denied",
    /// A denied call that breaks only the starts where init happens to make it.
    RuntimeSyscallDeniedIntermittently => "runtime-syscall-denied-intermittently",
    /// A call of runc init denied by a rule on an argument init does not fix
    /// (an address, an unused register): it fails the starts where it matches.
    RuntimeSyscallDeniedByUnfixedArgument => "runtime-syscall-denied-by-unfixed-argument",
    /// A privilege drop of runc init answered with errno 0: it "succeeds" without running.
    PrivilegeDropSkipped => "privilege-drop-skipped",
    CrossArchModel => "cross-arch-model",
    // Lints beyond acceptance.
    AllowByDefault => "allow-by-default",
    ShadowedRule => "shadowed-rule",
    ConflictingActions => "conflicting-actions",
    ErrnoIgnored => "errno-ignored",
    ErrnoOutOfRange => "errno-out-of-range",
    ConditionsSplit => "conditions-split",
    ValueTwoIgnored => "value-two-ignored",
    /// SCMP_CMP_MASKED_EQ with mask (`value`) 0: the comparison does not depend on the argument.
    MaskZero => "mask-zero",
    /// defaultAction SCMP_ACT_TRACE: no tracer is attached, so every other call fails with ENOSYS.
    TraceWithoutTracer => "trace-without-tracer",
    EmptyNames => "empty-names",
    // Finding the files under a directory.
    /// A file found under a directory that is no seccomp profile (not JSON,
    /// or not a regular file): said per file, never judged as one.
    NotAProfile => "not-a-profile",
    /// A directory named to lint that holds no profile.
    NoProfiles => "no-profiles",
}

impl Code {
    /// A start failure that happens in some starts only: said after one that
    /// happens in every start, and told apart by the differential campaign.
    pub fn fails_only_sometimes(self) -> bool {
        matches!(
            self,
            Code::RuntimeSyscallDeniedIntermittently | Code::RuntimeSyscallDeniedByUnfixedArgument
        )
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding about a profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub code: Code,
    pub severity: Severity,
    pub message: String,
    /// RFC 6901 pointer into the document ("" = the whole document).
    pub pointer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    /// Byte span, when the pointer resolves to a place in the file.
    #[serde(skip)]
    pub span: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl Diagnostic {
    pub fn new(
        code: Code,
        severity: Severity,
        pointer: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            code,
            severity,
            message: message.into(),
            pointer: pointer.into(),
            help: None,
            span: None,
            line: None,
            column: None,
        }
    }

    pub fn error(code: Code, pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(code, Severity::Error, pointer, message)
    }

    pub fn warning(code: Code, pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(code, Severity::Warning, pointer, message)
    }

    pub fn note(code: Code, pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(code, Severity::Note, pointer, message)
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn with_span(mut self, span: Span) -> Self {
        self.span = Some(span);
        self
    }

    /// Fill line and column from the span.
    pub fn locate(&mut self, index: &LineIndex<'_>) {
        if let Some(span) = self.span {
            let (line, column) = index.line_col(span.start);
            self.line = Some(line);
            self.column = Some(column);
        }
    }
}

/// Characters of the source line shown on either side of a diagnostic's
/// column: a minified profile is one line of hundreds of kilobytes, and
/// every diagnostic echoing all of it buries the findings.
pub const SOURCE_WINDOW: usize = 60;

/// The part of a source line a diagnostic shows: at most [`SOURCE_WINDOW`]
/// characters before column `col` (1-based) and after the `width` marked
/// ones, `…` where the line is cut, tabs as 4 spaces. Returns the text and
/// the 0-based display column of `col` in it, where the caret goes.
pub fn source_window(raw: &str, col: usize, width: usize) -> (String, usize) {
    let chars: Vec<char> = raw.chars().collect();
    let at = col.saturating_sub(1).min(chars.len());
    let start = at.saturating_sub(SOURCE_WINDOW);
    let end = (at + width.max(1) + SOURCE_WINDOW).min(chars.len());
    let shown_width = |cs: &[char]| {
        cs.iter()
            .map(|&c| if c == '\t' { 4 } else { 1 })
            .sum::<usize>()
    };
    let mut text = String::new();
    let mut caret = shown_width(&chars[start..at]);
    if start > 0 {
        text.push('…');
        caret += 1;
    }
    for &c in &chars[start..end] {
        if c == '\t' {
            text.push_str("    ");
        } else {
            text.push(c);
        }
    }
    if end < chars.len() {
        text.push('…');
    }
    (text, caret)
}

/// Render diagnostics like rustc: `error[code]: message`, ` --> file:line:col`,
/// the source line (a window of it around the column) with a caret, and `= help:`.
pub fn render_text(path: &str, src: &[u8], diagnostics: &[Diagnostic], out: &mut String) {
    use std::fmt::Write;
    let index = LineIndex::new(src);
    for d in diagnostics {
        let _ = writeln!(out, "{}[{}]: {}", d.severity, d.code, d.message);
        match (d.line, d.column) {
            (Some(line), Some(col)) => {
                let _ = writeln!(out, "  --> {path}:{line}:{col}");
                let width = d
                    .span
                    .map(|s| {
                        let (end_line, end_col) = index.line_col(s.end);
                        if end_line == line && end_col > col {
                            end_col - col
                        } else {
                            1
                        }
                    })
                    .unwrap_or(1)
                    .min(80);
                // Tabs become 4 spaces so the caret lines up in any terminal.
                let (text, caret) = source_window(&index.line_text(line), col, width);
                let gutter = line.to_string().len();
                let _ = writeln!(out, "{:gutter$} |", "");
                let _ = writeln!(out, "{line} | {text}");
                let _ = writeln!(
                    out,
                    "{:gutter$} | {}{}",
                    "",
                    " ".repeat(caret),
                    "^".repeat(width)
                );
            }
            _ => {
                let _ = writeln!(out, "  --> {path}");
            }
        }
        if !d.pointer.is_empty() {
            let _ = writeln!(out, "   = at: {}", d.pointer);
        }
        if let Some(help) = &d.help {
            let _ = writeln!(out, "   = help: {help}");
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_to_a_window_around_the_column() {
        let raw: String = (0..10_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let col = 5_000;
        let (text, caret) = source_window(&raw, col, 3);
        assert!(text.starts_with('…') && text.ends_with('…'), "{text}");
        assert_eq!(text.chars().count(), 2 * SOURCE_WINDOW + 3 + 2);
        // The caret sits under the character at `col`.
        assert_eq!(text.chars().nth(caret), raw.chars().nth(col - 1));
        assert_eq!(caret, SOURCE_WINDOW + 1);
    }

    #[test]
    fn a_short_line_is_shown_whole_and_tabs_keep_the_caret_aligned() {
        let raw = "\t\"names\": [\"mkdir\"]";
        let col = raw.find("mkdir").unwrap() + 1;
        let (text, caret) = source_window(raw, col, 5);
        assert_eq!(text, "    \"names\": [\"mkdir\"]");
        assert_eq!(&text[caret..caret + 5], "mkdir");
        // Near the start only the end is cut.
        let long = format!(
            "{{\"defaultAction\":\"SCMP_ACT_ALLOW\"{}}}",
            " ".repeat(500)
        );
        let (text, caret) = source_window(&long, 2, 1);
        assert!(!text.starts_with('…') && text.ends_with('…'), "{text}");
        assert_eq!(caret, 1);
    }

    #[test]
    fn rendering_a_minified_profile_stays_small() {
        let names: Vec<String> = (0..20_000).map(|i| format!("\"n{i}\"")).collect();
        let src = format!(
            r#"{{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{{"names":[{}],"action":"SCMP_ACT_ALLOW"}}]}}"#,
            names.join(",")
        );
        assert!(src.len() > 150_000 && !src.contains('\n'));
        let diagnostics: Vec<Diagnostic> = (0..9)
            .map(|i| {
                let at = src.find(&format!("\"n{}\"", i * 2_000)).unwrap();
                let mut d = Diagnostic::warning(Code::UnknownSyscall, "", "w").with_span(Span {
                    start: at,
                    end: at + 6,
                });
                d.locate(&LineIndex::new(src.as_bytes()));
                d
            })
            .collect();
        let mut out = String::new();
        render_text("p.json", src.as_bytes(), &diagnostics, &mut out);
        assert!(out.len() < 9 * 400, "{} bytes for 9 diagnostics", out.len());
        assert_eq!(out.matches('^').count(), 9 * 6);
    }
}
