use std::os::unix::fs::PermissionsExt;

use serde_json::json;
use vigil_secrets::{secret_name, EmbeddedStore, EncryptionKey, KeyError, SecretStore, StoreError};

use crate::support::{TempDir, TestDb};

fn store(db: &TestDb, key: EncryptionKey) -> EmbeddedStore {
    EmbeddedStore::new(db.pool.clone(), key, "secret", "users").unwrap()
}

async fn row(db: &TestDb, name: &str) -> (Vec<u8>, Vec<u8>, String) {
    sqlx::query_as("SELECT nonce, ciphertext, key_id FROM embedded_secrets WHERE name = $1")
        .bind(name)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn round_trip_with_fresh_nonces() {
    let db = TestDb::new().await;
    let store = store(&db, EncryptionKey::generate());
    let value = json!({ "access_token": "ya29.same", "refresh_token": "1//same" });
    let (a, b) = (secret_name("test", "a", "cloud_a"), secret_name("test", "b", "cloud_a"));

    let reference = store.put(&a, &value).await.unwrap();
    assert_eq!(
        reference.to_string(),
        "embedded:kv/data/secret/users/test-a-cloud_a-token"
    );
    assert_eq!(store.get(&reference).await.unwrap(), Some(value.clone()));
    let first = row(&db, &a).await;
    store.put(&b, &value).await.unwrap();
    let other = row(&db, &b).await;
    store.put(&a, &value).await.unwrap();
    let rewritten = row(&db, &a).await;

    for (nonce, ciphertext, _) in [&first, &other, &rewritten] {
        assert_eq!(nonce.len(), 12);
        assert!(
            !ciphertext.windows(9).any(|w| w == b"ya29.same"),
            "plaintext in the table"
        );
    }
    assert_ne!(first.0, rewritten.0, "a rewrite takes a new nonce");
    assert_ne!(first.1, rewritten.1, "equal secrets, different ciphertexts");
    assert_ne!(first.1, other.1);

    store.delete(&reference).await.unwrap();
    assert_eq!(store.get(&reference).await.unwrap(), None);
    store.delete(&reference).await.unwrap();
}

#[tokio::test]
async fn key_file_is_private_and_survives_a_restart() {
    let db = TestDb::new().await;
    let dir = TempDir::new();
    let path = dir.0.join("secrets.key");

    let key = EncryptionKey::load_or_create(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let value = json!({ "client_secret": "s3cr3t" });
    let reference = store(&db, key.clone())
        .put("test-u-cloud_e-token", &value)
        .await
        .unwrap();

    // A new process: the same file gives the same key, and the row decrypts.
    let reloaded = EncryptionKey::load_or_create(&path).unwrap();
    assert_eq!(reloaded.id(), key.id());
    assert_eq!(store(&db, reloaded).get(&reference).await.unwrap(), Some(value));
    let leftovers: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary files left behind");
}

#[tokio::test]
async fn concurrent_first_starts_agree_on_one_key() {
    let dir = TempDir::new();
    let path = dir.0.join("secrets.key");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || EncryptionKey::load_or_create(&path).unwrap().id().to_owned())
        })
        .collect();
    let ids: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
}

#[tokio::test]
async fn key_files_readable_by_others_or_garbled_are_refused() {
    let dir = TempDir::new();
    let path = dir.0.join("secrets.key");
    EncryptionKey::load_or_create(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        EncryptionKey::load_or_create(&path),
        Err(KeyError::InsecurePermissions { mode: 0o644, .. })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, "too short\n").unwrap();
    assert!(matches!(EncryptionKey::load_or_create(&path), Err(KeyError::Invalid)));
}

#[tokio::test]
async fn tampered_ciphertext_is_an_error() {
    let db = TestDb::new().await;
    let store = store(&db, EncryptionKey::generate());
    let reference = store.put("test-u-cloud_a-token", &json!({ "a": 1 })).await.unwrap();
    sqlx::query("UPDATE embedded_secrets SET ciphertext = set_byte(ciphertext, 0, get_byte(ciphertext, 0) # 1)")
        .execute(&db.pool)
        .await
        .unwrap();
    let error = store.get(&reference).await.unwrap_err();
    assert!(matches!(error, StoreError::Decrypt(_)), "{error:?}");
}

#[tokio::test]
async fn a_row_copied_under_another_name_does_not_decrypt() {
    let db = TestDb::new().await;
    let store = store(&db, EncryptionKey::generate());
    store
        .put("test-alice-cloud_a-token", &json!({ "owner": "alice" }))
        .await
        .unwrap();
    let mallory = store
        .put("test-mallory-cloud_a-token", &json!({ "owner": "mallory" }))
        .await
        .unwrap();
    sqlx::query(
        "UPDATE embedded_secrets AS m SET nonce = a.nonce, ciphertext = a.ciphertext
         FROM embedded_secrets AS a
         WHERE m.name = 'test-mallory-cloud_a-token' AND a.name = 'test-alice-cloud_a-token'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert!(matches!(store.get(&mallory).await, Err(StoreError::Decrypt(_))));
}

#[tokio::test]
async fn another_key_is_reported_as_such() {
    let db = TestDb::new().await;
    let key = EncryptionKey::generate();
    let reference = store(&db, key.clone())
        .put("test-u-cloud_a-token", &json!({ "a": 1 }))
        .await
        .unwrap();
    let (_, _, key_id) = row(&db, "test-u-cloud_a-token").await;
    assert_eq!(key_id, key.id());
    let error = store(&db, EncryptionKey::generate()).get(&reference).await.unwrap_err();
    assert!(matches!(error, StoreError::KeyMismatch { .. }), "{error:?}");
}
