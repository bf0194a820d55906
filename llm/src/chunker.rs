//! Cuts streamed text into sentence-sized chunks, for consumers that want whole sentences as soon
//! as they are written (speech, incremental rendering) rather than arbitrary token deltas.

/// The longest chunk, in characters.
pub const MAX_CHUNK_CHARS: usize = 100;

/// Splits text that arrives in pieces into chunks of at most [`MAX_CHUNK_CHARS`] characters, cut
/// after sentences, each sent as soon as it is certain to be complete.
///
/// A sentence ends where a whitespace run follows `.`, `!`, `?` or `…`, possibly with closing
/// quotes or brackets in between (`"Done."`, `(Really?!)`), and where a whitespace run after some
/// text contains a newline; `3.14` or `example.com` do not end a sentence. The full-width
/// terminators `。！？` (and the half-width `｡`) end a sentence without whitespace after them, as
/// CJK text has none: the sentence ends before the first character after them that is neither
/// whitespace, a closer nor another terminator. The whitespace after a sentence belongs to that
/// sentence's chunk.
///
/// A sentence longer than the limit is cut after the last whitespace within it, or, for a word
/// longer than the limit, after exactly [`MAX_CHUNK_CHARS`] characters; when such a cut falls inside
/// a whitespace run, the rest of the run starts the next chunk. A chunk is whitespace only when it
/// is the last one or a run of [`MAX_CHUNK_CHARS`] whitespace characters. Chunks are never empty,
/// and their concatenation is exactly the text pushed: nothing is trimmed or normalised.
///
/// A sentence followed by whitespace is returned by the push that brings the whitespace, with as
/// much of the run as has arrived: a reader must not wait for what the writer has not written yet
/// (the model may pause, or call a tool, after a sentence). What comes later of that run starts the
/// next chunk, so the chunks depend on the pushes only where a push ends inside the whitespace
/// after a sentence. Anything else is held back until what follows it decides the cut, or until
/// [`finish`], which returns all of it: call it where the text pauses for good (the end of the
/// message, or before a tool call is reported).
///
/// [`finish`]: SentenceChunker::finish
#[derive(Debug, Default)]
pub struct SentenceChunker {
    pending: String,
}

impl SentenceChunker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a piece of text and returns the chunks it completed.
    pub fn push(&mut self, delta: &str) -> Vec<String> {
        self.pending.push_str(delta);
        self.take_chunks(false)
    }

    /// Returns the chunks of the text still held back, cut as if the text ended here; the chunker
    /// is then empty and can be reused (text pushed afterwards starts a new chunk).
    pub fn finish(&mut self) -> Vec<String> {
        self.take_chunks(true)
    }

    fn take_chunks(&mut self, at_end: bool) -> Vec<String> {
        let mut chunks = Vec::new();
        while let Some(cut) = next_cut(&self.pending, at_end) {
            chunks.push(self.pending.drain(..cut).collect());
        }
        chunks
    }
}

/// The byte offset where the first chunk of `text` ends, once that is decided; `at_end` says that
/// no more text will follow. Looks at no more than `MAX_CHUNK_CHARS + 1` characters.
fn next_cut(text: &str, at_end: bool) -> Option<usize> {
    // The last non-whitespace character ended a sentence, should whitespace follow.
    let mut sentence_ended = false;
    // The last non-whitespace character ended a sentence whatever follows (a full-width terminator,
    // or a closer or terminator after one).
    let mut sentence_ended_wide = false;
    // Inside a whitespace run that ends a sentence.
    let mut in_boundary = false;
    let mut seen_non_whitespace = false;
    // Just after the last whitespace character that follows some non-whitespace.
    let mut last_word_break = None;
    for (count, (offset, ch)) in text.char_indices().enumerate() {
        if !ch.is_whitespace() && (in_boundary || (sentence_ended_wide && !continues_sentence_end(ch))) {
            return Some(offset);
        }
        if count == MAX_CHUNK_CHARS {
            return Some(last_word_break.unwrap_or(offset));
        }
        if ch.is_whitespace() {
            in_boundary |= sentence_ended || (seen_non_whitespace && ch == '\n');
            if seen_non_whitespace {
                last_word_break = Some(offset + ch.len_utf8());
            }
        } else {
            seen_non_whitespace = true;
            sentence_ended_wide = is_wide_terminator(ch) || (sentence_ended_wide && continues_sentence_end(ch));
            sentence_ended = is_terminator(ch) || (sentence_ended && is_closer(ch));
        }
    }
    // Whitespace after a sentence makes it complete, however much more whitespace is to come.
    ((at_end || in_boundary) && !text.is_empty()).then_some(text.len())
}

