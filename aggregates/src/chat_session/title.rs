//! Title generation (spec Endpoints → "Title generation rules").

use super::message::{Message, Sender};

pub const DEFAULT_TITLE: &str = "New Chat";
pub const GENERATED_TITLE_CHARS: usize = 50;

/// The first 50 characters of the first user message, cut back to the last complete word, with
/// `...` appended only when something was cut; `New Chat` when there is no user message.
/// Runs of white space (new lines included) count as one space; inline base64 images are left out.
pub fn generate_title(messages: &[Message]) -> String {
    let Some(first) = messages.iter().find(|message| message.sender == Sender::User) else {
        return DEFAULT_TITLE.to_owned();
    };
    let text = first
        .text
        .split_whitespace()
        .filter(|word| !word.contains(";base64,"))
        .collect::<Vec<_>>()
        .join(" ");
    if text.is_empty() {
        return DEFAULT_TITLE.to_owned();
    }
    if text.chars().count() <= GENERATED_TITLE_CHARS {
        return text;
    }
    let cut_at = text
        .char_indices()
        .nth(GENERATED_TITLE_CHARS)
        .map_or(text.len(), |(index, _)| index);
    let (head, rest) = text.split_at(cut_at);
    let whole_words = if rest.starts_with(' ') {
        head
    } else {
        // The 50th character is inside a word: drop that word, unless it is the only one.
        head.rfind(' ').map_or(head, |space| &head[..space])
    };
    format!("{}...", whole_words.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn title_of(text: &str) -> String {
        generate_title(&[Message::user(text)])
    }

    #[test]
    fn table() {
        let forty_nine = "a".repeat(44) + " bcde"; // 49 characters
        let fifty = "a".repeat(45) + " bcde"; // 50
        let fifty_one_on_a_boundary = "a".repeat(45) + " bcde f"; // 52, word ends at 50
        let word_crossing_fiftieth = "a".repeat(40) + " bcdefghijklmn"; // "bcdef..." spans chars 42..54
        let cases: Vec<(String, String)> = vec![
            (forty_nine.clone(), forty_nine),
            (fifty.clone(), fifty.clone()),
            (fifty.clone() + "x", "a".repeat(45) + "..."),
            (fifty_one_on_a_boundary, "a".repeat(45) + " bcde..."),
            (word_crossing_fiftieth, "a".repeat(40) + "..."),
            ("x".repeat(60), "x".repeat(50) + "..."),
            (
                "  How do I\nrestart   the pod?  ".into(),
                "How do I restart the pod?".into(),
            ),
            ("".into(), DEFAULT_TITLE.into()),
            ("   \n ".into(), DEFAULT_TITLE.into()),
            ("é".repeat(51), "é".repeat(50) + "..."),
            (
                "Why? ![x](data:image/png;base64,iVBORw0KGgo=) see".into(),
                "Why? see".into(),
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(title_of(&text), expected, "title of {text:?}");
        }
    }

    #[test]
    fn uses_the_first_user_message() {
        let messages = [
            Message::assistant("Hello, how can I help?"),
            Message::user("Why is checkout slow?"),
        ];
        assert_eq!(generate_title(&messages), "Why is checkout slow?");
        assert_eq!(generate_title(&[Message::assistant("only me")]), DEFAULT_TITLE);
        assert_eq!(generate_title(&[]), DEFAULT_TITLE);
    }
}
