//! The model's answer format: prose for the on-call engineer, ending in a fenced JSON block
//!
//! ```json
//! {"verdict": "LIKELY", "component": "inventory-service", "evidence": ["E1", "E3", "2"]}
//! ```
//!
//! `evidence` cites the ledger's numbered items (`E1`, `E2`, ...) and the read-only tools'
//! numbered results (`1`, `2`, ...; brackets allowed: `"[E1]"`, `"[2]"`). Parsing never fails: a
//! missing or garbled block is an answer that claims and cites nothing.

use serde_json::Value;

use crate::ledger::Verdict;

/// Something the model may cite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reference {
    /// A ledger evidence item, `E<n>` (1-based).
    Ledger(usize),
    /// A tool result, `<n>` (1-based, in the order the tools ran).
    Tool(usize),
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ledger(n) => write!(f, "E{n}"),
            Self::Tool(n) => write!(f, "{n}"),
        }
    }
}

/// The verdict block of an answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelAnswer {
    /// `None` when absent or not one of the three verdicts.
    pub verdict: Option<Verdict>,
    pub component: Option<String>,
    /// Deduplicated, in the order written; not yet checked against what exists.
    pub evidence: Vec<Reference>,
}

/// Splits an answer into its prose (the verdict block removed) and its verdict block, if one
/// parses: the last fenced block holding a JSON object with a `verdict` key, else the last such
/// bare object.
pub fn parse(text: &str) -> (String, Option<ModelAnswer>) {
    let found = fenced_blocks(text)
        .into_iter()
        .rev()
        .find_map(|(span, body)| verdict_object(body).map(|object| (span, object)))
        .or_else(|| bare_object(text));
    match found {
        Some((span, object)) => {
            let prose = format!("{}{}", &text[..span.start], &text[span.end..]);
            (prose.trim().to_owned(), Some(answer_of(&object)))
        }
        None => (text.trim().to_owned(), None),
    }
}

/// Fenced blocks as (the span of the whole fence, its body).
fn fenced_blocks(text: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let mut blocks = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find("```").map(|i| from + i) {
        // The info string (`json`) runs to the end of the opening line.
        let body_start = text[open + 3..].find('\n').map_or(text.len(), |i| open + 3 + i + 1);
        let Some(close) = text[body_start..].find("```").map(|i| body_start + i) else {
            break;
        };
        blocks.push((open..close + 3, &text[body_start..close]));
        from = close + 3;
    }
    blocks
}

fn verdict_object(body: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    value.get("verdict").is_some().then_some(value)
}

/// The last bare `{...}` with a `verdict` key (a model that forgot the fence). Only the last few
/// candidates are tried, so a long answer full of braces costs little.
fn bare_object(text: &str) -> Option<(std::ops::Range<usize>, Value)> {
    text.match_indices('{').rev().take(16).find_map(|(start, _)| {
        let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        let value = values.next()?.ok()?;
        let end = start + values.byte_offset();
        value.get("verdict").is_some().then_some((start..end, value))
    })
}

fn answer_of(object: &Value) -> ModelAnswer {
    let verdict = object.get("verdict").and_then(Value::as_str).and_then(|text| {
        match text
            .trim()
            .trim_matches(|c: char| !c.is_alphabetic())
            .to_uppercase()
            .as_str()
        {
            "CONFIRMED" => Some(Verdict::Confirmed),
            "LIKELY" => Some(Verdict::Likely),
            "INCONCLUSIVE" => Some(Verdict::Inconclusive),
            _ => None,
        }
    });
    let component = object
        .get("component")
        .and_then(Value::as_str)
        .map(|c| c.trim().trim_matches(['`', '"', '\'']).trim().to_owned())
        .filter(|c| !c.is_empty() && !matches!(c.to_lowercase().as_str(), "null" | "none" | "unknown" | "n/a"));
    let mut evidence = Vec::new();
    let mut add = |reference: Reference| {
        if !evidence.contains(&reference) {
            evidence.push(reference);
        }
    };
    match object.get("evidence") {
        Some(Value::Array(items)) => {
            for item in items {
                match item {
                    Value::String(text) => references(text).into_iter().for_each(&mut add),
                    Value::Number(n) => n
                        .as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .map(Reference::Tool)
                        .into_iter()
                        .for_each(&mut add),
                    _ => {}
                }
            }
        }
        Some(Value::String(text)) => references(text).into_iter().for_each(&mut add),
        _ => {}
    }
    ModelAnswer {
        verdict,
        component,
        evidence,
    }
}

