//! Given events, when a command, then events (or an error).

use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;

use super::*;

type Given = TestFramework<Connection>;

const OWNER: &str = "user-1";
const SECRET_REF: &str = "embedded:kv/data/secret/users/dev-user-1-cloud_c-token";

fn at(minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 9, minute, 0).unwrap()
}

fn pending() -> ConnectionEvent {
    ConnectionEvent::ConnectionPending {
        user_id: OWNER.into(),
        provider: Provider::CloudA,
        account_id: "project-1".into(),
        account_name: Some("Project One".into()),
        at: at(0),
    }
}

fn established(provider: Provider, account_id: &str) -> ConnectionEvent {
    ConnectionEvent::ConnectionEstablished {
        user_id: OWNER.into(),
        provider,
        account_id: account_id.into(),
        account_name: Some("Project One".into()),
        secret_ref: SECRET_REF.into(),
        at: at(1),
    }
}

fn connect(user_id: &str, provider: Provider, account_id: &str) -> ConnectionCommand {
    ConnectionCommand::Connect {
        user_id: user_id.into(),
        provider,
        account_id: account_id.into(),
        account_name: Some(" Project One ".into()),
        secret_ref: SECRET_REF.into(),
        at: at(1),
    }
}

fn disconnect(user_id: &str, credentials_kept: bool) -> ConnectionCommand {
    ConnectionCommand::Disconnect {
        user_id: user_id.into(),
        credentials_kept,
        at: at(2),
    }
}

fn disconnected(credentials_kept: bool) -> ConnectionEvent {
    ConnectionEvent::ConnectionDisconnected {
        credentials_kept,
        at: at(2),
    }
}

#[test]
fn begin_opens_a_pending_connection() {
    Given::with(())
        .given_no_previous_events()
        .when(ConnectionCommand::Begin {
            user_id: OWNER.into(),
            provider: Provider::CloudA,
            account_id: "project-1".into(),
            account_name: Some("Project One".into()),
            at: at(0),
        })
        .then_expect_events(vec![pending()]);
}

#[test]
fn begin_again_while_pending_changes_nothing() {
    Given::with(())
        .given(vec![pending()])
        .when(ConnectionCommand::Begin {
            user_id: OWNER.into(),
            provider: Provider::CloudA,
            account_id: "project-1".into(),
            account_name: Some("Project One".into()),
            at: at(3),
        })
        .then_expect_events(vec![]);
}

#[test]
fn connect_establishes_a_new_connection() {
    Given::with(())
        .given_no_previous_events()
        .when(connect(OWNER, Provider::CloudC, "sub-1"))
        .then_expect_events(vec![established(Provider::CloudC, "sub-1")]);
}

#[test]
fn connect_completes_a_pending_connection() {
    Given::with(())
        .given(vec![pending()])
        .when(connect(OWNER, Provider::CloudA, "project-1"))
        .then_expect_events(vec![established(Provider::CloudA, "project-1")]);
}

#[test]
fn connect_again_with_the_same_credentials_changes_nothing() {
    Given::with(())
        .given(vec![established(Provider::CloudC, "sub-1")])
        .when(connect(OWNER, Provider::CloudC, "sub-1"))
        .then_expect_events(vec![]);
}

#[test]
fn reconnect_after_a_disconnect_that_kept_credentials() {
    Given::with(())
        .given(vec![established(Provider::CloudC, "sub-1"), disconnected(true)])
        .when(connect(OWNER, Provider::CloudC, "sub-1"))
        .then_expect_events(vec![established(Provider::CloudC, "sub-1")]);
}

#[test]
fn connect_refuses_an_empty_account_or_secret_reference() {
    Given::with(())
        .given_no_previous_events()
        .when(connect(OWNER, Provider::CloudC, " "))
        .then_expect_error_message("account_id must be 1 to 255 characters");
    Given::with(())
        .given_no_previous_events()
        .when(ConnectionCommand::Connect {
            user_id: OWNER.into(),
            provider: Provider::CloudC,
            account_id: "sub-1".into(),
            account_name: None,
            secret_ref: String::new(),
            at: at(1),
        })
        .then_expect_error(ConnectionError::Invalid("a connection needs stored credentials".into()));
}

#[test]
fn another_user_cannot_take_over_a_connection() {
    Given::with(())
        .given(vec![established(Provider::CloudC, "sub-1")])
        .when(connect("intruder", Provider::CloudC, "sub-1"))
        .then_expect_error(ConnectionError::NotFound);
    Given::with(())
        .given(vec![established(Provider::CloudC, "sub-1")])
        .when(disconnect("intruder", true))
        .then_expect_error(ConnectionError::NotFound);
}

