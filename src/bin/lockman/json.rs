//! JSON text for `--json` output, through serde_json (a module below every command that
//! prints JSON, so none imports another for it).

use std::time::Duration;

pub use serde_json::{Value, json};

/// `value` as one line of JSON text. serde_json escapes what JSON requires (quotes,
/// backslashes, C0); DEL and C1, which JSON allows raw but a terminal the output is printed to
/// might act on, are escaped here too (`\uXXXX`): in JSON text they can only stand inside a
/// string, where the escape means the same character.
pub fn text(value: &Value) -> String {
    let raw = value.to_string();
    if !raw.chars().any(char::is_control) {
        return raw;
    }
    let mut out = String::with_capacity(raw.len() + 16);
    for c in raw.chars() {
        if c.is_control() {
            out += &format!("\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// A duration in whole milliseconds.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_character_is_escaped_and_reads_back_the_same() {
        let forged = "a\"b\\c\nd\u{7}e\u{7f}f\u{9b}g";
        let line = text(&json!({ "cycle": forged, "n": 1 }));
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(
            line.contains("\\u007f") && line.contains("\\u009b"),
            "{line}"
        );
        let back: Value = serde_json::from_str(&line).expect("valid JSON");
        assert_eq!(back["cycle"], forged);
    }
}
