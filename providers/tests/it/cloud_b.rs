use std::time::Duration;

use chrono::{TimeDelta, TimeZone, Utc};
use vigil_providers::cloud_b::{
    external_id_for, RoleArn, RoleArnError, ServiceCredentials, StsClient, StsError, TemporaryCredentials,
};
use vigil_providers::fake::{Failure, FakeSts};
use vigil_providers::{needs_refresh, Secret, Unavailable};

const SERVICE_KEY_ID: &str = "AKIAVIGILSERVICE0001";
const SERVICE_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSERVICEKEY";
const ROLE: &str = "arn:aws:iam::123456789012:role/VigilReadOnly";
const EXTERNAL_ID: &str = "vigil-0123456789abcdef0123456789abcdef";

fn service() -> ServiceCredentials {
    ServiceCredentials::new(SERVICE_KEY_ID, SERVICE_SECRET, None)
}

fn role() -> RoleArn {
    ROLE.parse().unwrap()
}

async fn fake_with_role() -> FakeSts {
    let fake = FakeSts::start(service()).await;
    fake.add_role(&role(), EXTERNAL_ID);
    fake
}

fn client(fake: &FakeSts, credentials: ServiceCredentials) -> StsClient {
    StsClient::new(credentials).with_endpoint(fake.url())
}

#[test]
fn role_arn_table() {
    let valid = [
        (
            "arn:aws:iam::123456789012:role/VigilReadOnly",
            "123456789012",
            "VigilReadOnly",
        ),
        ("arn:aws:iam::000000000001:role/a", "000000000001", "a"),
        (
            "arn:aws:iam::123456789012:role/path/to/Name_+=,.@-",
            "123456789012",
            "Name_+=,.@-",
        ),
        ("arn:aws:iam::123456789012:role/service-role/x", "123456789012", "x"),
    ];
    for (input, account, name) in valid {
        let arn: RoleArn = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(
            (arn.account_id(), arn.role_name(), arn.as_str()),
            (account, name, input)
        );
        assert_eq!(arn.to_string(), input);
    }

    let long_name = format!("arn:aws:iam::123456789012:role/{}", "n".repeat(65));
    let longest_name = format!("arn:aws:iam::123456789012:role/{}", "n".repeat(64));
    assert!(longest_name.parse::<RoleArn>().is_ok());
    let long_path = format!("arn:aws:iam::123456789012:role/{}/name", "p".repeat(511));
    let invalid = [
        ("", RoleArnError::Format),
        ("VigilReadOnly", RoleArnError::Format),
        ("arn:aws:s3:::bucket", RoleArnError::Format),
        ("arn:aws-cn:iam::123456789012:role/x", RoleArnError::Format),
        (" arn:aws:iam::123456789012:role/x", RoleArnError::Format),
        ("arn:aws:iam::123456789012:user/x", RoleArnError::Format),
        ("arn:aws:iam::123456789012:role", RoleArnError::Format),
        ("arn:aws:iam::123456789012", RoleArnError::Format),
        ("arn:aws:iam::12345678901:role/x", RoleArnError::AccountId),
        ("arn:aws:iam::1234567890123:role/x", RoleArnError::AccountId),
        ("arn:aws:iam::12345678901a:role/x", RoleArnError::AccountId),
        ("arn:aws:iam:::role/x", RoleArnError::AccountId),
        ("arn:aws:iam::123456789012:role/", RoleArnError::RoleName),
        ("arn:aws:iam::123456789012:role/bad name", RoleArnError::RoleName),
        ("arn:aws:iam::123456789012:role/bad*name", RoleArnError::RoleName),
        ("arn:aws:iam::123456789012:role/é", RoleArnError::RoleName),
        ("arn:aws:iam::123456789012:role/path/", RoleArnError::RoleName),
        (long_name.as_str(), RoleArnError::RoleName),
        ("arn:aws:iam::123456789012:role//x", RoleArnError::RolePath),
        ("arn:aws:iam::123456789012:role/a//x", RoleArnError::RolePath),
        ("arn:aws:iam::123456789012:role/sp ace/x", RoleArnError::RolePath),
        (long_path.as_str(), RoleArnError::RolePath),
    ];
    for (input, expected) in invalid {
        assert_eq!(input.parse::<RoleArn>(), Err(expected), "{input}");
    }
}

#[test]
fn external_id_is_stable_and_per_user() {
    let key = b"workspace-secret-key-of-32-bytes";
    // Computed independently: printf 'vigil/cloud_b/external-id/v1\0user-42' | openssl dgst -sha256 -hmac <key>.
    // A change here breaks every trust policy users have written: the derivation must never change.
    assert_eq!(
        external_id_for(key, "user-42"),
        "vigil-c6229144550da34c5989ff19b3e4f845"
    );
    assert_eq!(external_id_for(key, "user-42"), external_id_for(key, "user-42"));
    assert_ne!(external_id_for(key, "user-42"), external_id_for(key, "user-43"));
    assert_ne!(
        external_id_for(key, "user-42"),
        external_id_for(b"another-workspace-secret-key-xyz", "user-42")
    );
}

