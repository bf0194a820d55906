//! Evidence as quoted: the failures an alert's texts show, each with the words around it.

use super::{signatures, AlertRecord, Finding};

/// Characters quoted on each side of a matched phrase.
const EXCERPT_CONTEXT: usize = 90;

/// The failures an alert's texts show, each quoted around its phrase. Where several fields show
/// one failure, the longest quote is kept: a description says more than an alert's name.
pub(super) fn findings(index: usize, alert: &AlertRecord) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for (field, text) in &alert.texts {
        for (signature, range) in signatures::matches(text) {
            let finding = Finding {
                alert: Some(index),
                source: alert.service.clone().unwrap_or_else(|| alert.title.clone()),
                field: field.clone(),
                excerpt: excerpt(text, range),
                signature: Some(signature.id.to_owned()),
            };
            match out.iter_mut().find(|f| f.signature == finding.signature) {
                Some(kept) if kept.excerpt.len() < finding.excerpt.len() => *kept = finding,
                Some(_) => {}
                None => out.push(finding),
            }
        }
    }
    out
}

/// The text around `range`, cut at character boundaries, with an ellipsis where it is cut.
pub(super) fn excerpt(text: &str, range: std::ops::Range<usize>) -> String {
    let mut start = range.start.saturating_sub(EXCERPT_CONTEXT);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (range.end + EXCERPT_CONTEXT).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let inner = text[start..end].split_whitespace().collect::<Vec<_>>().join(" ");
    format!(
        "{}{inner}{}",
        if start > 0 { "…" } else { "" },
        if end < text.len() { "…" } else { "" }
    )
}

pub(super) fn shortened(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
