//! Tags (`key:value`, or bare) as Datadog-like senders write them, and labels made of them.

use serde_json::{Map, Value};

/// One `key:value` tag; a bare tag such as `monitor` has an empty value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tag {
    pub(super) key: String,
    pub(super) value: String,
}

/// Tags from a comma-separated `"k:v, k:v"` string.
pub(super) fn parse_tag_text(text: &str) -> Vec<Tag> {
    text.split(',').filter_map(parse_tag).collect()
}

fn parse_tag(item: &str) -> Option<Tag> {
    // An APM's imported tags carry their origin first: `[Kubernetes]app:search-api`.
    let item = item.trim();
    let item = match item.strip_prefix('[').and_then(|rest| rest.split_once(']')) {
        Some((_context, tag)) => tag,
        None => item,
    };
    let (key, value) = item.split_once(':').unwrap_or((item, ""));
    let key = key.trim();
    (!key.is_empty()).then(|| Tag {
        key: key.to_owned(),
        value: value.trim().to_owned(),
    })
}

/// The value of the first tag named `key` (case-insensitively) that has a value.
pub(super) fn find_tag(tags: &[Tag], key: &str) -> Option<String> {
    tags.iter()
        .find(|tag| tag.key.eq_ignore_ascii_case(key) && !tag.value.is_empty())
        .map(|tag| tag.value.clone())
}

/// Labels from `(name, text)` pairs, leaving out the texts a payload did not carry.
pub(super) fn present_labels<const N: usize>(pairs: [(&str, Option<String>); N]) -> Map<String, Value> {
    pairs
        .into_iter()
        .filter_map(|(name, text)| Some((name.to_owned(), Value::String(text?))))
        .collect()
}

pub(super) fn tags_to_labels(tags: &[Tag]) -> Map<String, Value> {
    tags.iter()
        .map(|tag| (tag.key.clone(), Value::String(tag.value.clone())))
        .collect()
}
