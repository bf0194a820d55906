use std::time::Duration;

use vigil_providers::cloud_d::{AccessKey, KeyFormatError, Project, ScalewayClient, ScalewayError, SecretKey};
use vigil_providers::fake::{Failure, FakeScaleway};
use vigil_providers::Unavailable;

const ACCESS_KEY: &str = "SCW1A2B3C4D5E6F7G8H9";
const SECRET_KEY: &str = "6c2c5b1e-8f3a-4d2b-9c1e-7a8b9c0d1e2f";
const ORGANIZATION: &str = "3e44a89e-1f75-45f5-9b93-422db94165eb";
const OTHER_ORGANIZATION: &str = "b1c2d3e4-0000-4000-8000-000000000000";

fn access_key() -> AccessKey {
    ACCESS_KEY.parse().unwrap()
}

fn secret_key() -> SecretKey {
    SECRET_KEY.parse().unwrap()
}

fn project(n: u32, organization_id: &str) -> Project {
    Project {
        project_id: format!("6170692e-7363-616c-6577-{n:012}"),
        project_name: format!("project-{n}"),
        organization_id: organization_id.to_owned(),
        description: format!("Project number {n}"),
        enabled: true,
    }
}

/// A fake with the key pair, its organization's default project 1, and another organization's key and project.
async fn fake() -> FakeScaleway {
    let fake = FakeScaleway::start().await;
    fake.add_api_key(
        &access_key(),
        &secret_key(),
        ORGANIZATION,
        &project(1, ORGANIZATION).project_id,
    );
    let other_key: AccessKey = "SCW00000000000000000".parse().unwrap();
    let other_secret: SecretKey = "00000000-1111-4222-8333-444444444444".parse().unwrap();
    fake.add_api_key(
        &other_key,
        &other_secret,
        OTHER_ORGANIZATION,
        &project(9, OTHER_ORGANIZATION).project_id,
    );
    fake.add_project(project(1, ORGANIZATION));
    fake.add_project(project(9, OTHER_ORGANIZATION));
    fake
}

fn client(fake: &FakeScaleway) -> ScalewayClient {
    ScalewayClient::new().with_base(fake.url())
}

#[test]
fn access_key_format() {
    for valid in [ACCESS_KEY, "SCWAAAAAAAAAAAAAAAAA", "SCW00000000000000000"] {
        assert_eq!(
            valid.parse::<AccessKey>().map(|key| key.to_string()),
            Ok(valid.to_owned())
        );
    }
    for invalid in [
        "",
        "SCW",
        "SCW1A2B3C4D5E6F7G8H",   // 19 characters
        "SCW1A2B3C4D5E6F7G8H9X", // 21
        "AKIA1A2B3C4D5E6F7G8H",  // other prefix
        "scw1a2b3c4d5e6f7g8h9",  // lowercase
        "SCW1a2b3c4d5e6f7g8h9",  // lowercase after the prefix
        "SCW1A2B3C4D5E6F7G8H-",  // punctuation
        " SCW1A2B3C4D5E6F7G8H9", // surrounding space
        "SCW1A2B3C4D5E6F7G8É",   // non-ASCII, 20 bytes
    ] {
        assert_eq!(
            invalid.parse::<AccessKey>(),
            Err(KeyFormatError::AccessKey),
            "{invalid:?}"
        );
    }
}

#[test]
fn secret_key_format() {
    for valid in [SECRET_KEY, "6C2C5B1E-8F3A-4D2B-9C1E-7A8B9C0D1E2F"] {
        assert_eq!(valid.parse::<SecretKey>().unwrap().expose(), valid);
    }
    for invalid in [
        "",
        "not-a-uuid",
        "6c2c5b1e8f3a4d2b9c1e7a8b9c0d1e2f",
        "{6c2c5b1e-8f3a-4d2b-9c1e-7a8b9c0d1e2f}",
        "urn:uuid:6c2c5b1e-8f3a-4d2b-9c1e-7a8b9c0d1e2f",
        "6c2c5b1e-8f3a-4d2b-9c1e-7a8b9c0d1e2g",
        " 6c2c5b1e-8f3a-4d2b-9c1e-7a8b9c0d1e2",
    ] {
        let error = invalid.parse::<SecretKey>().unwrap_err();
        assert_eq!(error, KeyFormatError::SecretKey, "{invalid:?}");
        assert!(invalid.is_empty() || !error.to_string().contains(invalid));
    }
}

#[test]
fn debug_output_hides_the_secret_key() {
    let debug = format!("{:?}", secret_key());
    assert!(!debug.contains(SECRET_KEY) && debug.contains("[redacted]"), "{debug}");
}

#[tokio::test]
async fn organization_comes_from_the_default_project() {
    let fake = fake().await;

    let organization = client(&fake)
        .organization_of(&access_key(), &secret_key())
        .await
        .unwrap();

    assert_eq!(organization, ORGANIZATION);
    let requests = fake.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    let project_path = format!("/account/v3/projects/{}", project(1, ORGANIZATION).project_id);
    assert_eq!(
        paths,
        [
            format!("/iam/v1alpha1/api-keys/{ACCESS_KEY}").as_str(),
            project_path.as_str()
        ]
    );
    assert!(requests.iter().all(|r| r.header("x-auth-token") == Some(SECRET_KEY)));
}

