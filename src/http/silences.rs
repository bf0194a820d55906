//! Silences and maintenance windows (issue 30): `POST`, `GET` (a list and one), and `DELETE`,
//! which expires a silence and keeps it in history. Shapes follow Alertmanager's silences
//! (`matchers` of `name`, `value`, `isRegex`, `isEqual`), plus a weekly recurring window.

use axum::{extract::State, http::StatusCode, Json};
use chrono::{DateTime, NaiveTime, Utc, Weekday};
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;
use vigil_aggregates::silence::{
    InvalidField, MatchOp, Matcher, Schedule, ScheduleState, SilenceCommand, SilenceDefinition,
};
use vigil_projections::silences::{self as read, SilenceRow};

use crate::{
    auth::AuthUser,
    error::{excerpt, AppError, ErrorBody},
    event_store::{execute, Actor},
    extract::{page_limit, JsonBody, Path, Query},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_silence, list_silences))
        .routes(routes!(get_silence, expire_silence))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SilenceRequest {
    /// Every matcher must match (1 to 32). At least one must not match an empty value, so that a
    /// silence cannot silence everything by accident.
    #[schema(min_items = 1, max_items = 32)]
    matchers: Vec<MatcherBody>,
    /// When it starts (default: now).
    starts_at: Option<DateTime<Utc>>,
    /// When it ends: required for a one-off window, and in the future; optional for a weekly
    /// window (it then recurs until the silence is expired).
    ends_at: Option<DateTime<Utc>>,
    /// A maintenance window that recurs every week, in local time.
    weekly: Option<WeeklyBody>,
    /// Why (at most 4,096 characters).
    #[serde(default)]
    #[schema(max_length = 4096)]
    comment: String,
}

/// Alertmanager's matcher. `name` is `source`, `service`, `environment`, `severity` or `title`,
/// or else a label (tag) of the alert; an alert without it has the empty value.
#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatcherBody {
    #[schema(min_length = 1, max_length = 128)]
    name: String,
    /// Compared whole; a regular expression is anchored at both ends (RE2 syntax).
    #[schema(max_length = 1024)]
    value: String,
    #[serde(default)]
    is_regex: bool,
    /// `false`: the matcher matches when the value does not.
    #[serde(default = "yes")]
    is_equal: bool,
}

fn yes() -> bool {
    true
}

#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WeeklyBody {
    /// An IANA time zone, such as `Europe/Berlin`.
    time_zone: String,
    /// Weekdays on which the window opens (`monday` or `mon` ...).
    #[schema(min_items = 1, max_items = 7)]
    days: Vec<String>,
    /// Local opening time, `HH:MM`.
    #[schema(example = "22:00")]
    start: String,
    /// Local closing time, `HH:MM`; at or before `start`, the window runs past midnight.
    #[schema(example = "02:00")]
    end: String,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SilenceView {
    id: Uuid,
    matchers: Vec<MatcherBody>,
    starts_at: DateTime<Utc>,
    ends_at: Option<DateTime<Utc>>,
    weekly: Option<WeeklyBody>,
    comment: String,
    /// The user who created it.
    created_by: String,
    created_at: DateTime<Utc>,
    status: SilenceStatus,
    expired_at: Option<DateTime<Utc>>,
    expired_by: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SilenceStatus {
    /// `active` (alerts are silenced now), `pending` (not started, or between two weekly
    /// windows) or `expired` (ended, or expired by `DELETE`).
    #[schema(pattern = "^(active|pending|expired)$")]
    state: &'static str,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SilenceList {
    silences: Vec<SilenceView>,
    /// Pass as `cursor` for the next page; absent on the last one.
    next_cursor: Option<Uuid>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SilenceListQuery {
    /// 1 to 100 (default 100).
    #[param(pattern = "^(100|[1-9][0-9]?)$")]
    limit: Option<String>,
    /// The previous page's `nextCursor` (another value gives an empty page).
    cursor: Option<Uuid>,
}

/// Silence the caller's alerts that match, for a window or every week. A firing alert a silence
/// in force matches is recorded (`GET /api/alerts`, fate `silenced`) but opens no incident, joins
/// none and starts no analysis. Recoveries are never silenced. Alerts still firing when a
/// silence ends are not replayed.
#[utoipa::path(post, path = "/api/silences", operation_id = "createSilence", tag = "silences", request_body = SilenceRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 201, description = "created", body = SilenceView),
        (status = 400, description = "malformed body, or a field at fault (named in the message): a matcher, a regular \
            expression that does not compile, an end before the start or in the past, an unknown time zone or weekday",
            body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody)))]
