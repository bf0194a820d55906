//! Spec Message: "When a stored message holds images as data URLs, retrieval splits the data URL:
//! images go to `images`, text stays in `text`."

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{json, Value};
use vigil_aggregates::chat_session::Message;

/// A `data:image/...;base64,...` URL, alone or as the target of a markdown image `![alt](...)`.
/// The scheme, the media type and `base64` are case-insensitive (RFC 2397); the data is not.
static DATA_URL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:!\[[^\]]*\]\()?(?i:data:(image/[a-z0-9.+-]+);base64,)([A-Za-z0-9+/]+=*)\)?")
        .expect("valid data URL pattern")
});

/// A whole `images` entry that is one data URL.
static WHOLE_DATA_URL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?i:data:(image/[a-z0-9.+-]+);base64,)([A-Za-z0-9+/]+=*)$").expect("valid data URL pattern")
});

/// Moves inline data-URL images of `message.text` into `message.images` (`displayData`, `type`,
/// `data`, `name` = `image_<n>.<ext>`, numbered after any images it already has). Entries of
/// `images` stored as a bare data URL, or with only their `displayData`, are split the same way.
pub fn split_inline_images(mut message: Message) -> Message {
    if let Some(images) = &mut message.images {
        for (index, entry) in images.iter_mut().enumerate() {
            complete_image_entry(entry, index + 1);
        }
    }
    if !DATA_URL.is_match(&message.text) {
        return message;
    }
    let mut images = message.images.take().unwrap_or_default();
    let mut text = String::with_capacity(message.text.len());
    let mut last_end = 0;
    for found in DATA_URL.captures_iter(&message.text) {
        let whole = found.get(0).expect("group 0 always matches");
        let (mime, data) = (found[1].to_ascii_lowercase(), &found[2]);
        // A lone trailing `)` belongs to the URL only when the markdown `![..](` opened it.
        let consumed_paren = whole.as_str().ends_with(')') && !whole.as_str().starts_with("![");
        let end = if consumed_paren { whole.end() - 1 } else { whole.end() };
        text.push_str(&message.text[last_end..whole.start()]);
        last_end = end;
        images.push(json!({
            "displayData": format!("data:{mime};base64,{data}"),
            "type": mime,
            "data": data,
            "name": format!("image_{}.{}", images.len() + 1, extension(&mime)),
        }));
    }
    text.push_str(&message.text[last_end..]);
    message.text = text.trim().to_owned();
    message.images = Some(images).filter(|images: &Vec<Value>| !images.is_empty());
    message
}

/// Fills in `type`, `data` and `name` of an image given as a data URL (the entry itself, or its
/// `displayData`), keeping whatever the entry already says.
fn complete_image_entry(entry: &mut Value, number: usize) {
    let url = match entry {
        Value::String(url) => url.clone(),
        Value::Object(fields) => match fields.get("displayData") {
            Some(Value::String(url)) => url.clone(),
            _ => return,
        },
        _ => return,
    };
    let Some(found) = WHOLE_DATA_URL.captures(&url) else {
        return;
    };
    let (mime, data) = (found[1].to_ascii_lowercase(), &found[2]);
    if entry.is_string() {
        *entry = json!({ "displayData": url });
    }
    let fields = entry.as_object_mut().expect("made an object above");
    fields.entry("type").or_insert_with(|| json!(mime));
    fields.entry("data").or_insert_with(|| json!(data));
    fields
        .entry("name")
        .or_insert_with(|| json!(format!("image_{number}.{}", extension(&mime))));
}

fn extension(mime: &str) -> &str {
    let subtype = mime.split('/').nth(1).unwrap_or("bin");
    match subtype {
        "jpeg" => "jpg",
        "svg+xml" => "svg",
        other => other.split('+').next().unwrap_or(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_a_markdown_image_out_of_the_text() {
        let message = Message::user("Look at this graph ![chart](data:image/png;base64,iVBORw0KGgo=) why the spike?");
        let split = split_inline_images(message);
        assert_eq!(split.text, "Look at this graph  why the spike?");
        assert_eq!(
            split.images.unwrap(),
            vec![json!({
                "displayData": "data:image/png;base64,iVBORw0KGgo=",
                "type": "image/png",
                "data": "iVBORw0KGgo=",
                "name": "image_1.png",
            })]
        );
    }

    #[test]
    fn data_url_prefix_is_case_insensitive_and_its_data_is_kept_as_sent() {
        let split = split_inline_images(Message::user("pre DATA:IMAGE/PNG;BASE64,iVBORw0KGgo= post"));
        assert_eq!(split.text, "pre  post");
        assert_eq!(
            split.images.unwrap(),
            vec![json!({
                "displayData": "data:image/png;base64,iVBORw0KGgo=",
                "type": "image/png",
                "data": "iVBORw0KGgo=",
                "name": "image_1.png",
            })]
        );
    }

    #[test]
    fn splits_bare_data_urls_and_numbers_them() {
        let message = Message::user("data:image/jpeg;base64,/9j/4AAQ and data:image/webp;base64,UklGRg==");
        let split = split_inline_images(message);
        assert_eq!(split.text, "and");
        let names: Vec<_> = split
            .images
            .unwrap()
            .iter()
            .map(|image| image["name"].clone())
            .collect();
        assert_eq!(names, [json!("image_1.jpg"), json!("image_2.webp")]);
    }

    #[test]
    fn completes_images_stored_as_data_urls() {
        let mut message = Message::user("two charts");
        message.images = Some(vec![
            json!({ "displayData": "data:image/png;base64,iVBORw0KGgo=" }),
            json!("data:image/jpeg;base64,/9j/4AAQ"),
            json!({ "displayData": "data:image/gif;base64,R0lGOD", "name": "latency.gif" }),
            json!({ "displayData": "https://example.com/chart.png" }),
        ]);
        let split = split_inline_images(message);
        assert_eq!(split.text, "two charts");
        assert_eq!(
            split.images.unwrap(),
            vec![
                json!({
                    "displayData": "data:image/png;base64,iVBORw0KGgo=",
                    "type": "image/png",
                    "data": "iVBORw0KGgo=",
                    "name": "image_1.png",
                }),
                json!({
                    "displayData": "data:image/jpeg;base64,/9j/4AAQ",
                    "type": "image/jpeg",
                    "data": "/9j/4AAQ",
                    "name": "image_2.jpg",
                }),
                json!({
                    "displayData": "data:image/gif;base64,R0lGOD",
                    "type": "image/gif",
                    "data": "R0lGOD",
                    "name": "latency.gif",
                }),
                json!({ "displayData": "https://example.com/chart.png" }),
            ]
        );
    }

    #[test]
    fn keeps_existing_images_and_plain_text() {
        let mut message = Message::user("(see data:image/gif;base64,R0lGOD)");
        message.images = Some(vec![json!({ "name": "image_1.png" })]);
        let split = split_inline_images(message);
        assert_eq!(split.text, "(see )");
        let images = split.images.unwrap();
        assert_eq!(images.len(), 2);
        assert_eq!(images[1]["name"], "image_2.gif");

        let plain = split_inline_images(Message::assistant("no images here"));
        assert_eq!(plain, Message::assistant("no images here"));
    }
}
