use std::time::Duration;

use chrono::{TimeDelta, Utc};
use vigil_providers::cloud_c::{choose_subscription, AccessToken, AzureClient, AzureError, Subscription};
use vigil_providers::fake::{Failure, FakeAzure};
use vigil_providers::{Secret, Unavailable};

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT_ID: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
const CLIENT_SECRET: &str = "Qx8Q~client.secret-value_123";

fn subscription(n: u32, state: &str) -> Subscription {
    Subscription {
        subscription_id: format!("00000000-0000-0000-0000-{n:012}"),
        display_name: format!("Subscription {n}"),
        state: state.to_owned(),
    }
}

async fn fake_with_principal() -> FakeAzure {
    let fake = FakeAzure::start().await;
    fake.add_service_principal(TENANT, CLIENT_ID, CLIENT_SECRET);
    fake
}

fn client(fake: &FakeAzure) -> AzureClient {
    AzureClient::new()
        .with_authority_base(fake.url())
        .with_management_base(fake.url())
}

fn secret() -> Secret {
    Secret::new(CLIENT_SECRET)
}

#[tokio::test]
async fn token_for_a_valid_service_principal() {
    let fake = fake_with_principal().await;
    let before = Utc::now();

    let token = client(&fake).token(TENANT, CLIENT_ID, &secret()).await.unwrap();

    assert!(!token.token.expose().is_empty());
    assert!(token.expires_at >= before + TimeDelta::seconds(3599));
    assert!(token.expires_at <= Utc::now() + TimeDelta::seconds(3599));
    assert!(!token.needs_refresh(Utc::now()));
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, format!("/{TENANT}/oauth2/v2.0/token"));
    for (name, value) in [
        ("grant_type", "client_credentials"),
        ("client_id", CLIENT_ID),
        ("client_secret", CLIENT_SECRET),
        ("scope", "https://management.azure.com/.default"),
    ] {
        assert_eq!(requests[0].form_value(name).as_deref(), Some(value), "{name}");
    }
}

#[tokio::test]
async fn wrong_secret_or_unknown_client_is_invalid_credentials() {
    let fake = fake_with_principal().await;
    let client = client(&fake);

    let error = client
        .token(TENANT, CLIENT_ID, &Secret::new("wrong-secret-value"))
        .await
        .unwrap_err();
    let AzureError::InvalidCredentials { code, description } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(code, "invalid_client");
    assert!(
        description.starts_with("AADSTS7000215") && !description.contains("Trace ID"),
        "{description}"
    );
    assert!(!format!("{error} {error:?}").contains("wrong-secret-value"));

    let error = client
        .token(TENANT, "11111111-2222-3333-4444-555555555555", &secret())
        .await
        .unwrap_err();
    assert!(matches!(&error, AzureError::InvalidCredentials { code, .. } if code == "unauthorized_client"));
}

