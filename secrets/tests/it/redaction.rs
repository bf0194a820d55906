//! Debug output of every type holding a credential shows none of it.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use vigil_secrets::cloud_a::{CloudAClient, CloudAConfig, CloudATokens, RefreshedAccess};
use vigil_secrets::cloud_e::{generate_ssh_keypair, AuthKey, CloudEToken};
use vigil_secrets::{
    CredentialCache, EmbeddedStore, EncryptionKey, Secret, SecretStore, Secrets, StateSigner, VaultKv2, VaultKv2Config,
};

use crate::support::TestDb;

const SECRETS: &[&str] = &[
    "access-SECRET",
    "refresh-SECRET",
    "client-SECRET",
    "vault-SECRET",
    "authkey-SECRET",
    "state-key-SECRET-0123456789abcdef",
];

fn assert_redacted(what: &str, debug: String) {
    for secret in SECRETS {
        assert!(!debug.contains(secret), "{what} leaks {secret}: {debug}");
    }
    assert!(!debug.contains("PRIVATE KEY"), "{what} leaks a private key: {debug}");
    assert!(!debug.contains("SECRET"), "{what} leaks: {debug}");
}

#[tokio::test]
async fn debug_output_holds_no_secret() {
    let url: url::Url = "http://127.0.0.1:1/".parse().unwrap();
    let tokens = CloudATokens {
        access_token: Secret::from("access-SECRET"),
        refresh_token: Secret::from("refresh-SECRET"),
        expires_at: Utc::now(),
        email: Some("ann@example.com".into()),
    };
    assert_redacted("CloudATokens", format!("{tokens:?}"));
    let refreshed = RefreshedAccess {
        access_token: Secret::from("access-SECRET"),
        expires_at: Utc::now(),
        refresh_token: Some(Secret::from("refresh-SECRET")),
    };
    assert_redacted("RefreshedAccess", format!("{refreshed:?}"));

    let config = CloudAConfig::new(
        "client-id",
        Secret::from("client-SECRET"),
        url.clone(),
        url.clone(),
        url.clone(),
        url.clone(),
    );
    assert_redacted("CloudAConfig", format!("{config:?}"));
    assert_redacted("CloudAClient", format!("{:?}", CloudAClient::new(config).unwrap()));

    let token: CloudEToken = serde_json::from_value(serde_json::json!({
        "access_token": "access-SECRET", "expires_at": "2026-01-01T00:00:00Z", "scope": "devices"
    }))
    .unwrap();
    assert_redacted("CloudEToken", format!("{token:?}"));
    let key: AuthKey = serde_json::from_value(serde_json::json!({ "id": "k1", "key": "authkey-SECRET" })).unwrap();
    assert_redacted("AuthKey", format!("{key:?}"));
    assert_redacted("SshKeyPair", format!("{:?}", generate_ssh_keypair("c").unwrap()));

    let vault_config = VaultKv2Config::new(url.clone(), Secret::from("vault-SECRET"), "secret");
    assert_redacted("VaultKv2Config", format!("{vault_config:?}"));
    let vault = VaultKv2::new(vault_config).unwrap();
    assert_redacted("VaultKv2", format!("{vault:?}"));

    let signer = StateSigner::new(Secret::new(SECRETS[5].as_bytes().to_vec())).unwrap();
    assert_redacted("StateSigner", format!("{signer:?}"));

    let db = TestDb::new().await;
    let key = EncryptionKey::generate();
    let embedded = EmbeddedStore::new(db.pool.clone(), key.clone(), "secret", "users").unwrap();
    let debug = format!("{embedded:?}");
    assert!(debug.contains(key.id()) && debug.contains("[redacted]"), "{debug}");

    let cache = CredentialCache::in_process(Duration::from_secs(60));
    let reference = "vault:kv/data/secret/users/t-u-cloud_a-token".parse().unwrap();
    cache
        .put(&reference, &serde_json::to_value(&tokens).unwrap())
        .await
        .unwrap();
    assert_redacted("CredentialCache", format!("{cache:?}"));
    let store: Arc<dyn SecretStore> = Arc::new(vault);
    assert_redacted("Secrets", format!("{:?}", Secrets::new(store, cache)));
}
