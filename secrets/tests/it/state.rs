use chrono::{TimeDelta, Utc};
use vigil_secrets::{PgNonceStore, Secret, StateError, StateSigner};

use crate::support::TestDb;

fn signer() -> StateSigner {
    StateSigner::new(Secret::new(b"0123456789abcdef0123456789abcdef".to_vec())).unwrap()
}

#[tokio::test]
async fn a_state_is_accepted_once() {
    let db = TestDb::new().await;
    let nonces = PgNonceStore::new(db.pool.clone());
    let now = Utc::now();
    let state = signer().issue("user-1", now);

    let claims = signer().verify_once(&state, now, &nonces).await.unwrap();
    assert_eq!(claims.user_id, "user-1");
    assert!(matches!(
        signer().verify_once(&state, now, &nonces).await,
        Err(StateError::Replayed)
    ));
    // Another state of the same user is a new nonce.
    let again = signer().issue("user-1", now);
    assert!(signer().verify_once(&again, now, &nonces).await.is_ok());
}

#[tokio::test]
async fn rejected_states_use_up_no_nonce() {
    let db = TestDb::new().await;
    let nonces = PgNonceStore::new(db.pool.clone());
    let now = Utc::now();
    let state = signer().issue("user-1", now);
    let late = now + TimeDelta::minutes(11);
    assert!(matches!(
        signer().verify_once(&state, late, &nonces).await,
        Err(StateError::Expired)
    ));
    let tampered = format!("{state}x");
    assert!(signer().verify_once(&tampered, now, &nonces).await.is_err());
    let used: i64 = sqlx::query_scalar("SELECT count(*) FROM oauth_state_nonces")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(used, 0);
    assert!(signer().verify_once(&state, now, &nonces).await.is_ok());
}

#[tokio::test]
async fn expired_nonces_can_be_purged() {
    let db = TestDb::new().await;
    let nonces = PgNonceStore::new(db.pool.clone());
    let now = Utc::now();
    let short = signer().with_ttl(TimeDelta::seconds(1));
    short.verify_once(&short.issue("a", now), now, &nonces).await.unwrap();
    signer()
        .verify_once(&signer().issue("b", now), now, &nonces)
        .await
        .unwrap();
    assert_eq!(nonces.purge_expired(now + TimeDelta::minutes(1)).await.unwrap(), 1);
}
