//! The spec's limit on what a user may ask in one message.

use vigil_llm::{count_tokens, MAX_USER_MESSAGE_TOKENS};

/// The spec's user-message limit is 20,000 tokens, "about 80,000 characters": both are enforced,
/// as text the tokenizer packs densely (one letter repeated is ~8 characters a token) would
/// otherwise pass far beyond 80,000 characters.
pub const MAX_USER_MESSAGE_CHARS: usize = 80_000;

/// Why `text` is over the user-message limit, if it is.
pub fn too_long(text: &str) -> Option<String> {
    const ADVICE: &str =
        "The limit is 20,000 tokens (about 80,000 characters); shorten it or split it into several messages.";
    let chars = text.chars().count();
    if chars > MAX_USER_MESSAGE_CHARS {
        return Some(format!("Your message is too long ({chars} characters). {ADVICE}"));
    }
    // A token spans at least one byte, so only a message longer than the limit in bytes can be
    // over it in tokens; short messages skip the tokenizer.
    if text.len() > MAX_USER_MESSAGE_TOKENS {
        let tokens = count_tokens(text);
        if tokens > MAX_USER_MESSAGE_TOKENS {
            return Some(format!("Your message is too long ({tokens} tokens). {ADVICE}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_too_long_over_20000_tokens_or_80000_characters() {
        assert_eq!(too_long("why is checkout down?"), None);
        assert_eq!(too_long(&"a".repeat(80_000)), None, "80,000 characters, ~10,000 tokens");
        let by_chars = too_long(&"a".repeat(80_001)).expect("over 80,000 characters");
        assert!(
            by_chars.contains("too long") && by_chars.contains("20,000 tokens"),
            "{by_chars}"
        );
        let numbers = (10_000..23_000).map(|n| n.to_string()).collect::<Vec<_>>().join(" ");
        assert!(numbers.chars().count() < MAX_USER_MESSAGE_CHARS);
        let by_tokens = too_long(&numbers).expect("digits tokenize in groups of at most three");
        assert!(by_tokens.contains("tokens). The limit is 20,000 tokens"), "{by_tokens}");
    }
}
