//! Text output safe for a terminal: names, holder ids and client records come from Redis, where
//! anyone who may write them can put control characters in, and printed as they are those
//! would drive the viewer's terminal (set its title, clear it, colour it, move the cursor).

use std::borrow::Cow;

/// `v` with every control character replaced by a visible escape: C0 (U+0000–U+001F, tab and
/// newline included, as they would break a line or a column) and DEL as `\x1b`, C1
/// (U+0080–U+009F, which some terminals read as ESC sequences) as `\u{9b}`. Everything else,
/// a backslash included, is kept; `--json` output is escaped the JSON way instead.
pub fn clean(v: &str) -> Cow<'_, str> {
    if !v.chars().any(char::is_control) {
        return Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len() + 8);
    for c in v.chars() {
        match c as u32 {
            n @ (0..=0x1f | 0x7f) => out += &format!("\\x{n:02x}"),
            n @ 0x80..=0x9f => out += &format!("\\u{{{n:x}}}"),
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn control_characters_become_visible_escapes() {
        assert_eq!(clean("orders:42"), "orders:42");
        assert_eq!(
            clean("evil\x1b]0;pwned\x07\x1b[2J"),
            "evil\\x1b]0;pwned\\x07\\x1b[2J"
        );
        assert_eq!(clean("a\tb\nc\x7f"), "a\\x09b\\x0ac\\x7f");
        assert_eq!(clean("csi\u{9b}31m é"), "csi\\u{9b}31m é");
        assert_eq!(clean("a\\x1b"), "a\\x1b", "a backslash is kept");
    }
}
