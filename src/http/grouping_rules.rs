//! Open-after-N grouping rules (issue 30): `POST`, `GET` (a list and one), and `DELETE`. A rule
//! never changes once created; a deleted one is kept in history but no longer shown. Matchers
//! have the shape of a silence's (Alertmanager's `name`, `value`, `isRegex`, `isEqual`).

use axum::{extract::State, http::StatusCode, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;
use vigil_aggregates::{
    grouping_rule::{GroupingRuleCommand, GroupingRuleDefinition},
    silence::{InvalidField, Matcher},
};
use vigil_projections::grouping_rules::{self as read, GroupingRuleRow};

use super::silences::MatcherBody;
use crate::{
    auth::AuthUser,
    error::{AppError, ErrorBody},
    event_store::{execute, Actor},
    extract::{page_limit, JsonBody, Path, Query},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_grouping_rule, list_grouping_rules))
        .routes(routes!(get_grouping_rule, delete_grouping_rule))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupingRuleRequest {
    /// What the rule is for (1 to 200 characters, not blank).
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    /// Every matcher must match (0 to 32); none at all matches every alert.
    #[schema(max_items = 32)]
    matchers: Vec<MatcherBody>,
    /// N: matching alerts (of one `groupBy` group) that must arrive within the window before an
    /// incident opens.
    #[schema(minimum = 2, maximum = 1000)]
    threshold: u32,
    /// The window, in seconds (1 to a day).
    #[schema(minimum = 1, maximum = 86400)]
    window_seconds: u32,
    /// Fields (`source`, `service`, `environment`, `severity`, `title`) or labels whose values
    /// split the rule's alerts into groups counted apart (at most 8 distinct names, each 1 to
    /// 128 characters; default none: one group).
    #[serde(default)]
    #[schema(max_items = 8)]
    group_by: Vec<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupingRuleView {
    id: Uuid,
    name: String,
    matchers: Vec<MatcherBody>,
    threshold: u32,
    window_seconds: u32,
    group_by: Vec<String>,
    /// The user who created it.
    created_by: String,
    created_at: DateTime<Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupingRuleList {
    grouping_rules: Vec<GroupingRuleView>,
    /// Pass as `cursor` for the next page; absent on the last one.
    next_cursor: Option<Uuid>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct GroupingRuleListQuery {
    /// 1 to 100 (default 100).
    #[param(pattern = "^(100|[1-9][0-9]?)$")]
    limit: Option<String>,
    /// The previous page's `nextCursor` (another value gives an empty page).
    cursor: Option<Uuid>,
}

/// Open an incident only once enough of the caller's matching alerts have arrived. A firing
/// alert the rule matches is held (`GET /api/alerts`, fate `held`) until `threshold` of them
/// (per `groupBy` group) have arrived within `windowSeconds`; then one incident opens with all
/// of them and is analysed once, and later matching alerts join that incident while it is open.
/// Held alerts that never reach the threshold stay in the inbox as held, expired. A matching
/// alert that correlates with an incident already open joins it as usual: a rule only governs
/// opening. When several rules match an alert, the oldest governs it.
#[utoipa::path(post, path = "/api/grouping-rules", operation_id = "createGroupingRule", tag = "grouping-rules",
    request_body = GroupingRuleRequest, security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 201, description = "created", body = GroupingRuleView),
        (status = 400, description = "malformed body, or a field at fault (named in the message): a blank name, a \
            matcher, a regular expression that does not compile, a threshold or window out of range, a blank or \
            repeated `groupBy` name", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody)))]
async fn create_grouping_rule(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<GroupingRuleRequest>,
) -> Result<(StatusCode, Json<GroupingRuleView>), AppError> {
    let definition = request.into_definition();
    definition.validate().map_err(invalid)?;
    let id = Uuid::new_v4();
    let command = GroupingRuleCommand::Create {
        rule_id: id,
        user_id: user.id.clone(),
        definition,
        created_by: user.id.clone(),
        at: Utc::now(),
    };
    execute(
        &state.events.grouping_rules,
        &id.to_string(),
        command,
        Actor::User(&user.id),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(owned(&state, &user, id).await?)))
}