/// The references in one evidence entry: the whole entry (`E2`, `[3]`, `e2`), else every
/// bracketed one in it (`"[E2] disk full, see [3]"`). Numbers outside brackets in free text
/// (`95% full`) are not references.
fn references(text: &str) -> Vec<Reference> {
    if let Some(reference) = reference(text.trim()) {
        return vec![reference];
    }
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        out.extend(reference(&after[..close]));
        rest = &after[close..];
    }
    out
}

fn reference(token: &str) -> Option<Reference> {
    let token = token.trim().trim_start_matches('[').trim_end_matches(']').trim();
    let (ledger, digits) = match token.strip_prefix(['E', 'e']) {
        Some(digits) => (true, digits),
        None => (false, token),
    };
    if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: usize = digits.parse().ok()?;
    Some(if ledger {
        Reference::Ledger(n)
    } else {
        Reference::Tool(n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_block_at_the_end_is_read_and_removed_from_the_prose() {
        let text = "The disk of db-03 is full [E1], confirmed by [2].\n\n```json\n{\"verdict\": \"likely\", \
                    \"component\": \"`db-03`\", \"evidence\": [\"[E1]\", \"2\", 2, \"E1\"]}\n```\n";
        let (prose, answer) = parse(text);
        assert_eq!(prose, "The disk of db-03 is full [E1], confirmed by [2].");
        let answer = answer.unwrap();
        assert_eq!(answer.verdict, Some(Verdict::Likely));
        assert_eq!(answer.component.as_deref(), Some("db-03"));
        assert_eq!(answer.evidence, vec![Reference::Ledger(1), Reference::Tool(2)]);
    }

    #[test]
    fn the_last_block_with_a_verdict_wins_and_other_code_stays_in_the_prose() {
        let text = "Run:\n```sh\nkubectl get pods\n```\n```json\n{\"verdict\":\"CONFIRMED\",\"component\":\"a\",\
                    \"evidence\":[\"E1\"]}\n```\nthen\n```json\n{\"verdict\":\"INCONCLUSIVE\",\"evidence\":\"[3] and [E2]\"}\n```";
        let (prose, answer) = parse(text);
        assert!(
            prose.contains("kubectl get pods") && prose.contains("CONFIRMED"),
            "{prose}"
        );
        let answer = answer.unwrap();
        assert_eq!(answer.verdict, Some(Verdict::Inconclusive));
        assert_eq!(answer.component, None);
        assert_eq!(answer.evidence, vec![Reference::Tool(3), Reference::Ledger(2)]);
    }

    #[test]
    fn a_bare_object_is_read_when_the_fence_is_missing() {
        let (prose, answer) = parse(
            "Cause: redis. {\"verdict\": \"CONFIRMED\", \"component\": \"redis\", \"evidence\": [\"E4\"]} Thanks",
        );
        assert_eq!(prose, "Cause: redis.  Thanks");
        assert_eq!(answer.unwrap().evidence, vec![Reference::Ledger(4)]);
    }

    #[test]
    fn garbled_or_missing_blocks_claim_and_cite_nothing() {
        for text in [
            "Most likely cause: the database pool is exhausted.",
            "```json\n{\"verdict\": \"LIKELY\", \"component\": \n```",
            "{ not json } {also not}",
            "```json\n[\"E1\"]\n```",
            "```json\n{\"verdict\": \"LIKELY\"",
        ] {
            let (prose, answer) = parse(text);
            assert_eq!(answer, None, "{text}");
            assert_eq!(prose, text.trim());
        }
        let (_, answer) = parse("```json\n{\"verdict\": \"PROBABLY\", \"component\": \"null\", \"evidence\": [\"the disk is 95% full\", {}, -1]}\n```");
        assert_eq!(answer, Some(ModelAnswer::default()));
    }

    #[test]
    fn references_are_whole_entries_or_bracketed() {
        assert_eq!(references(" e12 "), vec![Reference::Ledger(12)]);
        assert_eq!(references("[7]"), vec![Reference::Tool(7)]);
        assert_eq!(references("see [E1], [x] and [2"), vec![Reference::Ledger(1)]);
        assert!(references("E").is_empty() && references("[]").is_empty() && references("99999999999").is_empty());
    }
}
