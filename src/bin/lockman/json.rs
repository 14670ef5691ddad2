//! JSON text for `--json` output, shared by `inspect` and the synchronizer commands (a module
//! below both, so neither imports the other for it).

/// `v` escaped to go between the quotes of a JSON string, every control character (C0, DEL,
/// C1) as `\uXXXX`.
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            '\n' => out += "\\n",
            '\r' => out += "\\r",
            '\t' => out += "\\t",
            // C0 as JSON requires; DEL and C1 too, which JSON allows raw but a terminal the
            // output is printed to might act on.
            c if c.is_control() => out += &format!("\\u{:04x}", c as u32),
            c => out.push(c),
        }
    }
    out
}
