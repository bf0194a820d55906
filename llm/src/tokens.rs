//! Token counts, for budgets and limits before a request is sent.

/// The most tokens a user message may have.
pub const MAX_USER_MESSAGE_TOKENS: usize = 20_000;

/// The number of tokens in `text` under `o200k_base`, the encoding of the GPT-4o, GPT-4.1, GPT-5 and
/// o-series models; for other models it is an estimate. Special-token text such as
/// `<|endoftext|>` counts as ordinary text, as it does in a user's message.
///
/// The vocabulary ships inside `tiktoken-rs` and is loaded once, on first use, into its `LazyLock`
/// singleton; the first call takes a moment (about a second in debug builds).
pub fn count_tokens(text: &str) -> usize {
    tiktoken_rs::o200k_base_singleton().encode_ordinary(text).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_o200k_tokens() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("hello world"), 2);
        assert!(count_tokens("<|endoftext|>") > 1, "special tokens are counted as text");
        // 7 under cl100k_base: the encoding is o200k_base.
        assert_eq!(count_tokens("Grüße 日本語"), 5);
    }
}
