//! AES-256-GCM with a random 96-bit nonce per message, and the key that drives it.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::Secret;

pub(crate) const NONCE_LEN: usize = 12;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("encryption key is not the base64 encoding of 32 bytes")]
    Invalid,
    #[error("encryption key file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("encryption key file {path} is readable by others (mode {mode:o}); run `chmod 600` on it")]
    InsecurePermissions { path: PathBuf, mode: u32 },
}

/// The message failed authentication: wrong key, wrong associated data or altered bytes.
#[derive(Debug)]
pub(crate) struct OpenError;

/// A 256-bit AES-GCM key.
#[derive(Clone)]
pub struct EncryptionKey {
    key: Secret<[u8; 32]>,
    id: String,
}

impl EncryptionKey {
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Self::from_bytes(key)
    }

    /// A key given in configuration: the standard base64 encoding of 32 bytes.
    pub fn from_base64(encoded: &str) -> Result<Self, KeyError> {
        let bytes = STANDARD.decode(encoded.trim()).map_err(|_| KeyError::Invalid)?;
        let key: [u8; 32] = bytes.try_into().map_err(|_| KeyError::Invalid)?;
        Ok(Self::from_bytes(key))
    }

    /// Reads the key file, or creates it (mode 0600) with a new random key if it does not exist.
    ///
    /// Creation is atomic and never replaces a file: the key is written to a temporary file that
    /// is then hard-linked into place, so concurrent first starts agree on one key.
    pub fn load_or_create(path: &Path) -> Result<Self, KeyError> {
        match Self::read(path) {
            Err(KeyError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            found => return found,
        }
        let io_error = |source| KeyError::Io {
            path: path.to_owned(),
            source,
        };
        let key = Self::generate();
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let file_name = path
            .file_name()
            .ok_or_else(|| io_error(io::ErrorKind::InvalidInput.into()))?;
        let temp = dir.join(format!(
            ".{}.{:016x}.tmp",
            file_name.to_string_lossy(),
            rand::rng().next_u64()
        ));
        let written = Self::write_private(&temp, &key);
        let linked = written.and_then(|()| fs::hard_link(&temp, path));
        // Best effort: the temporary name is random and holds nothing once linked.
        let _ = fs::remove_file(&temp);
        match linked {
            Ok(()) => Ok(key),
            Err(source) if source.kind() == io::ErrorKind::AlreadyExists => Self::read(path),
            Err(source) => Err(io_error(source)),
        }
    }

    fn write_private(path: &Path, key: &Self) -> io::Result<()> {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
        // The umask cannot widen the mode, but a restrictive one could have narrowed it.
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        file.write_all(format!("{}\n", STANDARD.encode(key.key.expose())).as_bytes())?;
        file.sync_all()
    }

    fn read(path: &Path) -> Result<Self, KeyError> {
        let io_error = |source| KeyError::Io {
            path: path.to_owned(),
            source,
        };
        let mode = fs::metadata(path).map_err(io_error)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::InsecurePermissions {
                path: path.to_owned(),
                mode,
            });
        }
        Self::from_base64(&fs::read_to_string(path).map_err(io_error)?)
    }

    fn from_bytes(key: [u8; 32]) -> Self {
        // A fingerprint, stored next to each ciphertext, that tells "wrong key" apart from
        // "tampered data". It reveals nothing useful about a random 256-bit key.
        let digest = Sha256::new_with_prefix(b"vigil-secrets key id\0")
            .chain_update(key)
            .finalize();
        let id = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        Self {
            key: Secret::new(key),
            id,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(self.key.expose().into())
    }

    /// Encrypts `plaintext` bound to `associated_data`; returns the fresh nonce and the ciphertext.
    pub(crate) fn seal(&self, plaintext: &[u8], associated_data: &[u8]) -> ([u8; NONCE_LEN], Vec<u8>) {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let payload = Payload {
            msg: plaintext,
            aad: associated_data,
        };
        let ciphertext = self
            .cipher()
            .encrypt(Nonce::from_slice(&nonce), payload)
            .expect("AES-GCM encrypts any message shorter than 64 GiB");
        (nonce, ciphertext)
    }

    pub(crate) fn open(&self, nonce: &[u8], ciphertext: &[u8], associated_data: &[u8]) -> Result<Vec<u8>, OpenError> {
        if nonce.len() != NONCE_LEN {
            return Err(OpenError);
        }
        let payload = Payload {
            msg: ciphertext,
            aad: associated_data,
        };
        self.cipher()
            .decrypt(Nonce::from_slice(nonce), payload)
            .map_err(|_| OpenError)
    }
}

impl fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptionKey")
            .field("id", &self.id)
            .field("key", &self.key)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_open() {
        let key = EncryptionKey::generate();
        let (nonce, ciphertext) = key.seal(b"hello", b"name-a");
        assert_eq!(key.open(&nonce, &ciphertext, b"name-a").unwrap(), b"hello");
        assert!(key.open(&nonce, &ciphertext, b"name-b").is_err());
        assert!(EncryptionKey::generate().open(&nonce, &ciphertext, b"name-a").is_err());
    }

    #[test]
    fn base64_keys_must_be_32_bytes() {
        let key = EncryptionKey::from_base64(&STANDARD.encode([7u8; 32])).unwrap();
        assert_eq!(
            key.id(),
            EncryptionKey::from_base64(&STANDARD.encode([7u8; 32])).unwrap().id()
        );
        assert!(EncryptionKey::from_base64(&STANDARD.encode([7u8; 16])).is_err());
        assert!(EncryptionKey::from_base64("not base64!").is_err());
    }

    #[test]
    fn debug_shows_only_the_id() {
        let key = EncryptionKey::from_base64(&STANDARD.encode([7u8; 32])).unwrap();
        let debug = format!("{key:?}");
        assert!(debug.contains(key.id()) && debug.contains("[redacted]"), "{debug}");
        assert!(!debug.contains(&STANDARD.encode([7u8; 32])));
    }
}
