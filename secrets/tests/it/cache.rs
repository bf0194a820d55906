use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use vigil_secrets::fake::FakeVault;
use vigil_secrets::{
    CredentialCache, EncryptionKey, Secret, SecretRef, SecretStore, Secrets, VaultKv2, VaultKv2Config,
};

use crate::support::redis_client;

fn reference(user: &str) -> SecretRef {
    format!("vault:kv/data/secret/users/test-{user}-cloud_a-token")
        .parse()
        .unwrap()
}

async fn expires_and_invalidates(cache: &CredentialCache) {
    let value = json!({ "access_token": "ya29.cached" });
    let (a, b) = (reference("a"), reference("b"));
    cache.put(&a, &value).await.unwrap();
    cache.put(&b, &value).await.unwrap();
    assert_eq!(cache.get(&a).await.unwrap(), Some(value.clone()));

    cache.invalidate(&b).await.unwrap();
    assert_eq!(cache.get(&b).await.unwrap(), None);

    tokio::time::sleep(cache.ttl() + Duration::from_millis(100)).await;
    assert_eq!(cache.get(&a).await.unwrap(), None);
}

#[tokio::test]
async fn in_process_cache_expires_and_invalidates() {
    expires_and_invalidates(&CredentialCache::in_process(Duration::from_millis(500))).await;
}

#[tokio::test]
async fn redis_cache_expires_invalidates_and_holds_only_ciphertext() {
    let Some(client) = redis_client().await else {
        return;
    };
    let prefix = format!("vigil-secrets-test:{}:", uuid::Uuid::new_v4().simple());
    let ttl = Duration::from_secs(1);
    let cache = CredentialCache::redis(client.clone(), prefix.clone(), EncryptionKey::generate(), ttl);
    let value = json!({ "access_token": "ya29.cached-in-redis" });
    cache.put(&reference("c"), &value).await.unwrap();

    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1);
    assert!(!keys[0].contains("test-c"), "user ids stay out of keys: {}", keys[0]);
    let blob: Vec<u8> = redis::cmd("GET")
        .arg(&keys[0])
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(!blob.windows(4).any(|w| w == b"ya29"), "plaintext in Redis");
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&keys[0])
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(pttl > 0 && pttl <= 1000, "{pttl}");
    assert_eq!(cache.get(&reference("c")).await.unwrap(), Some(value));

    // Another instance with another key cannot read the blob.
    let stranger = CredentialCache::redis(client, prefix, EncryptionKey::generate(), ttl);
    assert!(stranger.get(&reference("c")).await.is_err());

    expires_and_invalidates(&cache).await;
}

#[tokio::test]
async fn facade_reads_through_the_cache_and_removes_from_both() {
    let fake = FakeVault::start("root").await;
    let store: Arc<dyn SecretStore> =
        Arc::new(VaultKv2::new(VaultKv2Config::new(fake.url(), Secret::from("root"), "secret")).unwrap());
    let secrets = Secrets::new(store, CredentialCache::in_process(Duration::from_secs(60)));
    let gets = || fake.requests().iter().filter(|r| r.method == "GET").count();
    let value = json!({ "access_token": "ya29.facade" });

    let reference = secrets.save("test-u-cloud_a-token", &value).await.unwrap();
    assert_eq!(secrets.load(&reference).await.unwrap(), Some(value.clone()));
    assert_eq!(gets(), 0, "written through, so served from the cache");

    secrets.cache().invalidate(&reference).await.unwrap();
    assert_eq!(secrets.load(&reference).await.unwrap(), Some(value.clone()));
    assert_eq!(gets(), 1, "after invalidation the store is asked");
    assert_eq!(secrets.load(&reference).await.unwrap(), Some(value));
    assert_eq!(gets(), 1, "and the answer is cached again");

    secrets.remove(&reference).await.unwrap();
    assert_eq!(secrets.cache().get(&reference).await.unwrap(), None);
    assert_eq!(secrets.load(&reference).await.unwrap(), None);
    assert!(fake.versions("secret/users/test-u-cloud_a-token").is_empty());
}

#[tokio::test]
async fn facade_falls_back_to_the_store_when_redis_is_down() {
    // Nothing listens on this port: every cache call fails, loads still succeed.
    let port = crate::support::closed_port_url().await.port().unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let fake = FakeVault::start("root").await;
    let store: Arc<dyn SecretStore> =
        Arc::new(VaultKv2::new(VaultKv2Config::new(fake.url(), Secret::from("root"), "secret")).unwrap());
    let cache = CredentialCache::redis(client, "x:", EncryptionKey::generate(), Duration::from_secs(60));
    let secrets = Secrets::new(store, cache);
    let value = json!({ "k": "v" });
    let reference = secrets.save("test-u-cloud_a-token", &value).await.unwrap();
    assert_eq!(secrets.load(&reference).await.unwrap(), Some(value));
    // Removing must not report success while the cache may still hold the credentials.
    assert!(secrets.remove(&reference).await.is_err());
}
