//! Open-after-N grouping rules (Keep's "open an incident after N alerts", Alertmanager's
//! grouping): alerts a rule matches open an incident only once `threshold` of them (per value of
//! its `group_by` fields) have arrived within `window_seconds`; until then they are held. One
//! stream per rule, named by its id. A rule never changes once created; it is only deleted.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use cqrs_es::{event_sink::EventSink, Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::silence::{compile_matchers, field_text, invalid, AlertFacts, CompiledMatcher, InvalidField, Matcher};

pub const MAX_NAME_CHARS: usize = 200;
/// The most alerts a rule may wait for (the incident opens with all of them).
pub const MAX_THRESHOLD: u32 = 1000;
/// The longest window: a day.
pub const MAX_WINDOW_SECONDS: u32 = 86_400;
pub const MAX_GROUP_BY: usize = 8;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupingRuleDefinition {
    pub name: String,
    /// Every matcher must match (AND); none at all matches every alert.
    pub matchers: Vec<Matcher>,
    /// N: alerts that must arrive within the window before an incident opens (2 and up).
    pub threshold: u32,
    /// T, in seconds.
    pub window_seconds: u32,
    /// Fields or labels whose values split the rule's alerts into groups of their own (none:
    /// one group).
    pub group_by: Vec<String>,
}

impl GroupingRuleDefinition {
    /// Checks the name (1 to [`MAX_NAME_CHARS`]), the matchers (as a silence's, though none at
    /// all is allowed), the threshold (2 to [`MAX_THRESHOLD`]), the window (1 s to a day) and
    /// `group_by` (at most [`MAX_GROUP_BY`] distinct non-blank names).
    pub fn validate(&self) -> Result<(), InvalidField> {
        self.compile(Uuid::nil()).map(|_| ())
    }

    pub fn compile(&self, id: Uuid) -> Result<CompiledRule, InvalidField> {
        if self.name.trim().is_empty() || self.name.chars().count() > MAX_NAME_CHARS {
            return Err(invalid("name", format!("1 to {MAX_NAME_CHARS} characters")));
        }
        let matchers = compile_matchers(&self.matchers, false)?;
        if !(2..=MAX_THRESHOLD).contains(&self.threshold) {
            return Err(invalid(
                "threshold",
                format!("must be 2 to {MAX_THRESHOLD} (1 would open every incident at once, as without a rule)"),
            ));
        }
        if !(1..=MAX_WINDOW_SECONDS).contains(&self.window_seconds) {
            return Err(invalid(
                "windowSeconds",
                format!("must be 1 to {MAX_WINDOW_SECONDS} (a day)"),
            ));
        }
        if self.group_by.len() > MAX_GROUP_BY {
            return Err(invalid("groupBy", format!("at most {MAX_GROUP_BY} names")));
        }
        for (i, name) in self.group_by.iter().enumerate() {
            if name.trim().is_empty() || name.chars().count() > crate::silence::MAX_NAME_CHARS {
                return Err(invalid(format!("groupBy[{i}]"), "1 to 128 characters"));
            }
            if self.group_by[..i].contains(name) {
                return Err(invalid(format!("groupBy[{i}]"), format!("`{name}` is listed twice")));
            }
        }
        Ok(CompiledRule {
            id,
            matchers,
            threshold: self.threshold,
            window: chrono::Duration::seconds(i64::from(self.window_seconds)),
            group_by: self.group_by.clone(),
        })
    }
}

/// A rule ready to test alerts.
#[derive(Debug)]
pub struct CompiledRule {
    pub id: Uuid,
    matchers: Vec<CompiledMatcher>,
    pub threshold: u32,
    pub window: chrono::Duration,
    group_by: Vec<String>,
}

impl CompiledRule {
    pub fn matches(&self, alert: &AlertFacts<'_>) -> bool {
        self.matchers.iter().all(|matcher| matcher.matches(alert))
    }