#[test]
fn disconnect_of_an_unknown_connection_changes_nothing() {
    Given::with(())
        .given_no_previous_events()
        .when(disconnect(OWNER, true))
        .then_expect_events(vec![]);
    Given::with(())
        .given_no_previous_events()
        .when(disconnect(OWNER, false))
        .then_expect_events(vec![]);
}

#[test]
fn disconnect_keeping_credentials() {
    Given::with(())
        .given(vec![established(Provider::CloudC, "sub-1")])
        .when(disconnect(OWNER, true))
        .then_expect_events(vec![disconnected(true)]);
}

#[test]
fn disconnect_twice_is_quiet_unless_credentials_are_now_deleted() {
    Given::with(())
        .given(vec![established(Provider::CloudC, "sub-1"), disconnected(true)])
        .when(disconnect(OWNER, true))
        .then_expect_events(vec![]);
    Given::with(())
        .given(vec![established(Provider::CloudC, "sub-1"), disconnected(true)])
        .when(disconnect(OWNER, false))
        .then_expect_events(vec![disconnected(false)]);
}

fn complete_setup(user_id: &str) -> ConnectionCommand {
    ConnectionCommand::CompleteSetup {
        user_id: user_id.into(),
        secret_ref: SECRET_REF.into(),
        at: at(3),
    }
}

#[test]
fn completed_setup_connects_a_pending_connection() {
    let ConnectionEvent::ConnectionPending {
        provider,
        account_id,
        account_name,
        ..
    } = pending()
    else {
        unreachable!()
    };
    Given::with(())
        .given(vec![pending()])
        .when(complete_setup(OWNER))
        .then_expect_events(vec![ConnectionEvent::ConnectionEstablished {
            user_id: OWNER.into(),
            provider,
            account_id,
            account_name,
            secret_ref: SECRET_REF.into(),
            at: at(3),
        }]);
}

#[test]
fn completed_setup_leaves_a_connection_disconnected_or_failed_meanwhile_as_it_is() {
    Given::with(())
        .given(vec![pending(), disconnected(true)])
        .when(complete_setup(OWNER))
        .then_expect_events(vec![]);
    Given::with(())
        .given(vec![
            pending(),
            ConnectionEvent::ConnectionFailed {
                reason: "setup failed".into(),
                at: at(2),
            },
        ])
        .when(complete_setup(OWNER))
        .then_expect_events(vec![]);
    Given::with(())
        .given(vec![pending()])
        .when(complete_setup("intruder"))
        .then_expect_error(ConnectionError::NotFound);
    Given::with(())
        .given_no_previous_events()
        .when(complete_setup(OWNER))
        .then_expect_error(ConnectionError::NotFound);
}

#[test]
fn fail_marks_a_connection_in_error_once() {
    let fail = || ConnectionCommand::Fail {
        user_id: OWNER.into(),
        reason: "refresh token expired".into(),
        at: at(4),
    };
    let failed = ConnectionEvent::ConnectionFailed {
        reason: "refresh token expired".into(),
        at: at(4),
    };
    Given::with(())
        .given(vec![established(Provider::CloudA, "project-1")])
        .when(fail())
        .then_expect_events(vec![failed.clone()]);
    Given::with(())
        .given(vec![established(Provider::CloudA, "project-1"), failed])
        .when(fail())
        .then_expect_events(vec![]);
    Given::with(())
        .given(vec![established(Provider::CloudA, "project-1"), disconnected(false)])
        .when(fail())
        .then_expect_events(vec![]);
}

#[test]
fn status_follows_the_events() {
    let mut connection = Connection::default();
    assert_eq!(connection.status(), ConnectionStatus::NotConnected);
    connection.apply(pending());
    assert_eq!(connection.status(), ConnectionStatus::Pending);
    connection.apply(established(Provider::CloudA, "project-1"));
    assert_eq!(connection.status(), ConnectionStatus::Connected);
    connection.apply(disconnected(false));
    assert_eq!(connection.status(), ConnectionStatus::NotConnected);
    assert_eq!(connection.secret_ref, None);
}

#[test]
fn connection_ids_are_distinct_per_user_provider_and_account() {
    let a = connection_id("u:1", Provider::CloudA, "p");
    assert_ne!(a, connection_id("u", Provider::CloudA, "1:p"));
    assert_ne!(a, connection_id("u:1", Provider::CloudB, "p"));
    assert_eq!(a, connection_id("u:1", Provider::CloudA, "p"));
}

#[test]
fn providers_parse_from_their_tokens() {
    for provider in Provider::ALL {
        assert_eq!(provider.as_str().parse::<Provider>(), Ok(provider));
    }
    assert!("aws".parse::<Provider>().is_err());
}
