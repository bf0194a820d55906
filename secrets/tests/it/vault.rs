use std::sync::Arc;

use serde_json::json;
use vigil_secrets::fake::FakeVault;
use vigil_secrets::{secret_name, Secret, SecretRef, SecretStore, StoreError, VaultKv2, VaultKv2Config};

use crate::support::closed_port_url;

const TOKEN: &str = "hvs.root-token";

fn vault(address: url::Url, token: &str) -> VaultKv2 {
    VaultKv2::new(VaultKv2Config::new(address, Secret::from(token), "secret")).unwrap()
}

#[tokio::test]
async fn put_get_delete_round_trip() {
    let fake = FakeVault::start(TOKEN).await;
    let store = vault(fake.url(), TOKEN);
    let name = secret_name("test", "user-1", "cloud_a");
    let first = json!({ "access_token": "ya29.first", "refresh_token": "1//refresh" });

    let reference = store.put(&name, &first).await.unwrap();
    assert_eq!(
        reference.to_string(),
        "vault:kv/data/secret/users/test-user-1-cloud_a-token"
    );
    assert_eq!(store.get(&reference).await.unwrap(), Some(first.clone()));

    let second = json!({ "access_token": "ya29.second", "refresh_token": "1//refresh" });
    assert_eq!(store.put(&name, &second).await.unwrap(), reference);
    assert_eq!(store.get(&reference).await.unwrap(), Some(second.clone()));
    assert_eq!(
        fake.versions("secret/users/test-user-1-cloud_a-token"),
        vec![first.clone(), second]
    );

    let write = &fake.requests()[0];
    assert_eq!(write.method, "POST");
    assert_eq!(write.path, "/v1/secret/data/users/test-user-1-cloud_a-token");
    assert_eq!(write.header("X-Vault-Token"), Some(TOKEN));
    assert_eq!(write.json(), json!({ "data": first }));

    store.delete(&reference).await.unwrap();
    let delete = fake.requests().pop().unwrap();
    assert_eq!(delete.method, "DELETE");
    assert_eq!(delete.path, "/v1/secret/metadata/users/test-user-1-cloud_a-token");
    assert_eq!(store.get(&reference).await.unwrap(), None);
    assert!(fake.versions("secret/users/test-user-1-cloud_a-token").is_empty());
    // Deleting again is not an error.
    store.delete(&reference).await.unwrap();
}

#[tokio::test]
async fn a_missing_secret_is_none() {
    let fake = FakeVault::start(TOKEN).await;
    let store = vault(fake.url(), TOKEN);
    let reference: SecretRef = "vault:kv/data/secret/users/test-nobody-cloud_a-token".parse().unwrap();
    assert_eq!(store.get(&reference).await.unwrap(), None);
}

#[tokio::test]
async fn custom_base_path_and_escaped_user_ids_stay_in_place() {
    let fake = FakeVault::start(TOKEN).await;
    let mut config = VaultKv2Config::new(fake.url(), Secret::from(TOKEN), "kv");
    config.base_path = "tenants/users".into();
    let store = VaultKv2::new(config).unwrap();
    let reference = store
        .put(&secret_name("prod", "../../admin", "cloud_e"), &json!({ "k": "v" }))
        .await
        .unwrap();
    assert_eq!(
        reference.to_string(),
        "vault:kv/data/kv/tenants/users/prod-~2E~2E~2F~2E~2E~2Fadmin-cloud_e-token"
    );
    assert_eq!(
        fake.requests()[0].path,
        "/v1/kv/data/tenants/users/prod-~2E~2E~2F~2E~2E~2Fadmin-cloud_e-token"
    );
}

#[tokio::test]
async fn wrong_token_is_a_clear_error_without_secrets() {
    let fake = FakeVault::start(TOKEN).await;
    let store = vault(fake.url(), "hvs.wrong-token");
    let error = store
        .put(
            &secret_name("test", "u", "cloud_a"),
            &json!({ "access_token": "ya29.secret" }),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Unauthorized(403)), "{error:?}");
    let text = format!("{error} {error:?}");
    assert!(text.contains("token"), "{text}");
    assert!(!text.contains("wrong-token") && !text.contains("ya29.secret"), "{text}");

    let reference: SecretRef = "vault:kv/data/secret/users/test-u-cloud_a-token".parse().unwrap();
    assert!(matches!(
        store.get(&reference).await,
        Err(StoreError::Unauthorized(403))
    ));
    assert!(matches!(
        store.delete(&reference).await,
        Err(StoreError::Unauthorized(403))
    ));
}

#[tokio::test]
async fn unreachable_vault_is_an_http_error_without_secrets() {
    let store = vault(closed_port_url().await, TOKEN);
    let error = store
        .put(
            &secret_name("test", "u", "cloud_a"),
            &json!({ "access_token": "ya29.secret" }),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Http(_)), "{error:?}");
    let text = format!("{error} {error:?}");
    assert!(!text.contains(TOKEN) && !text.contains("ya29.secret"), "{text}");
}

#[tokio::test]
async fn references_of_other_stores_and_non_objects_are_refused() {
    let fake = FakeVault::start(TOKEN).await;
    let store: Arc<dyn SecretStore> = Arc::new(vault(fake.url(), TOKEN));
    for foreign in [
        "embedded:kv/data/secret/users/test-u-cloud_a-token",
        "vault:kv/data/other/users/test-u-cloud_a-token",
    ] {
        let reference: SecretRef = foreign.parse().unwrap();
        assert!(matches!(
            store.get(&reference).await,
            Err(StoreError::ForeignReference(_))
        ));
    }
    assert!(matches!(
        store.put("test-u-cloud_a-token", &json!("just a string")).await,
        Err(StoreError::NotAnObject)
    ));
    assert!(matches!(
        store.put("../escape", &json!({})).await,
        Err(StoreError::Reference(_))
    ));
    assert!(fake.requests().is_empty());
}