#[tokio::test]
async fn organization_comes_from_the_key_when_it_carries_it() {
    let fake = fake().await;
    fake.set_api_key_shows_organization(true);

    let organization = client(&fake)
        .organization_of(&access_key(), &secret_key())
        .await
        .unwrap();

    assert_eq!(organization, ORGANIZATION);
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn unknown_access_key_or_secret_is_invalid_credentials() {
    let fake = fake().await;
    let client = client(&fake);
    let unknown_key: AccessKey = "SCWZZZZZZZZZZZZZZZZZ".parse().unwrap();
    let unknown_secret: SecretKey = "99999999-9999-4999-8999-999999999999".parse().unwrap();

    let error = client.organization_of(&unknown_key, &secret_key()).await.unwrap_err();
    assert!(matches!(error, ScalewayError::InvalidCredentials(_)), "{error:?}");

    let error = client
        .organization_of(&access_key(), &unknown_secret)
        .await
        .unwrap_err();
    let ScalewayError::InvalidCredentials(message) = &error else {
        panic!("{error:?}")
    };
    assert_eq!(message, "authentication is denied");
    assert!(!format!("{error} {error:?}").contains("99999999-9999"));

    let error = client.list_projects(&unknown_secret, ORGANIZATION).await.unwrap_err();
    assert!(matches!(error, ScalewayError::InvalidCredentials(_)), "{error:?}");
    let error = client.validate(&unknown_secret, ORGANIZATION).await.unwrap_err();
    assert!(matches!(error, ScalewayError::InvalidCredentials(_)), "{error:?}");
}

#[tokio::test]
async fn another_organizations_key_is_access_denied() {
    let fake = fake().await;
    let other_key: AccessKey = "SCW00000000000000000".parse().unwrap();

    let error = client(&fake)
        .organization_of(&other_key, &secret_key())
        .await
        .unwrap_err();

    assert!(matches!(error, ScalewayError::AccessDenied(_)), "{error:?}");
}

#[tokio::test]
async fn projects_follow_pages() {
    let fake = fake().await;
    let expected: Vec<Project> = (1..=5).map(|n| project(n, ORGANIZATION)).collect();
    for project in &expected[1..] {
        fake.add_project(project.clone());
    }
    fake.set_max_page_size(2);

    let projects = client(&fake).list_projects(&secret_key(), ORGANIZATION).await.unwrap();

    assert_eq!(projects, expected);
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    for (page, request) in requests.iter().enumerate() {
        assert_eq!(request.path, "/account/v3/projects");
        assert_eq!(request.query_value("organization_id").as_deref(), Some(ORGANIZATION));
        assert_eq!(request.query_value("page"), Some((page + 1).to_string()));
        assert_eq!(request.query_value("page_size").as_deref(), Some("100"));
    }
}

#[tokio::test]
async fn another_organizations_projects_are_access_denied() {
    let fake = fake().await;

    let error = client(&fake)
        .list_projects(&secret_key(), OTHER_ORGANIZATION)
        .await
        .unwrap_err();

    assert!(matches!(error, ScalewayError::AccessDenied(_)), "{error:?}");
}

#[tokio::test]
async fn validate_makes_one_cheap_call() {
    let fake = fake().await;

    client(&fake).validate(&secret_key(), ORGANIZATION).await.unwrap();

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].query_value("organization_id").as_deref(),
        Some(ORGANIZATION)
    );
    assert_eq!(requests[0].query_value("page_size").as_deref(), Some("1"));
    assert_eq!(requests[0].header("x-auth-token"), Some(SECRET_KEY));
}

#[tokio::test]
async fn provider_errors_and_outages_are_unavailable() {
    let fake = fake().await;
    let client = client(&fake);

    fake.set_failure(Some(Failure::Respond {
        status: 502,
        body: "<html>Bad Gateway</html>".into(),
    }));
    let error = client.organization_of(&access_key(), &secret_key()).await.unwrap_err();
    assert!(
        matches!(error, ScalewayError::Unavailable(Unavailable::Status(502))),
        "{error:?}"
    );
    let error = client.validate(&secret_key(), ORGANIZATION).await.unwrap_err();
    assert!(
        matches!(error, ScalewayError::Unavailable(Unavailable::Status(502))),
        "{error:?}"
    );
}

#[tokio::test]
async fn slow_provider_times_out_as_unavailable() {
    let fake = fake().await;
    fake.set_failure(Some(Failure::Delay(Duration::from_secs(10))));

    let error = client(&fake)
        .with_timeout(Duration::from_millis(300))
        .list_projects(&secret_key(), ORGANIZATION)
        .await
        .unwrap_err();

    assert!(
        matches!(error, ScalewayError::Unavailable(Unavailable::Timeout)),
        "{error:?}"
    );
}

#[tokio::test]
async fn malformed_listing_is_malformed() {
    let fake = fake().await;
    fake.set_failure(Some(Failure::Respond {
        status: 200,
        body: r#"{"items":[]}"#.into(),
    }));

    let error = client(&fake)
        .list_projects(&secret_key(), ORGANIZATION)
        .await
        .unwrap_err();

    assert!(matches!(error, ScalewayError::Malformed(_)), "{error:?}");
}
