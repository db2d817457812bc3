//! # tierd-toml: TOML text into typed values, errors located in the text
//!
//! tierd reads two kinds of TOML that people write by hand: the daemon's configuration
//! (`tierd-daemon::config`) and the simulator's scenarios (`tierd-sim::scenario`). A mistake
//! in either is reported on one line as `file:line:column: key: message`, the key being the
//! dotted path of the field (`engine.demotion.idle_after_ms`, `process[1].region[0].size_gib`).
//! The `toml` crate gives the message and a byte span; `serde_path_to_error` gives the path
//! of the field that failed. Turning the two into a line, a column and a key is the same for
//! both files, so it lives here once.
//!
//! - [`from_str`]: parse and deserialize, or a [`Problem`] that says where.
//! - [`line_col`]: the 1-based line and column of a byte offset.

use serde::de::DeserializeOwned;

/// Where and what the first problem in a TOML text is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line (0 when the parser gave no position).
    pub line: usize,
    /// 1-based column, in bytes (0 when the parser gave no position).
    pub column: usize,
    /// The field's dotted path, or `-` when the problem is not in one field (a syntax error,
    /// a missing top-level key).
    pub key: String,
    /// What is wrong, as the parser says it, on one line.
    pub message: String,
}

/// Deserializes `text` into a `T`.
///
/// # Errors
/// A [`Problem`] with the line, column and dotted key of the first syntax or type error.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Problem> {
    let de = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        let (line, column) = inner.span().map_or((0, 0), |s| line_col(text, s.start));
        Problem {
            line,
            column,
            key: if key.is_empty() || key == "." {
                "-".into()
            } else {
                key
            },
            // The parser's message can span lines (a syntax error quotes the line with a
            // caret under it); the error is one line, so the lines are joined.
            message: inner
                .message()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" "),
        }
    })
}

/// The 1-based line and column (in bytes) of byte `offset` of `text`; an offset past the end
/// is the end.
#[must_use]
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.as_bytes().get(..offset).unwrap_or(text.as_bytes());
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        #[allow(dead_code, reason = "read by serde only")]
        size_gib: f64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        #[allow(dead_code, reason = "read by serde only")]
        name: String,
        #[serde(default)]
        #[allow(dead_code, reason = "read by serde only")]
        region: Vec<Inner>,
    }

    #[test]
    fn a_type_error_names_its_line_column_and_dotted_key() {
        let text = "name = \"a\"\n\n[[region]]\nsize_gib = 1.0\n\n[[region]]\nsize_gib = \"x\"\n";
        let p = from_str::<Doc>(text).unwrap_err();
        assert_eq!((p.line, p.column), (7, 12), "{p:?}");
        assert_eq!(p.key, "region[1].size_gib");
        assert!(!p.message.contains('\n'), "{p:?}");
    }

    #[test]
    fn a_syntax_error_is_one_line_without_a_key() {
        let p = from_str::<Doc>("name = \"a\"\nregion = [\n").unwrap_err();
        assert_eq!(p.key, "-");
        assert!(p.line >= 2, "{p:?}");
        assert!(!p.message.is_empty() && !p.message.contains('\n'), "{p:?}");
    }

    #[test]
    fn a_missing_top_level_key_has_no_key_to_name() {
        let p = from_str::<Doc>("").unwrap_err();
        assert_eq!(p.key, "-");
        assert!(p.message.contains("name"), "{p:?}");
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 2), (1, 3));
        assert_eq!(line_col("ab\ncd", 3), (2, 1));
        assert_eq!(line_col("ab\ncd", 99), (2, 3));
    }

    proptest! {
        /// On any text and offset: the line is one more than the newlines before the
        /// offset, and the column one more than the bytes since the last of them.
        #[test]
        fn line_col_matches_a_count_by_hand(text in ".{0,200}", at in 0usize..300) {
            let (line, col) = line_col(&text, at);
            let end = at.min(text.len());
            let before = &text.as_bytes()[..end];
            let newlines = before.iter().filter(|&&b| b == b'\n').count();
            prop_assert_eq!(line, newlines + 1);
            let since = before.iter().rev().take_while(|&&b| b != b'\n').count();
            prop_assert_eq!(col, since + 1);
        }

        /// Whatever the text, parsing never panics and a problem is one line.
        #[test]
        fn any_text_gives_a_value_or_a_one_line_problem(text in "\\PC{0,120}") {
            if let Err(p) = from_str::<Doc>(&text) {
                prop_assert!(!p.message.contains('\n'));
                prop_assert!(p.line <= text.lines().count() + 1);
            }
        }
    }
}