#[test]
fn refresh_within_five_minutes_of_expiry() {
    let now = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
    assert!(!needs_refresh(now + TimeDelta::minutes(60), now));
    assert!(!needs_refresh(now + TimeDelta::seconds(301), now));
    assert!(needs_refresh(now + TimeDelta::seconds(300), now));
    assert!(needs_refresh(now + TimeDelta::seconds(299), now));
    assert!(needs_refresh(now, now));
    assert!(needs_refresh(now - TimeDelta::minutes(1), now));
}

#[tokio::test]
async fn assume_role_returns_the_issued_credentials() {
    let fake = fake_with_role().await;
    let before = Utc::now();
    let credentials = client(&fake, service())
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap();
    let after = Utc::now();

    let issued = fake.issued();
    assert_eq!(issued.len(), 1);
    let issued = &issued[0];
    assert_eq!(credentials.access_key_id, issued.access_key_id);
    assert!(credentials.access_key_id.starts_with("ASIA"));
    assert_eq!(
        credentials.secret_access_key.expose(),
        issued.secret_access_key.expose()
    );
    assert_eq!(credentials.session_token.expose(), issued.session_token.expose());
    assert_eq!(
        credentials.assumed_role_arn,
        "arn:aws:sts::123456789012:assumed-role/VigilReadOnly/vigil-user-42"
    );
    // The document carries whole seconds.
    assert!(
        credentials.expiration >= before + TimeDelta::seconds(3599),
        "{}",
        credentials.expiration
    );
    assert!(
        credentials.expiration <= after + TimeDelta::seconds(3600),
        "{}",
        credentials.expiration
    );
    assert!(!credentials.needs_refresh(Utc::now()));

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/"));
    for (name, value) in [
        ("Action", "AssumeRole"),
        ("Version", "2011-06-15"),
        ("RoleArn", ROLE),
        ("RoleSessionName", "vigil-user-42"),
        ("ExternalId", EXTERNAL_ID),
        ("DurationSeconds", "3600"),
    ] {
        assert_eq!(request.form_value(name).as_deref(), Some(value), "{name}");
    }
    let authorization = request.header("authorization").unwrap();
    let scope = format!(
        "AWS4-HMAC-SHA256 Credential={SERVICE_KEY_ID}/{}/us-east-1/sts/aws4_request",
        request.header("x-amz-date").unwrap().get(..8).unwrap()
    );
    assert!(authorization.starts_with(&scope), "{authorization}");
    assert!(
        authorization.contains("SignedHeaders=content-type;host;x-amz-date"),
        "{authorization}"
    );
}

#[tokio::test]
async fn assume_role_with_a_service_session_token() {
    let token = "IQoJb3JpZ2luX2VjEFAKESERVICESESSIONTOKEN";
    let credentials = ServiceCredentials::new(SERVICE_KEY_ID, SERVICE_SECRET, Some(Secret::new(token)));
    let fake = FakeSts::start(credentials.clone()).await;
    fake.add_role(&role(), EXTERNAL_ID);

    client(&fake, credentials)
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 900)
        .await
        .unwrap();

    let request = &fake.requests()[0];
    assert_eq!(request.header("x-amz-security-token"), Some(token));
    assert!(request
        .header("authorization")
        .unwrap()
        .contains("x-amz-security-token"));
    // Without the token, the same fake refuses the service.
    let error = client(&fake, service())
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 900)
        .await
        .unwrap_err();
    assert!(matches!(&error, StsError::ServiceCredentialsRejected { code, .. } if code == "InvalidClientTokenId"));
}

#[tokio::test]
async fn configured_expiration_is_reported() {
    let fake = fake_with_role().await;
    let expiration = Utc::now() + TimeDelta::seconds(200);
    let expiration = expiration - TimeDelta::nanoseconds(expiration.timestamp_subsec_nanos().into());
    fake.set_expiration(Some(expiration));

    let credentials = client(&fake, service())
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap();

    assert_eq!(credentials.expiration, expiration);
    assert!(credentials.needs_refresh(Utc::now()));
}