fn is_terminator(ch: char) -> bool {
    matches!(ch, '.' | '!' | '?' | '…') || is_wide_terminator(ch)
}

/// Terminators that end a sentence with no whitespace after them.
fn is_wide_terminator(ch: char) -> bool {
    matches!(ch, '。' | '！' | '？' | '｡')
}

fn is_closer(ch: char) -> bool {
    matches!(ch, '"' | '\'' | ')' | ']' | '}' | '”' | '’' | '»' | '」' | '』')
}

/// Whether `ch` still belongs to the end of a sentence just ended (`」` in `完成。」`, `！` in `？！`).
fn continues_sentence_end(ch: char) -> bool {
    is_closer(ch) || is_terminator(ch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks_of(text: &str) -> Vec<String> {
        let mut chunker = SentenceChunker::new();
        let mut chunks = chunker.push(text);
        chunks.extend(chunker.finish());
        chunks
    }

    fn char_by_char(text: &str) -> Vec<String> {
        let mut chunker = SentenceChunker::new();
        let mut chunks = Vec::new();
        for ch in text.chars() {
            chunks.extend(chunker.push(ch.encode_utf8(&mut [0; 4])));
        }
        chunks.extend(chunker.finish());
        chunks
    }

    #[test]
    fn cuts_after_sentences_keeping_the_whitespace_with_the_sentence() {
        assert_eq!(
            chunks_of("Disk is full. Restart it! Why?  Because.\nNext line\n\n- item"),
            [
                "Disk is full. ",
                "Restart it! ",
                "Why?  ",
                "Because.\n",
                "Next line\n\n",
                "- item"
            ]
        );
    }

    #[test]
    fn punctuation_inside_words_and_closing_quotes() {
        assert_eq!(
            chunks_of("Pi is 3.14 on example.com today. He said \"done.\" (Really?!) Yes"),
            [
                "Pi is 3.14 on example.com today. ",
                "He said \"done.\" ",
                "(Really?!) ",
                "Yes"
            ]
        );
    }

    #[test]
    fn a_sentence_goes_out_with_the_whitespace_after_it() {
        let mut chunker = SentenceChunker::new();
        assert!(
            chunker.push("The database is down.").is_empty(),
            "3.14 or a closing quote may follow"
        );
        assert_eq!(
            chunker.push(" "),
            ["The database is down. "],
            "no need to wait for the next sentence"
        );
        assert!(chunker.push(" Failing").is_empty());
        assert_eq!(
            chunker.push(" over.\n"),
            [" Failing over.\n"],
            "the rest of the run starts the next chunk"
        );
        assert!(chunker.push("Done").is_empty());
        assert_eq!(chunker.finish(), ["Done"]);
        assert!(chunker.finish().is_empty());
    }

    #[test]
    fn finish_sends_what_is_held_back_and_the_text_goes_on_after_it() {
        let mut chunker = SentenceChunker::new();
        assert!(chunker.push("Let me look.").is_empty());
        assert_eq!(chunker.finish(), ["Let me look."], "before a tool call is reported");
        assert_eq!(chunker.push("Found it. "), ["Found it. "]);
        assert!(chunker.finish().is_empty());
    }

    #[test]
    fn full_width_terminators_end_a_sentence_without_whitespace() {
        let text = "数据库健康检查正常".repeat(28) + "。完成。";
        let chunks = chunks_of(&text);
        let lengths: Vec<usize> = chunks.iter().map(|chunk| chunk.chars().count()).collect();
        assert_eq!(lengths, [100, 100, 53, 3], "{chunks:?}");
        assert_eq!(chunks[3], "完成。");
        assert_eq!(chunks.concat(), text);

        assert_eq!(
            chunks_of("正常。」下一步？！好。 Next｡Done"),
            ["正常。」", "下一步？！", "好。 ", "Next｡", "Done"],
            "closers and further terminators stay with the sentence"
        );
        let mut chunker = SentenceChunker::new();
        assert!(chunker.push("完成。").is_empty(), "a closer may still follow");
        assert_eq!(chunker.push("下"), ["完成。"]);
    }

    #[test]
    fn multi_byte_text_is_cut_at_character_boundaries() {
        let text = "Grüße aus Köln! Ça marche très bien. 日本語のテキストです。 Ещё одно предложение? 🎉🎉 done";
        assert_eq!(
            chunks_of(text),
            [
                "Grüße aus Köln! ",
                "Ça marche très bien. ",
                "日本語のテキストです。 ",
                "Ещё одно предложение? ",
                "🎉🎉 done"
            ]
        );
        assert_eq!(char_by_char(text), chunks_of(text));
    }

    #[test]
    fn long_sentences_are_cut_at_word_boundaries() {
        let sentence = "word ".repeat(30) + "end.";
        let chunks = chunks_of(&sentence);
        assert_eq!(chunks, ["word ".repeat(20), "word ".repeat(10) + "end."]);
    }

    #[test]
    fn words_longer_than_the_limit_are_cut_after_exactly_the_limit() {
        let word = "é".repeat(250);
        let text = format!("Look: {word} ok");
        let chunks = chunks_of(&text);
        assert_eq!(
            chunks,
            [
                "Look: ".to_owned(),
                "é".repeat(100),
                "é".repeat(100),
                "é".repeat(50) + " ok"
            ]
        );
    }

    #[test]
    fn leading_whitespace_stays_with_the_text_after_it() {
        assert_eq!(chunks_of("\n\nHello. "), ["\n\nHello. "]);
        let text = format!("{}.{}Next.", "a".repeat(98), " \n".repeat(3));
        assert_eq!(chunks_of(&text), ["a".repeat(98) + ". ", "\n \n \nNext.".to_owned()]);
    }

    #[test]
    fn nothing_in_nothing_out() {
        assert!(chunks_of("").is_empty());
        let mut chunker = SentenceChunker::new();
        assert!(chunker.push("").is_empty());
        assert!(chunker.finish().is_empty());
    }

    /// xorshift64*: a small deterministic generator, so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }
    }

    fn generate(rng: &mut Rng) -> String {
        const WORDS: &[&str] = &[
            "disk",
            "Grüße",
            "日本語",
            "🎉",
            "a",
            "3.14",
            "example.com",
            "naïve",
            "Ж",
        ];
        const PUNCTUATION: &[&str] = &[
            ".", "!", "?", "...", "…", "\"", ")", ".\"", "?!", "。", "！", "？", "」", ",",
        ];
        const SPACES: &[&str] = &[" ", " ", " ", "  ", "\n", "\n\n", "\t", " \n ", "\u{a0}"];
        let mut text = String::new();
        for _ in 0..rng.below(120) {
            match rng.below(10) {
                0..=4 => text.push_str(rng.pick(WORDS)),
                5 | 6 => text.push_str(rng.pick(SPACES)),
                7 | 8 => text.push_str(rng.pick(PUNCTUATION)),
                _ => {
                    let piece = rng.pick(&["x", "ü", "字", " "]);
                    text.push_str(&piece.repeat(rng.below(230)));
                }
            }
        }
        text
    }

    /// Splits `text` at random character boundaries.
    fn random_pieces<'a>(rng: &mut Rng, text: &'a str) -> Vec<&'a str> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let chars = 1 + rng.below(12);
            let cut = rest.char_indices().nth(chars).map_or(rest.len(), |(offset, _)| offset);
            let (piece, tail) = rest.split_at(cut);
            pieces.push(piece);
            rest = tail;
        }
        pieces
    }

    /// Whether `chunk[..offset]` ends a sentence right before `offset`, decided independently of
    /// `next_cut`'s state machine.
    fn sentence_ends_before(chunk: &str, offset: usize) -> bool {
        let (before, after) = chunk.split_at(offset);
        let Some(next) = after.chars().next() else { return false };
        let words = before.trim_end();
        let run = &before[words.len()..];
        if next.is_whitespace() || words.is_empty() {
            return false;
        }
        if run.is_empty() {
            return !continues_sentence_end(next)
                && words
                    .chars()
                    .rev()
                    .take_while(|&ch| continues_sentence_end(ch))
                    .any(is_wide_terminator);
        }
        run.contains('\n') || words.trim_end_matches(is_closer).ends_with(is_terminator)
    }

    /// The rules every chunking of `text` follows, however it was pushed.
    fn assert_well_cut(case: usize, text: &str, chunks: &[String]) {
        assert_eq!(chunks.concat(), text, "case {case}");
        for (position, chunk) in chunks.iter().enumerate() {
            let chars = chunk.chars().count();
            assert!((1..=MAX_CHUNK_CHARS).contains(&chars), "case {case}: {chunk:?}");
            let last = position + 1 == chunks.len();
            let next_start = chunks.get(position + 1).and_then(|next| next.chars().next());
            let at_sentence_end = chunk.ends_with(char::is_whitespace)
                || next_start.is_some_and(|next| sentence_ends_before(&format!("{chunk}{next}"), chunk.len()));
            if !last && !at_sentence_end {
                assert!(
                    chars == MAX_CHUNK_CHARS && !chunk.trim_start().contains(char::is_whitespace),
                    "case {case}: {chunk:?} is cut inside a word although it has a word break"
                );
            }
            for (offset, _) in chunk.char_indices().skip(1) {
                assert!(
                    !sentence_ends_before(chunk, offset),
                    "case {case}: {chunk:?} holds a sentence end at byte {offset}"
                );
            }
        }
    }

    fn streamed(pieces: &[&str]) -> Vec<String> {
        let mut chunker = SentenceChunker::new();
        let mut chunks = Vec::new();
        for piece in pieces {
            chunks.extend(chunker.push(piece));
        }
        chunks.extend(chunker.finish());
        chunks
    }

    #[test]
    fn properties_hold_for_generated_texts_and_any_split() {
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        for case in 0..1000 {
            let text = generate(&mut rng);
            let whole = chunks_of(&text);
            assert_well_cut(case, &text, &whole);
            for (position, chunk) in whole.iter().enumerate() {
                if position + 1 < whole.len() && chunk.trim().is_empty() {
                    assert_eq!(
                        chunk.chars().count(),
                        MAX_CHUNK_CHARS,
                        "case {case}: whitespace-only chunk {chunk:?}"
                    );
                }
            }

            let pieces = random_pieces(&mut rng, &text);
            assert_well_cut(case, &text, &streamed(&pieces));

            // Only a push that ends inside a whitespace run can change where the chunks are cut.
            let mut joined: Vec<String> = Vec::new();
            for piece in pieces {
                match joined.last_mut() {
                    Some(last) if last.ends_with(char::is_whitespace) && piece.starts_with(char::is_whitespace) => {
                        last.push_str(piece)
                    }
                    _ => joined.push(piece.to_owned()),
                }
            }
            let joined: Vec<&str> = joined.iter().map(String::as_str).collect();
            assert_eq!(
                streamed(&joined),
                whole,
                "case {case}: chunks depend on the split of {text:?}"
            );
        }
    }
}
