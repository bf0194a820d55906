//! Files sent with a chat query: checked (type, base64, size, server paths confined to the data
//! directory) before anything else happens, then turned into image parts for the model and image
//! entries for the stored message.

use std::path::{Component, Path};

use base64::Engine as _;
use serde_json::{json, Value};
use vigil_llm::ContentPart;

use crate::ws::protocol::Attachment;

const IMAGE_TYPES: &[(&str, &str)] = &[
    ("image/png", "png"),
    ("image/jpeg", "jpg"),
    ("image/gif", "gif"),
    ("image/webp", "webp"),
];
const DOCUMENT_TYPES: &[&str] = &["application/pdf", "application/zip", "application/x-zip-compressed"];

/// An attachment that passed every check.
#[derive(Debug)]
pub struct Accepted {
    pub filename: String,
    pub mime_type: String,
    pub bytes: Vec<u8>,
}

impl Accepted {
    pub fn is_image(&self) -> bool {
        IMAGE_TYPES.iter().any(|(mime, _)| *mime == self.mime_type)
    }

    /// The part the model sees: the image itself, or a line naming a document it cannot read.
    pub fn content_part(&self) -> ContentPart {
        if self.is_image() {
            ContentPart::image(&self.mime_type, &self.bytes)
        } else {
            ContentPart::Text(format!(
                "[attached file {} ({}, {} bytes)]",
                self.filename,
                self.mime_type,
                self.bytes.len()
            ))
        }
    }
}

/// The stored message's `images` entries (spec Message), numbered from 1.
pub fn image_entries(accepted: &[Accepted]) -> Vec<Value> {
    accepted
        .iter()
        .filter(|file| file.is_image())
        .enumerate()
        .map(|(index, file)| {
            let extension = IMAGE_TYPES
                .iter()
                .find(|(mime, _)| *mime == file.mime_type)
                .map_or("bin", |(_, extension)| *extension);
            let data = base64::engine::general_purpose::STANDARD.encode(&file.bytes);
            json!({
                "displayData": format!("data:{};base64,{data}", file.mime_type),
                "type": file.mime_type,
                "data": data,
                "name": format!("image_{}.{extension}", index + 1),
            })
        })
        .collect()
}

/// Checks every attachment; the first problem rejects the query with a message naming the file.
/// A server path is read from under `files_dir` only.
pub fn accept(attachments: &[Attachment], files_dir: &Path, max_bytes: usize) -> Result<Vec<Accepted>, String> {
    attachments
        .iter()
        .map(|attachment| accept_one(attachment, files_dir, max_bytes))
        .collect()
}

fn accept_one(attachment: &Attachment, files_dir: &Path, max_bytes: usize) -> Result<Accepted, String> {
    let name = attachment.filename.trim();
    if name.is_empty() {
        return Err("every attachment needs a filename".into());
    }
    let mime_type = attachment.file_type.trim().to_ascii_lowercase();
    let known = IMAGE_TYPES.iter().any(|(mime, _)| *mime == mime_type) || DOCUMENT_TYPES.contains(&mime_type.as_str());
    if !known {
        return Err(format!(
            "attachment {name}: type {mime_type:?} is not accepted; send PNG, JPEG, GIF, WebP, PDF or ZIP"
        ));
    }
    let bytes = if attachment.is_server_path {
        let path = attachment.server_path.as_deref().unwrap_or(&attachment.file_data);
        read_server_file(name, path, files_dir, max_bytes)?
    } else {
        // Decoded size is about three quarters of the encoded one: refuse early what cannot fit.
        if attachment.file_data.len() / 4 * 3 > max_bytes + 3 {
            return Err(too_large(name, max_bytes));
        }
        base64::engine::general_purpose::STANDARD
            .decode(attachment.file_data.trim())
            .map_err(|_| format!("attachment {name}: file_data is not valid base64 (send it without a data: prefix)"))?
    };
    if bytes.len() > max_bytes {
        return Err(too_large(name, max_bytes));
    }
    Ok(Accepted {
        filename: name.to_owned(),
        mime_type,
        bytes,
    })
}

