//! Text helpers shared across layers.

/// At most `max_chars` characters of `text`, then `…` when it was longer: a value quoted in an
/// error message, a tool's output shown to the model, a question in a title.
pub fn shortened(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::shortened;

    #[test]
    fn cuts_at_a_character_count_and_says_so() {
        assert_eq!(shortened("héllo", 5), "héllo");
        assert_eq!(shortened("héllo", 2), "hé…");
        assert_eq!(shortened("", 0), "");
    }
}
