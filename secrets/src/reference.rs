//! Secret names and the references the database keeps instead of credentials.

use std::fmt;
use std::str::FromStr;

/// The versioned key-value API path every reference carries after its prefix.
const KV_DATA: &str = "kv/data/";

#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("not a secret reference (expected <prefix>:kv/data/<mount>/<base_path>/<name>): {0:?}")]
    Malformed(String),
    #[error("invalid secret path {0:?}: segments must be non-empty, use [A-Za-z0-9._-] and not be `.` or `..`")]
    InvalidPath(String),
}

/// The name of a user's secret for one provider: `<env>-<user_id>-<provider>-token`.
///
/// Each part is escaped so a reference cannot leave its base path: bytes outside
/// `[A-Za-z0-9_-]` (among them `/`, `.`, `~`) become `~XX`. The escaping is injective, so two
/// different user ids never share a secret.
///
/// A user id whose escaped form exceeds [`MAX_ESCAPED_USER_ID`] is named by `~H` and its SHA-256
/// instead (a user id may be 255 bytes, each escaped to three characters, and a reference has to
/// fit its 512-character column); `~H` is no escape, so it never meets an escaped id.
pub fn secret_name(env: &str, user_id: &str, provider: &str) -> String {
    let mut user = escape(user_id);
    if user.len() > MAX_ESCAPED_USER_ID {
        use sha2::{Digest, Sha256};
        user = format!("~H{}", hex::encode(Sha256::digest(user_id.as_bytes())));
    }
    format!("{}-{user}-{}-token", escape(env), escape(provider))
}

/// The longest escaped user id a secret name spells out.
pub const MAX_ESCAPED_USER_ID: usize = 200;

fn escape(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for byte in part.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("~{byte:02X}"));
        }
    }
    out
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'~')
}

/// Checks a mount or base path: `/`-separated segments of `[A-Za-z0-9._-]`, none empty, `.` or `..`.
pub(crate) fn validate_path(path: &str) -> Result<(), ReferenceError> {
    let valid = path.split('/').all(|segment| {
        !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    });
    if valid {
        Ok(())
    } else {
        Err(ReferenceError::InvalidPath(path.to_owned()))
    }
}

/// `<prefix>:kv/data/<mount>/<base_path>/<secret_name>`; the prefix names the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SecretRef {
    prefix: String,
    location: String,
    name: String,
}

impl SecretRef {
    /// `location` is `<mount>/<base_path>`.
    pub(crate) fn new(prefix: &str, location: &str, name: &str) -> Result<Self, ReferenceError> {
        Self::from_parts(prefix, location, name).ok_or_else(|| ReferenceError::Malformed(name.to_owned()))
    }

    fn from_parts(prefix: &str, location: &str, name: &str) -> Option<Self> {
        let prefix_ok = !prefix.is_empty() && prefix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        (prefix_ok && validate_path(location).is_ok() && is_name(name)).then(|| Self {
            prefix: prefix.to_owned(),
            location: location.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The store the secret lives in, e.g. `vault` or `embedded`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<mount>/<base_path>`.
    pub fn location(&self) -> &str {
        &self.location
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{KV_DATA}{}/{}", self.prefix, self.location, self.name)
    }
}

impl FromStr for SecretRef {
    type Err = ReferenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let malformed = || ReferenceError::Malformed(s.to_owned());
        let (prefix, rest) = s.split_once(':').ok_or_else(malformed)?;
        let path = rest.strip_prefix(KV_DATA).ok_or_else(malformed)?;
        let (location, name) = path.rsplit_once('/').ok_or_else(malformed)?;
        // A location needs at least a mount and a base path.
        if !location.contains('/') {
            return Err(malformed());
        }
        Self::from_parts(prefix, location, name).ok_or_else(malformed)
    }
}

impl serde::Serialize for SecretRef {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for SecretRef {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_name_keeps_plain_ids() {
        assert_eq!(
            secret_name("prod", "6f1c2a9e-0b7d-4c1e-9d2b-3f4a5b6c7d8e", "cloud_a"),
            "prod-6f1c2a9e-0b7d-4c1e-9d2b-3f4a5b6c7d8e-cloud_a-token"
        );
    }

    #[test]
    fn secret_name_escapes_path_characters() {
        let name = secret_name("prod", "../../admin/x", "cloud_a");
        assert_eq!(name, "prod-~2E~2E~2F~2E~2E~2Fadmin~2Fx-cloud_a-token");
        assert!(!name.contains('/') && !name.contains(".."));
        // Escaping is injective: the escape character itself is escaped.
        assert_ne!(secret_name("p", "a~2Fb", "c"), secret_name("p", "a/b", "c"));
        assert_ne!(secret_name("p", "a.b", "c"), secret_name("p", "a_b", "c"));
    }

    #[test]
    fn secret_names_of_long_escaped_ids_are_digests_and_stay_distinct() {
        let slashes = "/".repeat(255);
        let name = secret_name("prod", &slashes, "cloud_d");
        assert!(name.len() < 120, "{name}");
        assert!(name.starts_with("prod-~H") && name.ends_with("-cloud_d-token"));
        assert!(is_name(&name));
        assert_ne!(name, secret_name("prod", &"/".repeat(254), "cloud_d"));
        // An id just within the limit is still spelled out.
        let within = "/".repeat(MAX_ESCAPED_USER_ID / 3);
        assert_eq!(
            secret_name("p", &within, "c"),
            format!("p-{}-c-token", "~2F".repeat(MAX_ESCAPED_USER_ID / 3))
        );
    }

    #[test]
    fn reference_round_trips() {
        let text = "vault:kv/data/secret/users/prod-u1-cloud_a-token";
        let reference: SecretRef = text.parse().unwrap();
        assert_eq!(reference.prefix(), "vault");
        assert_eq!(reference.location(), "secret/users");
        assert_eq!(reference.name(), "prod-u1-cloud_a-token");
        assert_eq!(reference.to_string(), text);
        let json = serde_json::to_string(&reference).unwrap();
        assert_eq!(serde_json::from_str::<SecretRef>(&json).unwrap(), reference);
    }

    #[test]
    fn nested_base_paths_are_allowed() {
        let reference: SecretRef = "embedded:kv/data/kv/team/users/n-token".parse().unwrap();
        assert_eq!(reference.location(), "kv/team/users");
    }

    #[test]
    fn rejects_malformed_and_escaping_references() {
        for bad in [
            "",
            "vault",
            "vault:secret/users/n",
            "vault:kv/data/n",
            "vault:kv/data/secret/n",
            "vault:kv/data/secret/../n",
            "vault:kv/data/secret//n",
            "vault:kv/data/secret/users/",
            "vault:kv/data/secret/users/a.b",
            "Vault:kv/data/secret/users/n",
        ] {
            assert!(bad.parse::<SecretRef>().is_err(), "{bad:?} should not parse");
        }
    }
}