fn too_large(name: &str, max_bytes: usize) -> String {
    format!("attachment {name} is larger than the {} KiB limit", max_bytes / 1024)
}

/// Reads a file the server stored earlier, from a relative path under `files_dir` only.
fn read_server_file(name: &str, path: &str, files_dir: &Path, max_bytes: usize) -> Result<Vec<u8>, String> {
    let relative = Path::new(path);
    let confined = relative
        .components()
        .all(|component| matches!(component, Component::Normal(_) | Component::CurDir));
    if path.is_empty() || !confined {
        return Err(format!(
            "attachment {name}: server_path must be a relative path inside this session's directory"
        ));
    }
    let root = files_dir
        .canonicalize()
        .map_err(|_| format!("attachment {name}: the file is not on the server"))?;
    // Canonicalizing again catches symbolic links that point outside.
    let full = root
        .join(relative)
        .canonicalize()
        .map_err(|_| format!("attachment {name}: the file is not on the server"))?;
    if !full.starts_with(&root) {
        return Err(format!(
            "attachment {name}: server_path leaves this session's directory"
        ));
    }
    let metadata = std::fs::metadata(&full).map_err(|_| format!("attachment {name}: the file is not on the server"))?;
    if !metadata.is_file() {
        return Err(format!("attachment {name}: server_path is not a file"));
    }
    if metadata.len() > max_bytes as u64 {
        return Err(too_large(name, max_bytes));
    }
    std::fs::read(&full).map_err(|error| format!("attachment {name}: cannot be read: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment(file_type: &str, file_data: &str) -> Attachment {
        Attachment {
            filename: "shot.png".into(),
            file_type: file_type.into(),
            file_data: file_data.into(),
            is_server_path: false,
            server_path: None,
        }
    }

    fn server_file(path: &str) -> Attachment {
        Attachment {
            filename: "logs.zip".into(),
            file_type: "application/zip".into(),
            file_data: String::new(),
            is_server_path: true,
            server_path: Some(path.into()),
        }
    }

    #[test]
    fn images_become_parts_and_numbered_entries() {
        let accepted = accept(&[attachment("image/png", "iVBORw0KGgo=")], Path::new("."), 1024).unwrap();
        assert!(matches!(accepted[0].content_part(), ContentPart::Image { .. }));
        let entries = image_entries(&accepted);
        assert_eq!(entries[0]["name"], "image_1.png");
        assert_eq!(entries[0]["displayData"], "data:image/png;base64,iVBORw0KGgo=");
    }

    #[test]
    fn type_encoding_and_size_are_checked() {
        let dir = Path::new(".");
        assert!(accept(&[attachment("text/html", "aGk=")], dir, 1024)
            .unwrap_err()
            .contains("not accepted"));
        assert!(accept(&[attachment("image/png", "not base64!")], dir, 1024)
            .unwrap_err()
            .contains("base64"));
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 2048]);
        assert!(accept(&[attachment("image/png", &big)], dir, 1024)
            .unwrap_err()
            .contains("limit"));
    }

    #[test]
    fn server_paths_stay_inside_the_data_directory() {
        let dir = std::env::temp_dir().join(format!("vigil-attach-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("uploads")).unwrap();
        std::fs::write(dir.join("uploads/logs.zip"), b"PK").unwrap();
        assert_eq!(
            accept(&[server_file("uploads/logs.zip")], &dir, 1024).unwrap()[0].bytes,
            b"PK"
        );
        for escaping in ["../etc/passwd", "/etc/passwd", "uploads/../../x"] {
            assert!(accept(&[server_file(escaping)], &dir, 1024).is_err(), "{escaping}");
        }
        #[cfg(unix)]
        {
            let outside = std::env::temp_dir().join(format!("vigil-outside-{}", uuid::Uuid::new_v4()));
            std::fs::write(&outside, b"secret").unwrap();
            std::os::unix::fs::symlink(&outside, dir.join("uploads/link")).unwrap();
            assert!(accept(&[server_file("uploads/link")], &dir, 1024)
                .unwrap_err()
                .contains("leaves"));
            std::fs::remove_file(&outside).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
