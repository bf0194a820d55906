//! Given events, when a command, then events (or an error).

use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::*;

type Given = TestFramework<ChatSession>;

const OWNER: &str = "user-1";

fn at(minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 20, 12, minute, 0).unwrap()
}

fn session_id() -> Uuid {
    Uuid::from_u128(7)
}

fn ui(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

fn created(title: &str, messages: Vec<Message>) -> ChatSessionEvent {
    ChatSessionEvent::ChatSessionCreated {
        session_id: session_id(),
        user_id: OWNER.into(),
        title: title.into(),
        messages,
        ui_state: Map::new(),
        incident_id: None,
        at: at(0),
    }
}

fn create(title: Option<&str>, messages: Vec<Message>) -> ChatSessionCommand {
    ChatSessionCommand::Create {
        session_id: session_id(),
        user_id: OWNER.into(),
        title: title.map(Into::into),
        messages,
        ui_state: Map::new(),
        incident_id: None,
        at: at(0),
    }
}

fn update(title: Option<&str>, messages: Option<Vec<Message>>, ui_state: Option<Value>) -> ChatSessionCommand {
    ChatSessionCommand::Update {
        user_id: OWNER.into(),
        title: title.map(Into::into),
        messages,
        ui_state: ui_state.map(ui),
        at: at(5),
    }
}

fn status(status: SessionStatus) -> ChatSessionEvent {
    ChatSessionEvent::StatusChanged { status, at: at(3) }
}

#[test]
fn create_with_a_title_keeps_it() {
    Given::with(())
        .given_no_previous_events()
        .when(create(Some("  Disk alerts  "), vec![]))
        .then_expect_events(vec![created("Disk alerts", vec![])]);
}

#[test]
fn create_without_a_title_generates_one_from_the_first_user_message() {
    let messages = vec![Message::user("Why did the checkout deploy fail last night?")];
    Given::with(())
        .given_no_previous_events()
        .when(create(None, messages.clone()))
        .then_expect_events(vec![created("Why did the checkout deploy fail last night?", messages)]);
}

#[test]
fn create_without_messages_is_a_new_chat() {
    Given::with(())
        .given_no_previous_events()
        .when(create(Some(" "), vec![]))
        .then_expect_events(vec![created(DEFAULT_TITLE, vec![])]);
}

#[test]
fn create_twice_is_refused() {
    Given::with(())
        .given(vec![created("t", vec![])])
        .when(create(Some("t"), vec![]))
        .then_expect_error(ChatSessionError::AlreadyExists);
}

#[test]
fn create_refuses_a_title_over_255_characters() {
    Given::with(())
        .given_no_previous_events()
        .when(create(Some(&"x".repeat(256)), vec![]))
        .then_expect_error_message("title must be at most 255 characters");
}

#[test]
fn update_changes_only_provided_fields() {
    let messages = vec![Message::user("hi"), Message::assistant("hello")];
    Given::with(())
        .given(vec![created("Named", vec![])])
        .when(update(
            None,
            Some(messages.clone()),
            Some(json!({ "selectedMode": "ask" })),
        ))
        .then_expect_events(vec![
            ChatSessionEvent::MessagesRevised {
                from: 0,
                messages,
                at: at(5),
            },
            ChatSessionEvent::UiStateChanged {
                ui_state: ui(json!({ "selectedMode": "ask" })),
                at: at(5),
            },
        ]);
}

#[test]
fn update_records_only_the_messages_after_those_it_already_has() {
    let earlier = vec![Message::user("Why is checkout slow?"), Message::assistant("Looking.")];
    let mut sent = earlier.clone();
    sent.push(Message::user("And payments?"));
    Given::with(())
        .given(vec![created("Named", earlier)])
        .when(update(None, Some(sent), None))
        .then_expect_events(vec![ChatSessionEvent::MessagesRevised {
            from: 2,
            messages: vec![Message::user("And payments?")],
            at: at(5),
        }]);
}

#[test]
fn update_that_edits_a_message_records_it_and_everything_after_it() {
    let earlier = vec![
        Message::user("Why is checkout slow?"),
        Message::assistant("Look"),
        Message::user("Thanks"),
    ];
    let sent = vec![
        Message::user("Why is checkout slow?"),
        Message::assistant("Looking at the traces."),
        Message::user("Thanks"),
    ];
    Given::with(())
        .given(vec![created("Named", earlier)])
        .when(update(None, Some(sent), None))
        .then_expect_events(vec![ChatSessionEvent::MessagesRevised {
            from: 1,
            messages: vec![Message::assistant("Looking at the traces."), Message::user("Thanks")],
            at: at(5),
        }]);
}

#[test]
fn update_with_fewer_messages_drops_the_rest() {
    let earlier = vec![Message::user("one"), Message::assistant("two")];
    Given::with(())
        .given(vec![created("Named", earlier)])
        .when(update(None, Some(vec![Message::user("one")]), None))
        .then_expect_events(vec![ChatSessionEvent::MessagesRevised {
            from: 1,
            messages: vec![],
            at: at(5),
        }]);
}

#[test]
fn update_with_the_same_messages_only_touches_the_session() {
    let earlier = vec![Message::user("one"), Message::assistant("two")];
    Given::with(())
        .given(vec![created("Named", earlier.clone())])
        .when(update(None, Some(earlier), None))
        .then_expect_events(vec![ChatSessionEvent::ChatSessionTouched { at: at(5) }]);
}

#[test]
fn revisions_apply_on_top_of_the_conversation_so_far() {
    let mut session = ChatSession::default();
    for event in [
        created("Named", vec![Message::user("one"), Message::assistant("tw")]),
        ChatSessionEvent::MessagesRevised {
            from: 1,
            messages: vec![Message::assistant("two"), Message::user("three")],
            at: at(5),
        },
        ChatSessionEvent::MessagesReplaced {
            messages: vec![Message::user("four")],
            at: at(6),
        },
        ChatSessionEvent::MessagesRevised {
            from: 1,
            messages: vec![Message::assistant("five")],
            at: at(7),
        },
    ] {
        session.apply(event);
    }
    assert_eq!(
        session.messages,
        vec![Message::user("four"), Message::assistant("five")]
    );
}

#[test]
fn update_renames() {
    Given::with(())
        .given(vec![created("Old", vec![])])
        .when(update(Some("New"), None, None))
        .then_expect_events(vec![ChatSessionEvent::TitleChanged {
            title: "New".into(),
            at: at(5),
        }]);
}

#[test]
fn update_of_a_new_chat_without_title_generates_it_from_the_messages() {
    let messages = vec![Message::user("Pods in payments keep restarting")];
    Given::with(())
        .given(vec![created(DEFAULT_TITLE, vec![])])
        .when(update(None, Some(messages.clone()), None))
        .then_expect_events(vec![
            ChatSessionEvent::TitleChanged {
                title: "Pods in payments keep restarting".into(),
                at: at(5),
            },
            ChatSessionEvent::MessagesRevised {
                from: 0,
                messages,
                at: at(5),
            },
        ]);
}

#[test]
fn update_with_nothing_still_touches_the_session() {
    Given::with(())
        .given(vec![created("Named", vec![])])
        .when(update(None, None, None))
        .then_expect_events(vec![ChatSessionEvent::ChatSessionTouched { at: at(5) }]);
}

#[test]
fn update_of_a_completed_or_cancelled_session_is_refused() {
    for closed in [SessionStatus::Completed, SessionStatus::Cancelled] {
        Given::with(())
            .given(vec![created("t", vec![]), status(closed)])
            .when(update(Some("x"), None, None))
            .then_expect_error(ChatSessionError::Closed(closed));
    }
}

#[test]
fn update_refuses_a_title_over_255_characters() {
    Given::with(())
        .given(vec![created("t", vec![])])
        .when(update(Some(&"x".repeat(256)), None, None))
        .then_expect_error_message("title must be at most 255 characters");
}

#[test]
fn another_users_session_is_not_found() {
    Given::with(())
        .given(vec![created("t", vec![])])
        .when(ChatSessionCommand::Update {
            user_id: "intruder".into(),
            title: Some("mine now".into()),
            messages: None,
            ui_state: None,
            at: at(5),
        })
        .then_expect_error(ChatSessionError::NotFound);
}

#[test]
fn a_deleted_session_refuses_everything() {
    let deleted = vec![created("t", vec![]), ChatSessionEvent::ChatSessionDeleted { at: at(4) }];
    let user_id = || OWNER.to_owned();
    let commands = vec![
        update(Some("x"), None, None),
        ChatSessionCommand::AppendMessage {
            user_id: user_id(),
            message: Message::user("hi"),
            at: at(5),
        },
        ChatSessionCommand::MarkInProgress {
            user_id: user_id(),
            at: at(5),
        },
        ChatSessionCommand::Reactivate {
            user_id: user_id(),
            at: at(5),
        },
        ChatSessionCommand::Complete {
            user_id: user_id(),
            at: at(5),
        },
        ChatSessionCommand::Cancel {
            user_id: user_id(),
            at: at(5),
        },
        ChatSessionCommand::Delete {
            user_id: user_id(),
            at: at(5),
        },
    ];
    for command in commands {
        Given::with(())
            .given(deleted.clone())
            .when(command)
            .then_expect_error(ChatSessionError::NotFound);
    }
}

#[test]
fn commands_on_a_session_that_never_existed_are_not_found() {
    Given::with(())
        .given_no_previous_events()
        .when(ChatSessionCommand::Delete {
            user_id: OWNER.into(),
            at: at(1),
        })
        .then_expect_error(ChatSessionError::NotFound);
}

#[test]
fn append_message() {
    let message = Message::assistant("Restarted the pod.");
    Given::with(())
        .given(vec![created("t", vec![])])
        .when(ChatSessionCommand::AppendMessage {
            user_id: OWNER.into(),
            message: message.clone(),
            at: at(6),
        })
        .then_expect_events(vec![ChatSessionEvent::MessageAppended { message, at: at(6) }]);
}

#[test]
fn mark_in_progress_then_reactivate() {
    Given::with(())
        .given(vec![created("t", vec![])])
        .when(ChatSessionCommand::MarkInProgress {
            user_id: OWNER.into(),
            at: at(3),
        })
        .then_expect_events(vec![status(SessionStatus::InProgress)]);
    Given::with(())
        .given(vec![created("t", vec![]), status(SessionStatus::InProgress)])
        .when(ChatSessionCommand::Reactivate {
            user_id: OWNER.into(),
            at: at(3),
        })
        .then_expect_events(vec![status(SessionStatus::Active)]);
}

#[test]
fn mark_in_progress_of_a_closed_session_is_refused() {
    Given::with(())
        .given(vec![created("t", vec![]), status(SessionStatus::Completed)])
        .when(ChatSessionCommand::MarkInProgress {
            user_id: OWNER.into(),
            at: at(3),
        })
        .then_expect_error(ChatSessionError::Closed(SessionStatus::Completed));
}

#[test]
fn complete_and_cancel() {
    Given::with(())
        .given(vec![created("t", vec![])])
        .when(ChatSessionCommand::Complete {
            user_id: OWNER.into(),
            at: at(3),
        })
        .then_expect_events(vec![status(SessionStatus::Completed)]);
    Given::with(())
        .given(vec![created("t", vec![]), status(SessionStatus::InProgress)])
        .when(ChatSessionCommand::Cancel {
            user_id: OWNER.into(),
            at: at(3),
        })
        .then_expect_events(vec![status(SessionStatus::Cancelled)]);
}

#[test]
fn a_cancelled_session_cannot_complete_and_repeats_are_no_ops() {
    Given::with(())
        .given(vec![created("t", vec![]), status(SessionStatus::Cancelled)])
        .when(ChatSessionCommand::Complete {
            user_id: OWNER.into(),
            at: at(4),
        })
        .then_expect_error(ChatSessionError::Closed(SessionStatus::Cancelled));
    Given::with(())
        .given(vec![created("t", vec![]), status(SessionStatus::Cancelled)])
        .when(ChatSessionCommand::Cancel {
            user_id: OWNER.into(),
            at: at(4),
        })
        .then_expect_events(vec![]);
}

#[test]
fn delete() {
    Given::with(())
        .given(vec![created("t", vec![]), status(SessionStatus::Completed)])
        .when(ChatSessionCommand::Delete {
            user_id: OWNER.into(),
            at: at(9),
        })
        .then_expect_events(vec![ChatSessionEvent::ChatSessionDeleted { at: at(9) }]);
}

#[test]
fn messages_keep_fields_the_spec_does_not_name() {
    let raw = json!({ "sender": "user", "text": "hi", "id": "client-42", "images": [] });
    let message: Message = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(message.extra.get("id"), Some(&json!("client-42")));
    assert_eq!(serde_json::to_value(&message).unwrap(), raw);
}

fn begin_turn(message: &Message, ui_state: Option<Value>) -> ChatSessionCommand {
    ChatSessionCommand::BeginTurn {
        user_id: OWNER.into(),
        message: message.clone(),
        ui_state: ui_state.map(ui),
        at: at(8),
    }
}

fn finish_turn(message: Option<&Message>, outcome: TurnOutcome) -> ChatSessionCommand {
    ChatSessionCommand::FinishTurn {
        user_id: OWNER.into(),
        message: message.cloned(),
        outcome,
        at: at(9),
    }
}

#[test]
fn a_turn_begins_with_the_message_and_in_progress_reopening_a_closed_session() {
    let question = Message::user("Why is checkout down?");
    let in_progress = ChatSessionEvent::StatusChanged {
        status: SessionStatus::InProgress,
        at: at(8),
    };
    for before in [
        SessionStatus::Completed,
        SessionStatus::Cancelled,
        SessionStatus::Active,
    ] {
        Given::with(())
            .given(vec![created("t", vec![]), status(before)])
            .when(begin_turn(&question, None))
            .then_expect_events(vec![
                ChatSessionEvent::MessageAppended {
                    message: question.clone(),
                    at: at(8),
                },
                in_progress.clone(),
            ]);
    }
    // Already in progress (an incident question queued over HTTP): no status flap.
    Given::with(())
        .given(vec![created("t", vec![]), status(SessionStatus::InProgress)])
        .when(begin_turn(&question, None))
        .then_expect_events(vec![ChatSessionEvent::MessageAppended {
            message: question.clone(),
            at: at(8),
        }]);
}

#[test]
fn a_turn_saves_the_ui_state_and_titles_a_new_chat_from_its_messages() {
    let first = Message::user("Disk full on db-1");
    let question = Message::user("And now?");
    Given::with(())
        .given(vec![created(DEFAULT_TITLE, vec![first.clone()])])
        .when(begin_turn(&question, Some(json!({ "tab": "logs" }))))
        .then_expect_events(vec![
            ChatSessionEvent::TitleChanged {
                title: generate_title(&[first]),
                at: at(8),
            },
            ChatSessionEvent::UiStateChanged {
                ui_state: ui(json!({ "tab": "logs" })),
                at: at(8),
            },
            ChatSessionEvent::MessageAppended {
                message: question,
                at: at(8),
            },
            ChatSessionEvent::StatusChanged {
                status: SessionStatus::InProgress,
                at: at(8),
            },
        ]);
}

#[test]
fn a_new_chat_is_titled_after_the_first_question_of_its_first_turn() {
    let question = Message::user("Why is checkout returning 502 since the deploy this morning?");
    Given::with(())
        .given(vec![created(DEFAULT_TITLE, vec![])])
        .when(begin_turn(&question, None))
        .then_expect_events(vec![
            ChatSessionEvent::TitleChanged {
                title: generate_title(std::slice::from_ref(&question)),
                at: at(8),
            },
            ChatSessionEvent::MessageAppended {
                message: question.clone(),
                at: at(8),
            },
            ChatSessionEvent::StatusChanged {
                status: SessionStatus::InProgress,
                at: at(8),
            },
        ]);
    // A titled session keeps its title.
    Given::with(())
        .given(vec![created("Checkout outage", vec![])])
        .when(begin_turn(&question, None))
        .then_expect_events(vec![
            ChatSessionEvent::MessageAppended {
                message: question,
                at: at(8),
            },
            ChatSessionEvent::StatusChanged {
                status: SessionStatus::InProgress,
                at: at(8),
            },
        ]);
}

#[test]
fn a_turn_ends_with_the_answer_and_its_outcome() {
    let answer = Message::assistant("Roll back the release.");
    let appended = ChatSessionEvent::MessageAppended {
        message: answer.clone(),
        at: at(9),
    };
    let became = |status| ChatSessionEvent::StatusChanged { status, at: at(9) };
    for (outcome, status) in [
        (TurnOutcome::Completed, SessionStatus::Completed),
        (TurnOutcome::Cancelled, SessionStatus::Cancelled),
        (TurnOutcome::Failed, SessionStatus::Active),
    ] {
        Given::with(())
            .given(vec![created("t", vec![]), self::status(SessionStatus::InProgress)])
            .when(finish_turn(Some(&answer), outcome))
            .then_expect_events(vec![appended.clone(), became(status)]);
    }
    Given::with(())
        .given(vec![created("t", vec![]), self::status(SessionStatus::InProgress)])
        .when(finish_turn(None, TurnOutcome::Failed))
        .then_expect_events(vec![became(SessionStatus::Active)]);
    // A session cancelled meanwhile stays cancelled; what was written is kept.
    Given::with(())
        .given(vec![created("t", vec![]), self::status(SessionStatus::Cancelled)])
        .when(finish_turn(Some(&answer), TurnOutcome::Completed))
        .then_expect_events(vec![appended]);
}

#[test]
fn turns_in_another_users_session_are_not_found() {
    Given::with(())
        .given(vec![created("t", vec![])])
        .when(ChatSessionCommand::BeginTurn {
            user_id: "someone-else".into(),
            message: Message::user("hi"),
            ui_state: None,
            at: at(8),
        })
        .then_expect_error(ChatSessionError::NotFound);
}
