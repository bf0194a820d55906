use std::collections::HashMap;

use chrono::{TimeDelta, Utc};
use vigil_secrets::cloud_a::{CloudAClient, CloudAConfig, CloudAError, CloudATokens, Freshness, REFRESH_WINDOW};
use vigil_secrets::fake::FakeCloudA;
use vigil_secrets::Secret;

use crate::support::closed_port_url;

const CLIENT_ID: &str = "vigil-client.apps.example";
const CLIENT_SECRET: &str = "GOCSPX-client-secret";

fn client(fake: &FakeCloudA, client_secret: &str) -> CloudAClient {
    CloudAClient::new(CloudAConfig::new(
        CLIENT_ID,
        Secret::from(client_secret),
        fake.auth_url(),
        fake.token_url(),
        "https://vigil.example/cloud_a/callback".parse().unwrap(),
        fake.url(),
    ))
    .unwrap()
}

async fn signed_in(fake: &FakeCloudA, client: &CloudAClient) -> CloudATokens {
    fake.register_code("code-1", "ann@example.com");
    client.exchange_code("code-1").await.unwrap()
}

fn token_requests(fake: &FakeCloudA) -> usize {
    fake.requests().iter().filter(|r| r.path == "/token").count()
}

#[tokio::test]
async fn login_url_carries_state_scopes_and_offline_access() {
    let fake = FakeCloudA::start(CLIENT_ID, CLIENT_SECRET).await;
    let url = client(&fake, CLIENT_SECRET).login_url("signed.state");
    assert_eq!(url.path(), "/authorize");
    let query: HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(query["response_type"], "code");
    assert_eq!(query["client_id"], CLIENT_ID);
    assert_eq!(query["state"], "signed.state");
    assert_eq!(query["redirect_uri"], "https://vigil.example/cloud_a/callback");
    assert_eq!(query["access_type"], "offline");
    assert_eq!(
        query["scope"],
        "https://www.googleapis.com/auth/cloud-platform https://www.googleapis.com/auth/compute \
         https://www.googleapis.com/auth/cloudplatformprojects openid email"
    );
    assert!(!url.as_str().contains(CLIENT_SECRET));
}

#[tokio::test]
async fn code_exchange_returns_tokens_and_email() {
    let fake = FakeCloudA::start(CLIENT_ID, CLIENT_SECRET).await;
    let client = client(&fake, CLIENT_SECRET);
    let before = Utc::now();
    let tokens = signed_in(&fake, &client).await;

    assert!(tokens.access_token.expose().starts_with("fake-a-access-"));
    assert!(tokens.refresh_token.expose().starts_with("fake-a-refresh-"));
    assert_eq!(tokens.email.as_deref(), Some("ann@example.com"));
    assert!(tokens.expires_at >= before + TimeDelta::seconds(3600));
    assert!(tokens.expires_at <= Utc::now() + TimeDelta::seconds(3600));

    let requests = fake.requests();
    let form = requests[0].form();
    assert_eq!(form["grant_type"], "authorization_code");
    assert_eq!(form["code"], "code-1");
    assert_eq!(form["redirect_uri"], "https://vigil.example/cloud_a/callback");
    assert!(requests[0].header("authorization").unwrap().starts_with("Basic "));
    assert_eq!(requests[1].path, "/oauth2/v3/userinfo");
    assert_eq!(
        requests[1].header("authorization"),
        Some(format!("Bearer {}", tokens.access_token.expose()).as_str())
    );

    // The stored shape: access_token, refresh_token, expires_at, email.
    let stored = serde_json::to_value(&tokens).unwrap();
    let round_trip: CloudATokens = serde_json::from_value(stored.clone()).unwrap();
    assert_eq!(round_trip.refresh_token.expose(), tokens.refresh_token.expose());
    let mut fields: Vec<_> = stored.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    assert_eq!(fields, ["access_token", "email", "expires_at", "refresh_token"]);
}

#[tokio::test]
async fn unknown_or_reused_codes_are_invalid_grants() {
    let fake = FakeCloudA::start(CLIENT_ID, CLIENT_SECRET).await;
    let client = client(&fake, CLIENT_SECRET);
    assert!(matches!(
        client.exchange_code("never-issued").await,
        Err(CloudAError::InvalidGrant)
    ));
    signed_in(&fake, &client).await;
    assert!(matches!(
        client.exchange_code("code-1").await,
        Err(CloudAError::InvalidGrant)
    ));
}

#[tokio::test]
async fn wrong_client_secret_is_invalid_client() {
    let fake = FakeCloudA::start(CLIENT_ID, CLIENT_SECRET).await;
    fake.register_code("code-1", "ann@example.com");
    let error = client(&fake, "wrong-secret").exchange_code("code-1").await.unwrap_err();
    assert!(matches!(error, CloudAError::InvalidClient), "{error:?}");
    assert!(!format!("{error} {error:?}").contains("wrong-secret"));
}