    /// The group `alert` falls in: the values of the `group_by` names, as a JSON array (`[]`
    /// without any), so that no choice of values can make two groups one.
    pub fn group_of(&self, alert: &AlertFacts<'_>) -> String {
        let values: Vec<Cow<str>> = self.group_by.iter().map(|name| field_text(alert, name)).collect();
        serde_json::to_string(&values).unwrap_or_default()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum GroupingRuleCommand {
    Create {
        rule_id: Uuid,
        user_id: String,
        definition: GroupingRuleDefinition,
        created_by: String,
        at: DateTime<Utc>,
    },
    /// Alerts held under it stay recorded as held, and expire as they would have.
    Delete {
        user_id: String,
        deleted_by: String,
        at: DateTime<Utc>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum GroupingRuleEvent {
    GroupingRuleCreated {
        rule_id: Uuid,
        user_id: String,
        definition: GroupingRuleDefinition,
        created_by: String,
        at: DateTime<Utc>,
    },
    GroupingRuleDeleted {
        deleted_by: String,
        at: DateTime<Utc>,
    },
}

impl DomainEvent for GroupingRuleEvent {
    fn event_type(&self) -> String {
        match self {
            Self::GroupingRuleCreated { .. } => "GroupingRuleCreated".to_owned(),
            Self::GroupingRuleDeleted { .. } => "GroupingRuleDeleted".to_owned(),
        }
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupingRuleError {
    /// Never created, deleted, or another user's.
    #[error("grouping rule not found")]
    NotFound,
    #[error("grouping rule already exists")]
    AlreadyExists,
    #[error(transparent)]
    Invalid(#[from] InvalidField),
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GroupingRule {
    user_id: Option<String>,
    deleted: bool,
}

impl GroupingRule {
    pub fn decide(&self, command: GroupingRuleCommand) -> Result<Vec<GroupingRuleEvent>, GroupingRuleError> {
        match command {
            GroupingRuleCommand::Create {
                rule_id,
                user_id,
                definition,
                created_by,
                at,
            } => {
                if self.user_id.is_some() {
                    return Err(GroupingRuleError::AlreadyExists);
                }
                definition.validate()?;
                Ok(vec![GroupingRuleEvent::GroupingRuleCreated {
                    rule_id,
                    user_id,
                    definition,
                    created_by,
                    at,
                }])
            }
            GroupingRuleCommand::Delete {
                user_id,
                deleted_by,
                at,
            } => {
                if self.user_id.as_deref() != Some(user_id.as_str()) || self.deleted {
                    return Err(GroupingRuleError::NotFound);
                }
                Ok(vec![GroupingRuleEvent::GroupingRuleDeleted { deleted_by, at }])
            }
        }
    }
}

impl Aggregate for GroupingRule {
    const TYPE: &'static str = "GroupingRule";
    type Command = GroupingRuleCommand;
    type Event = GroupingRuleEvent;
    type Error = GroupingRuleError;
    type Services = ();

    async fn handle(
        &mut self,
        command: Self::Command,
        _: &Self::Services,
        sink: &EventSink<Self>,
    ) -> Result<(), Self::Error> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: Self::Event) {
        match event {
            GroupingRuleEvent::GroupingRuleCreated { user_id, .. } => self.user_id = Some(user_id),
            GroupingRuleEvent::GroupingRuleDeleted { .. } => self.deleted = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::silence::MatchOp;

    fn definition() -> GroupingRuleDefinition {
        GroupingRuleDefinition {
            name: "disk alerts".into(),
            matchers: vec![Matcher {
                name: "title".into(),
                op: MatchOp::Regex,
                value: "disk.*".into(),
            }],
            threshold: 5,
            window_seconds: 600,
            group_by: vec!["service".into()],
        }
    }

    fn create(definition: GroupingRuleDefinition) -> GroupingRuleCommand {
        GroupingRuleCommand::Create {
            rule_id: Uuid::nil(),
            user_id: "u".into(),
            definition,
            created_by: "u".into(),
            at: DateTime::UNIX_EPOCH,
        }
    }

    fn field_of(definition: GroupingRuleDefinition) -> String {
        match GroupingRule::default().decide(create(definition)) {
            Err(GroupingRuleError::Invalid(invalid)) => invalid.field,
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn validation_names_the_field_at_fault() {
        let mut bad = definition();
        bad.threshold = 1;
        assert_eq!(field_of(bad), "threshold");
        let mut bad = definition();
        bad.window_seconds = 0;
        assert_eq!(field_of(bad), "windowSeconds");
        let mut bad = definition();
        bad.name = " ".into();
        assert_eq!(field_of(bad), "name");
        let mut bad = definition();
        bad.matchers[0].value = "(".into();
        assert_eq!(field_of(bad), "matchers[0].value");
        let mut bad = definition();
        bad.group_by = vec!["service".into(), "service".into()];
        assert_eq!(field_of(bad), "groupBy[1]");
    }

    #[test]
    fn a_rule_without_matchers_takes_every_alert() {
        let mut every = definition();
        every.matchers.clear();
        let rule = every.compile(Uuid::nil()).unwrap();
        let labels = serde_json::Map::new();
        let facts = AlertFacts {
            source: "source_a",
            service: None,
            environment: None,
            severity: None,
            title: "anything",
            labels: &labels,
        };
        assert!(rule.matches(&facts));
        assert_eq!(rule.group_of(&facts), r#"[""]"#);
    }

    #[test]
    fn groups_follow_the_group_by_values() {
        let rule = definition().compile(Uuid::nil()).unwrap();
        let labels = serde_json::Map::new();
        let facts = |service| AlertFacts {
            source: "source_a",
            service: Some(service),
            environment: None,
            severity: None,
            title: "disk full",
            labels: &labels,
        };
        assert!(rule.matches(&facts("db")));
        assert_eq!(rule.group_of(&facts("db")), r#"["db"]"#);
        assert_ne!(rule.group_of(&facts("db")), rule.group_of(&facts("web")));
    }

    #[test]
    fn deleting_is_the_owners_and_once() {
        let mut rule = GroupingRule::default();
        for event in rule.decide(create(definition())).unwrap() {
            rule.apply(event);
        }
        let delete = |user: &str| GroupingRuleCommand::Delete {
            user_id: user.into(),
            deleted_by: user.into(),
            at: DateTime::UNIX_EPOCH,
        };
        assert_eq!(rule.decide(delete("other")), Err(GroupingRuleError::NotFound));
        for event in rule.decide(delete("u")).unwrap() {
            rule.apply(event);
        }
        assert_eq!(rule.decide(delete("u")), Err(GroupingRuleError::NotFound));
    }
}