/// The caller's grouping rules, newest first (deleted ones are not listed).
#[utoipa::path(get, path = "/api/grouping-rules", operation_id = "listGroupingRules", tag = "grouping-rules",
    params(GroupingRuleListQuery), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = GroupingRuleList),
        (status = 400, description = "a bad limit or cursor", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody)))]
async fn list_grouping_rules(
    State(state): State<AppState>,
    user: AuthUser,
    Query(query): Query<GroupingRuleListQuery>,
) -> Result<Json<GroupingRuleList>, AppError> {
    let limit = page_limit(query.limit.as_deref(), 100, 100)?;
    let rows = read::list(&state.db, &user.id, query.cursor, limit + 1).await?;
    let next_cursor = (rows.len() as i64 > limit).then(|| rows[limit as usize - 1].id);
    let grouping_rules = rows.into_iter().take(limit as usize).map(view).collect();
    Ok(Json(GroupingRuleList {
        grouping_rules,
        next_cursor,
    }))
}

/// One of the caller's grouping rules.
#[utoipa::path(get, path = "/api/grouping-rules/{rule_id}", operation_id = "getGroupingRule", tag = "grouping-rules",
    params(("rule_id" = Uuid, Path)), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = GroupingRuleView),
        (status = 400, description = "the id is not a UUID", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody),
        (status = 404, description = "not found, deleted, or not the caller's", body = ErrorBody)))]
async fn get_grouping_rule(
    State(state): State<AppState>,
    user: AuthUser,
    Path(id): Path<Uuid>,
) -> Result<Json<GroupingRuleView>, AppError> {
    Ok(Json(owned(&state, &user, id).await?))
}

/// Delete a grouping rule: from the next batch on, its alerts open incidents as without it.
/// Alerts it holds stay recorded as held, and expire as they would have.
#[utoipa::path(delete, path = "/api/grouping-rules/{rule_id}", operation_id = "deleteGroupingRule",
    tag = "grouping-rules", params(("rule_id" = Uuid, Path)), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 204, description = "deleted"),
        (status = 400, description = "the id is not a UUID", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody),
        (status = 404, description = "not found, already deleted, or not the caller's", body = ErrorBody)))]
async fn delete_grouping_rule(
    State(state): State<AppState>,
    user: AuthUser,
    Path(id): Path<Uuid>,
) -> Result<StatusCode, AppError> {
    let command = GroupingRuleCommand::Delete {
        user_id: user.id.clone(),
        deleted_by: user.id.clone(),
        at: Utc::now(),
    };
    execute(
        &state.events.grouping_rules,
        &id.to_string(),
        command,
        Actor::User(&user.id),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn owned(state: &AppState, user: &AuthUser, id: Uuid) -> Result<GroupingRuleView, AppError> {
    let row = read::find(&state.db, &user.id, id)
        .await?
        .ok_or_else(|| AppError::NotFound("grouping rule not found".into()))?;
    Ok(view(row))
}

fn invalid(error: InvalidField) -> AppError {
    AppError::bad_request("invalid_grouping_rule", error.to_string())
}

impl GroupingRuleRequest {
    fn into_definition(self) -> GroupingRuleDefinition {
        GroupingRuleDefinition {
            name: self.name,
            matchers: self.matchers.into_iter().map(Matcher::from).collect(),
            threshold: self.threshold,
            window_seconds: self.window_seconds,
            group_by: self.group_by,
        }
    }
}

fn view(row: GroupingRuleRow) -> GroupingRuleView {
    let definition = row.definition.0;
    GroupingRuleView {
        id: row.id,
        name: definition.name,
        matchers: definition.matchers.into_iter().map(MatcherBody::from).collect(),
        threshold: definition.threshold,
        window_seconds: definition.window_seconds,
        group_by: definition.group_by,
        created_by: row.created_by,
        created_at: row.created_at,
    }
}