#[tokio::test]
async fn wrong_or_missing_external_id_is_access_denied() {
    let fake = fake_with_role().await;
    let client = client(&fake, service());

    for external_id in ["vigil-somebody-else", ""] {
        let error = client
            .assume_role(&role(), external_id, "vigil-user-42", 3600)
            .await
            .unwrap_err();
        let StsError::AccessDenied(message) = &error else {
            panic!("{external_id:?}: {error:?}")
        };
        assert!(
            message.contains("sts:AssumeRole") && message.contains(ROLE),
            "{message}"
        );
    }
    let unknown: RoleArn = "arn:aws:iam::210987654321:role/Unknown".parse().unwrap();
    let error = client
        .assume_role(&unknown, EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();
    assert!(matches!(error, StsError::AccessDenied(_)), "{error:?}");
    assert!(fake.issued().is_empty());
}

#[tokio::test]
async fn wrong_service_secret_fails_the_signature_check() {
    let fake = fake_with_role().await;
    let wrong = ServiceCredentials::new(SERVICE_KEY_ID, "not-the-service-secret", None);

    let error = client(&fake, wrong)
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();

    let StsError::ServiceCredentialsRejected { code, message } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(code, "SignatureDoesNotMatch");
    assert!(message.contains("does not match"), "{message}");
    assert!(!format!("{error} {error:?}").contains("not-the-service-secret"));
    assert!(fake.issued().is_empty());
}

#[tokio::test]
async fn unknown_service_key_is_rejected() {
    let fake = fake_with_role().await;
    let other = ServiceCredentials::new("AKIAUNKNOWNKEY000001", SERVICE_SECRET, None);

    let error = client(&fake, other)
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();

    assert!(matches!(&error, StsError::ServiceCredentialsRejected { code, .. } if code == "InvalidClientTokenId"));
}

#[tokio::test]
async fn wrong_region_fails_the_signature_check() {
    let fake = fake_with_role().await;

    let error = client(&fake, service())
        .with_region("eu-west-3")
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();

    assert!(matches!(&error, StsError::ServiceCredentialsRejected { code, .. } if code == "SignatureDoesNotMatch"));
}

#[tokio::test]
async fn invalid_duration_is_rejected_by_sts() {
    let fake = fake_with_role().await;

    let error = client(&fake, service())
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 60)
        .await
        .unwrap_err();

    assert!(
        matches!(&error, StsError::Rejected { code, .. } if code == "ValidationError"),
        "{error:?}"
    );
}

#[tokio::test]
async fn provider_errors_and_outages_are_unavailable() {
    let fake = fake_with_role().await;
    let client = client(&fake, service());

    fake.set_failure(Some(Failure::Respond {
        status: 503,
        body: "<html>Service Unavailable</html>".into(),
    }));
    let error = client
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();
    assert!(
        matches!(error, StsError::Unavailable(Unavailable::Status(503))),
        "{error:?}"
    );

    let throttling = "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message>\
                      </Error></ErrorResponse>";
    fake.set_failure(Some(Failure::Respond {
        status: 400,
        body: throttling.into(),
    }));
    let error = client
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();
    assert!(
        matches!(error, StsError::Unavailable(Unavailable::Throttled)),
        "{error:?}"
    );
}

#[tokio::test]
async fn slow_provider_times_out_as_unavailable() {
    let fake = fake_with_role().await;
    fake.set_failure(Some(Failure::Delay(Duration::from_secs(10))));

    let error = client(&fake, service())
        .with_timeout(Duration::from_millis(300))
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();

    assert!(
        matches!(error, StsError::Unavailable(Unavailable::Timeout)),
        "{error:?}"
    );
}

#[tokio::test]
async fn unreachable_provider_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap()).parse().unwrap();
    drop(listener);

    let error = StsClient::new(service())
        .with_endpoint(url)
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();

    assert!(
        matches!(error, StsError::Unavailable(Unavailable::Unreachable(_))),
        "{error:?}"
    );
}

#[tokio::test]
async fn malformed_answers_are_reported_without_their_content() {
    let fake = fake_with_role().await;
    let client = client(&fake, service());

    let truncated = "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIAX</AccessKeyId>\
                     <SecretAccessKey>leaked-secret</SecretAccessKey></Credentials>";
    fake.set_failure(Some(Failure::Respond {
        status: 200,
        body: truncated.into(),
    }));
    let error = client
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();
    assert!(matches!(error, StsError::Malformed(_)), "{error:?}");
    assert!(!format!("{error} {error:?}").contains("leaked-secret"));

    fake.set_failure(Some(Failure::Respond {
        status: 403,
        body: "Forbidden".into(),
    }));
    let error = client
        .assume_role(&role(), EXTERNAL_ID, "vigil-user-42", 3600)
        .await
        .unwrap_err();
    assert!(matches!(error, StsError::Malformed(_)), "{error:?}");
}

#[test]
fn debug_output_hides_secrets() {
    let credentials = TemporaryCredentials {
        access_key_id: "ASIAEXAMPLE".into(),
        secret_access_key: Secret::new("temporary-secret-value"),
        session_token: Secret::new("temporary-session-token"),
        expiration: Utc::now(),
        assumed_role_arn: "arn:aws:sts::123456789012:assumed-role/VigilReadOnly/s".into(),
    };
    let service = ServiceCredentials::new(SERVICE_KEY_ID, SERVICE_SECRET, Some(Secret::new("service-token")));
    let client = StsClient::new(service.clone());

    for debug in [
        format!("{credentials:?}"),
        format!("{service:?}"),
        format!("{client:?}"),
    ] {
        for secret in [
            "temporary-secret-value",
            "temporary-session-token",
            SERVICE_SECRET,
            "service-token",
        ] {
            assert!(!debug.contains(secret), "{debug}");
        }
        assert!(debug.contains("[redacted]"), "{debug}");
    }
    assert!(format!("{credentials:?}").contains("ASIAEXAMPLE"));
}