#[tokio::test]
async fn unknown_or_malformed_tenant_is_invalid_tenant() {
    let fake = fake_with_principal().await;
    let client = client(&fake);

    let error = client
        .token("9b9b9b9b-0000-4000-8000-000000000000", CLIENT_ID, &secret())
        .await
        .unwrap_err();
    let AzureError::InvalidTenant(description) = &error else {
        panic!("{error:?}")
    };
    assert!(description.starts_with("AADSTS90002"), "{description}");
    assert_eq!(fake.requests().len(), 1);

    for tenant in [
        "",
        "../common",
        "contoso.onmicrosoft.com/x",
        "a b",
        "tenant?x=1",
        "x..y",
    ] {
        let error = client.token(tenant, CLIENT_ID, &secret()).await.unwrap_err();
        assert!(matches!(error, AzureError::InvalidTenant(_)), "{tenant:?}: {error:?}");
    }
    // Rejected before any request.
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn subscriptions_follow_next_links() {
    let fake = fake_with_principal().await;
    fake.add_subscription("another-tenant.example", subscription(99, "Enabled"));
    let expected: Vec<Subscription> = (1..=5).map(|n| subscription(n, "Enabled")).collect();
    for s in &expected {
        fake.add_subscription(TENANT, s.clone());
    }
    fake.set_page_size(2);
    let client = client(&fake);
    let token = client.token(TENANT, CLIENT_ID, &secret()).await.unwrap();

    let subscriptions = client.list_subscriptions(&token).await.unwrap();

    assert_eq!(subscriptions, expected);
    let listings: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/subscriptions")
        .collect();
    assert_eq!(listings.len(), 3);
    for listing in &listings {
        assert_eq!(listing.query_value("api-version").as_deref(), Some("2020-01-01"));
        assert_eq!(
            listing.header("authorization"),
            Some(format!("Bearer {}", token.token.expose()).as_str())
        );
    }
    assert_eq!(listings[2].query_value("$skiptoken").as_deref(), Some("4"));
}

#[tokio::test]
async fn no_subscription_is_an_empty_list() {
    let fake = fake_with_principal().await;
    let client = client(&fake);
    let token = client.token(TENANT, CLIENT_ID, &secret()).await.unwrap();

    assert_eq!(client.list_subscriptions(&token).await.unwrap(), Vec::new());
}

#[tokio::test]
async fn rejected_token_is_invalid_credentials() {
    let fake = fake_with_principal().await;
    let forged = AccessToken {
        token: Secret::new("forged-token"),
        expires_at: Utc::now() + TimeDelta::hours(1),
    };

    let error = client(&fake).list_subscriptions(&forged).await.unwrap_err();

    assert!(matches!(&error, AzureError::InvalidCredentials { code, .. } if code == "InvalidAuthenticationToken"));
}

#[tokio::test]
async fn next_link_to_another_host_is_not_followed() {
    let fake = fake_with_principal().await;
    let page = r#"{"value":[],"nextLink":"https://attacker.example/subscriptions?api-version=2020-01-01"}"#;
    fake.set_failure(Some(Failure::Respond {
        status: 200,
        body: page.into(),
    }));
    let token = AccessToken {
        token: Secret::new("token"),
        expires_at: Utc::now() + TimeDelta::hours(1),
    };

    let error = client(&fake).list_subscriptions(&token).await.unwrap_err();

    assert!(matches!(error, AzureError::Malformed(_)), "{error:?}");
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn choose_the_requested_subscription() {
    let lettered = Subscription {
        subscription_id: "aaaaaaaa-bbbb-cccc-dddd-000000000003".into(),
        ..subscription(3, "Enabled")
    };
    let subscriptions = vec![
        subscription(1, "Enabled"),
        subscription(2, "Disabled"),
        lettered.clone(),
    ];

    // The requested one need only be visible; its state is the caller's to judge.
    let chosen = choose_subscription(subscriptions.clone(), Some("00000000-0000-0000-0000-000000000002")).unwrap();
    assert_eq!(chosen, subscriptions[1]);
    // Users paste GUIDs in either case.
    let chosen = choose_subscription(subscriptions, Some("AAAAAAAA-BBBB-CCCC-DDDD-000000000003")).unwrap();
    assert_eq!(chosen, lettered);
}

#[test]
fn requested_subscription_must_be_visible() {
    let subscriptions = vec![subscription(1, "Enabled")];

    let error = choose_subscription(subscriptions, Some("00000000-0000-0000-0000-000000000009")).unwrap_err();

    assert!(matches!(&error, AzureError::SubscriptionNotFound(id) if id == "00000000-0000-0000-0000-000000000009"));
}

#[test]
fn first_enabled_subscription_is_chosen_by_default() {
    let subscriptions = vec![
        subscription(1, "Disabled"),
        subscription(2, "Warned"),
        subscription(3, "Enabled"),
        subscription(4, "Enabled"),
    ];

    assert_eq!(
        choose_subscription(subscriptions, None).unwrap(),
        subscription(3, "Enabled")
    );
    let error = choose_subscription(vec![subscription(1, "Disabled")], None).unwrap_err();
    assert!(matches!(error, AzureError::NoEnabledSubscription));
    assert!(matches!(
        choose_subscription(Vec::new(), None),
        Err(AzureError::NoEnabledSubscription)
    ));
}

#[tokio::test]
async fn provider_errors_and_outages_are_unavailable() {
    let fake = fake_with_principal().await;
    let client = client(&fake);

    fake.set_failure(Some(Failure::Respond {
        status: 500,
        body: "{}".into(),
    }));
    let error = client.token(TENANT, CLIENT_ID, &secret()).await.unwrap_err();
    assert!(
        matches!(error, AzureError::Unavailable(Unavailable::Status(500))),
        "{error:?}"
    );

    fake.set_failure(Some(Failure::Respond {
        status: 429,
        body: "{}".into(),
    }));
    let token = AccessToken {
        token: Secret::new("token"),
        expires_at: Utc::now() + TimeDelta::hours(1),
    };
    let error = client.list_subscriptions(&token).await.unwrap_err();
    assert!(
        matches!(error, AzureError::Unavailable(Unavailable::Throttled)),
        "{error:?}"
    );
}

#[tokio::test]
async fn slow_provider_times_out_as_unavailable() {
    let fake = fake_with_principal().await;
    fake.set_failure(Some(Failure::Delay(Duration::from_secs(10))));

    let error = client(&fake)
        .with_timeout(Duration::from_millis(300))
        .token(TENANT, CLIENT_ID, &secret())
        .await
        .unwrap_err();

    assert!(
        matches!(error, AzureError::Unavailable(Unavailable::Timeout)),
        "{error:?}"
    );
}

#[tokio::test]
async fn malformed_token_answer_is_reported_without_its_content() {
    let fake = fake_with_principal().await;
    let answer = r#"{"token_type":"Bearer","access_token":"leaked-token-value"}"#;
    fake.set_failure(Some(Failure::Respond {
        status: 200,
        body: answer.into(),
    }));

    let error = client(&fake).token(TENANT, CLIENT_ID, &secret()).await.unwrap_err();

    assert!(matches!(error, AzureError::Malformed(_)), "{error:?}");
    assert!(!format!("{error} {error:?}").contains("leaked-token-value"));
}

#[test]
fn debug_output_hides_secrets() {
    let token = AccessToken {
        token: Secret::new("eyJ-access-token-value"),
        expires_at: Utc::now(),
    };
    let debug = format!("{token:?}");
    assert!(
        !debug.contains("eyJ-access-token-value") && debug.contains("[redacted]"),
        "{debug}"
    );
    assert!(!format!("{:?}", secret()).contains(CLIENT_SECRET));
}
