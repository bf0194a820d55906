//! bcrypt hashing on the blocking pool (a cost-12 hash takes about a quarter of a second of CPU).

use std::sync::Arc;

use anyhow::Context;
use tokio::sync::OnceCell;

/// bcrypt reads at most 72 bytes; longer passwords are refused rather than silently truncated.
pub const MAX_PASSWORD_BYTES: usize = 72;
pub const MIN_PASSWORD_CHARS: usize = 8;

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
        let (password, cost) = (password.to_owned(), self.cost);
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
        let password = password.to_owned();
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

/// Why a proposed password is refused.
pub fn password_problem(password: &str) -> Option<String> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        Some(format!("password must be at least {MIN_PASSWORD_CHARS} characters"))
    } else if password.len() > MAX_PASSWORD_BYTES {
        Some(format!("password must be at most {MAX_PASSWORD_BYTES} bytes"))
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
        assert!(password_problem(&"x".repeat(73)).is_some());
    }
}
