//! bcrypt hashing on the blocking pool (a cost-12 hash takes about a quarter of a second of CPU).

use std::sync::Arc;

use anyhow::Context;
use base64::Engine;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

pub const MIN_PASSWORD_CHARS: usize = 8;
/// Only a bound against abuse (each password is hashed); nothing in bcrypt needs it.
pub const MAX_PASSWORD_CHARS: usize = 1024;
/// bcrypt reads at most this many bytes and silently ignores the rest.
const BCRYPT_MAX_BYTES: usize = 72;

#[derive(Clone)]
pub struct PasswordHasher {
    cost: u32,
    /// Hash compared against when the e-mail is unknown, so that a login costs the same time
    /// whether or not the account exists.
    decoy: Arc<OnceCell<String>>,
}

impl PasswordHasher {
    pub fn new(cost: u32) -> Self {
        Self {
            cost,
            decoy: Arc::default(),
        }
    }

    pub async fn hash(&self, password: &str) -> anyhow::Result<String> {
        let (password, cost) = (bcrypt_input(password), self.cost);
        tokio::task::spawn_blocking(move || bcrypt::hash(password, cost))
            .await
            .context("password hashing task failed")?
            .context("bcrypt hash")
    }

    /// Constant-time comparison (bcrypt's own) against `hash`, or against a decoy when `None`.
    pub async fn verify(&self, password: &str, hash: Option<&str>) -> anyhow::Result<bool> {
        let (target, is_decoy) = match hash {
            Some(hash) => (hash.to_owned(), false),
            None => (self.decoy_hash().await?, true),
        };
        let password = bcrypt_input(password);
        let matches = tokio::task::spawn_blocking(move || bcrypt::verify(password, &target))
            .await
            .context("password verification task failed")?
            .unwrap_or(false);
        Ok(matches && !is_decoy)
    }

    async fn decoy_hash(&self) -> anyhow::Result<String> {
        self.decoy
            .get_or_try_init(|| self.hash("decoy password for unknown accounts"))
            .await
            .cloned()
    }
}

/// What bcrypt is given for `password`: the password itself when bcrypt reads all of it (so hashes
/// made before long passwords were accepted still verify), else the base64 of its SHA-256, so that
/// every byte of a long password counts instead of only the first 72.
fn bcrypt_input(password: &str) -> Vec<u8> {
    if password.len() <= BCRYPT_MAX_BYTES {
        password.as_bytes().to_vec()
    } else {
        base64::engine::general_purpose::STANDARD
            .encode(Sha256::digest(password.as_bytes()))
            .into_bytes()
    }
}

/// Why a proposed password is refused.
pub fn password_problem(password: &str) -> Option<String> {
    let chars = password.chars().count();
    if chars < MIN_PASSWORD_CHARS {
        Some(format!("password must be at least {MIN_PASSWORD_CHARS} characters"))
    } else if chars > MAX_PASSWORD_CHARS {
        Some(format!("password must be at most {MAX_PASSWORD_CHARS} characters"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hashes_are_salted_and_verify() {
        let hasher = PasswordHasher::new(4);
        let first = hasher.hash("correct horse").await.unwrap();
        let second = hasher.hash("correct horse").await.unwrap();
        assert_ne!(first, second, "two hashes of one password must differ by salt");
        assert!(hasher.verify("correct horse", Some(&first)).await.unwrap());
        assert!(!hasher.verify("wrong horse", Some(&first)).await.unwrap());
    }

    #[tokio::test]
    async fn unknown_account_never_verifies() {
        let hasher = PasswordHasher::new(4);
        assert!(!hasher
            .verify("decoy password for unknown accounts", None)
            .await
            .unwrap());
    }

    #[test]
    fn password_rules() {
        assert!(password_problem("1234567").is_some());
        assert!(password_problem("12345678").is_none());
        assert!(password_problem("ééééééé").is_some(), "counts characters, not bytes");
        assert!(password_problem(&"x".repeat(73)).is_none(), "longer than bcrypt reads");
        assert!(password_problem(&"é".repeat(MAX_PASSWORD_CHARS)).is_none());
        assert!(password_problem(&"x".repeat(MAX_PASSWORD_CHARS + 1)).is_some());
    }

    #[tokio::test]
    async fn long_passwords_count_in_full() {
        let hasher = PasswordHasher::new(4);
        let shared_start = "p".repeat(BCRYPT_MAX_BYTES);
        let password = format!("{shared_start}{}", "a".repeat(28));
        let other = format!("{shared_start}{}", "b".repeat(28));
        assert_eq!((password.len(), other.len()), (100, 100));
        let hash = hasher.hash(&password).await.unwrap();
        assert!(hasher.verify(&password, Some(&hash)).await.unwrap());
        assert!(
            !hasher.verify(&other, Some(&hash)).await.unwrap(),
            "bytes past the 72nd matter"
        );
        assert!(!hasher.verify(&shared_start, Some(&hash)).await.unwrap());
    }

    #[tokio::test]
    async fn short_passwords_hash_as_plain_bcrypt() {
        let hasher = PasswordHasher::new(4);
        let password = "x".repeat(BCRYPT_MAX_BYTES);
        let plain = bcrypt::hash(&password, 4).unwrap();
        assert!(
            hasher.verify(&password, Some(&plain)).await.unwrap(),
            "existing hashes keep working"
        );
        let ours = hasher.hash(&password).await.unwrap();
        assert!(bcrypt::verify(&password, &ours).unwrap());
    }
}
