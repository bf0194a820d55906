//! Text helpers shared across layers.

use std::borrow::Cow;

/// At most `max_chars` characters of `text`, then `…` when it was longer: a value quoted in an
/// error message, a tool's output shown to the model, a question in a title.
pub fn shortened(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// JSON text without the `\u0000` escapes of its strings. PostgreSQL stores a NUL neither in text
/// nor in jsonb, so one would fail the request late, as a 500, and an alert sender would retry it
/// forever; it carries nothing a person meant to send. Borrowed when there is none (the usual case).
pub fn without_nul_escapes(json: &[u8]) -> Cow<'_, [u8]> {
    const NUL: &[u8] = b"\\u0000";
    if !json.windows(NUL.len()).any(|window| window == NUL) {
        return Cow::Borrowed(json);
    }
    let mut kept = Vec::with_capacity(json.len());
    let (mut at, mut in_string) = (0, false);
    while let Some(&byte) = json.get(at) {
        if in_string && byte == b'\\' {
            // An escape: a NUL's is dropped, any other is kept whole (so `\\u0000`, an escaped
            // backslash before the text `u0000`, stays).
            let escape = if json[at..].starts_with(NUL) {
                &[][..]
            } else {
                &json[at..(at + 2).min(json.len())]
            };
            kept.extend_from_slice(escape);
            at += if escape.is_empty() { NUL.len() } else { escape.len() };
            continue;
        }
        if byte == b'"' {
            in_string = !in_string;
        }
        kept.push(byte);
        at += 1;
    }
    Cow::Owned(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_escapes_are_dropped_from_strings_only() {
        let cases = [
            (r#"{"a":"x\u0000y"}"#, r#"{"a":"xy"}"#),
            (r#"{"a\u0000":"\u0000"}"#, r#"{"a":""}"#),
            (r#"{"a":"\\u0000"}"#, r#"{"a":"\\u0000"}"#),
            (r#"{"a":"\"\u0000\""}"#, r#"{"a":"\"\""}"#),
            (r#"{"a":"\u00001"}"#, r#"{"a":"1"}"#),
        ];
        for (given, expected) in cases {
            assert_eq!(
                std::str::from_utf8(&without_nul_escapes(given.as_bytes())).unwrap(),
                expected,
                "{given}"
            );
        }
        assert!(matches!(without_nul_escapes(br#"{"a":"b"}"#), Cow::Borrowed(_)));
    }

    #[test]
    fn cuts_at_a_character_count_and_says_so() {
        assert_eq!(shortened("héllo", 5), "héllo");
        assert_eq!(shortened("héllo", 2), "hé…");
        assert_eq!(shortened("", 0), "");
    }
}