async fn create_silence(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<SilenceRequest>,
) -> Result<(StatusCode, Json<SilenceView>), AppError> {
    let now = Utc::now();
    let definition = request.into_definition(now).map_err(invalid)?;
    let id = Uuid::new_v4();
    let command = SilenceCommand::Create {
        silence_id: id,
        user_id: user.id.clone(),
        definition,
        created_by: user.id.clone(),
        at: now,
    };
    execute(&state.events.silences, &id.to_string(), command, Actor::User(&user.id)).await?;
    Ok((StatusCode::CREATED, Json(owned(&state, &user, id).await?)))
}

/// The caller's silences, newest first, expired ones included.
#[utoipa::path(get, path = "/api/silences", operation_id = "listSilences", tag = "silences", params(SilenceListQuery),
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SilenceList), (status = 400, description = "a bad limit or cursor", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody)))]
async fn list_silences(
    State(state): State<AppState>,
    user: AuthUser,
    Query(query): Query<SilenceListQuery>,
) -> Result<Json<SilenceList>, AppError> {
    let limit = page_limit(query.limit.as_deref(), 100, 100)?;
    let rows = read::list(&state.db, &user.id, query.cursor, limit + 1).await?;
    let next_cursor = (rows.len() as i64 > limit).then(|| rows[limit as usize - 1].id);
    let now = Utc::now();
    let silences = rows
        .into_iter()
        .take(limit as usize)
        .map(|row| view(row, now))
        .collect();
    Ok(Json(SilenceList { silences, next_cursor }))
}

/// One of the caller's silences.
#[utoipa::path(get, path = "/api/silences/{silence_id}", operation_id = "getSilence", tag = "silences",
    params(("silence_id" = Uuid, Path)), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = SilenceView), (status = 400, description = "the id is not a UUID", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody),
        (status = 404, description = "not found or not the caller's", body = ErrorBody)))]
async fn get_silence(
    State(state): State<AppState>,
    user: AuthUser,
    Path(id): Path<Uuid>,
) -> Result<Json<SilenceView>, AppError> {
    Ok(Json(owned(&state, &user, id).await?))
}

/// Expire a silence now: it stops silencing at once and stays in the list as `expired`.
/// Expiring one already ended changes nothing.
#[utoipa::path(delete, path = "/api/silences/{silence_id}", operation_id = "expireSilence", tag = "silences",
    params(("silence_id" = Uuid, Path)), security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 204, description = "expired"), (status = 400, description = "the id is not a UUID", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody),
        (status = 404, description = "not found or not the caller's", body = ErrorBody)))]