#[tokio::test]
async fn refreshes_inside_the_five_minute_window() {
    let fake = FakeCloudA::start(CLIENT_ID, CLIENT_SECRET).await;
    let client = client(&fake, CLIENT_SECRET);
    fake.set_expires_in(120);
    let mut tokens = signed_in(&fake, &client).await;
    let (old_access, refresh) = (
        tokens.access_token.expose().clone(),
        tokens.refresh_token.expose().clone(),
    );
    fake.set_expires_in(3600);

    assert_eq!(
        client.fresh_access_token(&mut tokens, Utc::now()).await.unwrap(),
        Freshness::Refreshed
    );
    assert_ne!(tokens.access_token.expose(), &old_access);
    assert_eq!(
        tokens.refresh_token.expose(),
        &refresh,
        "kept when the provider does not rotate it"
    );
    assert!(tokens.expires_at > Utc::now() + TimeDelta::minutes(59));
    let refresh_request = fake.requests().pop().unwrap();
    assert_eq!(refresh_request.form()["grant_type"], "refresh_token");
    assert_eq!(refresh_request.form()["refresh_token"], refresh);

    // The new access token works.
    assert!(client.list_projects(&tokens.access_token).await.is_ok());
}

#[tokio::test]
async fn does_not_refresh_outside_the_window() {
    let fake = FakeCloudA::start(CLIENT_ID, CLIENT_SECRET).await;
    let client = client(&fake, CLIENT_SECRET);
    let mut tokens = signed_in(&fake, &client).await;
    let access = tokens.access_token.expose().clone();
    let now = Utc::now();

    tokens.expires_at = now + REFRESH_WINDOW + TimeDelta::seconds(1);
    assert_eq!(
        client.fresh_access_token(&mut tokens, now).await.unwrap(),
        Freshness::Current
    );
    assert_eq!(tokens.access_token.expose(), &access);
    assert_eq!(token_requests(&fake), 1, "only the code exchange");

    tokens.expires_at = now + REFRESH_WINDOW;
    assert_eq!(
        client.fresh_access_token(&mut tokens, now).await.unwrap(),
        Freshness::Refreshed
    );
    assert_eq!(token_requests(&fake), 2);
}

#[tokio::test]
async fn revoked_refresh_token_means_reauthentication() {
    let fake = FakeCloudA::start(CLIENT_ID, CLIENT_SECRET).await;
    let client = client(&fake, CLIENT_SECRET);
    let mut tokens = signed_in(&fake, &client).await;
    fake.revoke_refresh_token(tokens.refresh_token.expose());

    assert!(matches!(
        client.refresh(&tokens.refresh_token).await,
        Err(CloudAError::RefreshExpired)
    ));
    tokens.expires_at = Utc::now();
    assert!(matches!(
        client.fresh_access_token(&mut tokens, Utc::now()).await,
        Err(CloudAError::RefreshExpired)
    ));
}

#[tokio::test]
async fn callback_errors_and_network_failures_are_classified() {
    assert!(matches!(
        CloudAError::from_callback("access_denied"),
        CloudAError::AccessDenied
    ));
    assert!(matches!(
        CloudAError::from_callback("server_error"),
        CloudAError::OAuth(code) if code == "server_error"
    ));

    let down = closed_port_url().await;
    let client = CloudAClient::new(CloudAConfig::new(
        CLIENT_ID,
        Secret::from(CLIENT_SECRET),
        down.join("authorize").unwrap(),
        down.join("token").unwrap(),
        "https://vigil.example/cloud_a/callback".parse().unwrap(),
        down.clone(),
    ))
    .unwrap();
    let error = client.refresh(&Secret::from("1//refresh-secret")).await.unwrap_err();
    assert!(matches!(error, CloudAError::Network(_)), "{error:?}");
    assert!(!format!("{error} {error:?}").contains("refresh-secret"));
}

#[tokio::test]
async fn lists_projects_across_pages_and_reads_billing() {
    let fake = FakeCloudA::start(CLIENT_ID, CLIENT_SECRET).await;
    for (id, billing) in [("alpha-1", true), ("beta-2", false), ("gamma-3", true)] {
        fake.add_project(id, &format!("Project {id}"), billing);
    }
    let client = client(&fake, CLIENT_SECRET);
    let tokens = signed_in(&fake, &client).await;

    let projects = client.list_projects(&tokens.access_token).await.unwrap();
    let ids: Vec<_> = projects.iter().map(|p| p.project_id.as_str()).collect();
    assert_eq!(ids, ["alpha-1", "beta-2", "gamma-3"]);
    assert_eq!(projects[0].name.as_deref(), Some("Project alpha-1"));
    assert_eq!(projects[0].lifecycle_state.as_deref(), Some("ACTIVE"));

    assert!(client.has_billing(&tokens.access_token, "alpha-1").await.unwrap());
    assert!(!client.has_billing(&tokens.access_token, "beta-2").await.unwrap());
    assert!(matches!(
        client.has_billing(&tokens.access_token, "missing").await,
        Err(CloudAError::Api(404))
    ));
    assert_eq!(fake.requests().pop().unwrap().path, "/v1/projects/missing/billingInfo");
    assert!(matches!(
        client.list_projects(&Secret::from("not-a-token")).await,
        Err(CloudAError::Unauthorized)
    ));
}