async fn expire_silence(
    State(state): State<AppState>,
    user: AuthUser,
    Path(id): Path<Uuid>,
) -> Result<StatusCode, AppError> {
    let command = SilenceCommand::Expire {
        user_id: user.id.clone(),
        expired_by: user.id.clone(),
        at: Utc::now(),
    };
    execute(&state.events.silences, &id.to_string(), command, Actor::User(&user.id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn owned(state: &AppState, user: &AuthUser, id: Uuid) -> Result<SilenceView, AppError> {
    let row = read::find(&state.db, &user.id, id)
        .await?
        .ok_or_else(|| AppError::NotFound("silence not found".into()))?;
    Ok(view(row, Utc::now()))
}

fn invalid(error: InvalidField) -> AppError {
    AppError::bad_request("invalid_silence", error.to_string())
}

fn field_error(field: &str, message: impl Into<String>) -> InvalidField {
    InvalidField {
        field: field.to_owned(),
        message: message.into(),
    }
}

impl SilenceRequest {
    fn into_definition(self, now: DateTime<Utc>) -> Result<SilenceDefinition, InvalidField> {
        let starts_at = self.starts_at.unwrap_or(now);
        if self.ends_at.is_some_and(|ends_at| ends_at <= now) {
            return Err(field_error("endsAt", "must be in the future"));
        }
        let schedule = match self.weekly {
            None => Schedule::Window {
                starts_at,
                ends_at: self
                    .ends_at
                    .ok_or_else(|| field_error("endsAt", "is required unless the silence is weekly"))?,
            },
            Some(weekly) => Schedule::Weekly {
                starts_at,
                ends_at: self.ends_at,
                days: weekly
                    .days
                    .iter()
                    .enumerate()
                    .map(|(i, day)| {
                        day.trim().parse::<Weekday>().map_err(|_| {
                            field_error(
                                &format!("weekly.days[{i}]"),
                                format!("`{}` is not a weekday", excerpt(day)),
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?,
                start: local_time(&weekly.start, "weekly.start")?,
                end: local_time(&weekly.end, "weekly.end")?,
                time_zone: weekly.time_zone,
            },
        };
        let definition = SilenceDefinition {
            matchers: self.matchers.into_iter().map(Matcher::from).collect(),
            schedule,
            comment: self.comment,
        };
        definition.validate()?;
        Ok(definition)
    }
}

fn local_time(value: &str, field: &str) -> Result<NaiveTime, InvalidField> {
    NaiveTime::parse_from_str(value.trim(), "%H:%M")
        .map_err(|_| field_error(field, format!("`{}` is not a time of day as HH:MM", excerpt(value))))
}

impl From<MatcherBody> for Matcher {
    fn from(body: MatcherBody) -> Self {
        let op = match (body.is_regex, body.is_equal) {
            (false, true) => MatchOp::Equal,
            (false, false) => MatchOp::NotEqual,
            (true, true) => MatchOp::Regex,
            (true, false) => MatchOp::NotRegex,
        };
        Self {
            name: body.name,
            op,
            value: body.value,
        }
    }
}

impl From<Matcher> for MatcherBody {
    fn from(matcher: Matcher) -> Self {
        Self {
            name: matcher.name,
            value: matcher.value,
            is_regex: matches!(matcher.op, MatchOp::Regex | MatchOp::NotRegex),
            is_equal: matches!(matcher.op, MatchOp::Equal | MatchOp::Regex),
        }
    }
}

fn weekday_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Mon => "monday",
        Weekday::Tue => "tuesday",
        Weekday::Wed => "wednesday",
        Weekday::Thu => "thursday",
        Weekday::Fri => "friday",
        Weekday::Sat => "saturday",
        Weekday::Sun => "sunday",
    }
}

fn view(row: SilenceRow, now: DateTime<Utc>) -> SilenceView {
    let definition = row.definition.0;
    let state = match (row.expired_at, definition.schedule.state(now)) {
        (Some(_), _) | (None, ScheduleState::Expired) => "expired",
        (None, ScheduleState::Active) => "active",
        (None, ScheduleState::Pending) => "pending",
    };
    let (starts_at, ends_at, weekly) = match definition.schedule {
        Schedule::Window { starts_at, ends_at } => (starts_at, Some(ends_at), None),
        Schedule::Weekly {
            starts_at,
            ends_at,
            time_zone,
            days,
            start,
            end,
        } => (
            starts_at,
            ends_at,
            Some(WeeklyBody {
                time_zone,
                days: days.iter().map(|&day| weekday_name(day).to_owned()).collect(),
                start: start.format("%H:%M").to_string(),
                end: end.format("%H:%M").to_string(),
            }),
        ),
    };
    SilenceView {
        id: row.id,
        matchers: definition.matchers.into_iter().map(MatcherBody::from).collect(),
        starts_at,
        ends_at,
        weekly,
        comment: definition.comment,
        created_by: row.created_by,
        created_at: row.created_at,
        status: SilenceStatus { state },
        expired_at: row.expired_at,
        expired_by: row.expired_by,
    }
}
