//! Registration, login, logout and password change (spec Endpoints → Users).

use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    Json,
};
use axum_extra::extract::CookieJar;
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    auth::{password::password_problem, session_token, AuthUser},
    error::{AppError, ErrorBody},
    extract::JsonBody,
    state::AppState,
    text::shortened,
    users::{self, User},
};

const MAX_FIELD_LEN: usize = 255;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register))
        .routes(routes!(login))
        .routes(routes!(logout))
        .routes(routes!(change_password))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct RegisterRequest {
    /// An e-mail address of at most 255 characters (a domain without a dot is allowed).
    #[schema(format = Email, max_length = 255)]
    email: String,
    /// 8 to 1,024 characters.
    #[schema(min_length = 8, max_length = 1024)]
    password: String,
    /// At most 255 characters; a blank name is no name.
    #[schema(max_length = 255)]
    name: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct LoginRequest {
    email: String,
    password: String,
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct ChangePasswordRequest {
    #[serde(rename = "currentPassword", alias = "current_password")]
    current_password: String,
    /// 8 to 1,024 characters.
    #[serde(rename = "newPassword", alias = "new_password")]
    #[schema(min_length = 8, max_length = 1024)]
    new_password: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct UserResponse {
    id: String,
    email: String,
    name: Option<String>,
}

impl From<User> for UserResponse {
    fn from(user: User) -> Self {
        Self {
            id: user.id,
            email: user.email,
            name: user.name,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct MessageResponse {
    message: String,
}

fn valid_email(raw: &str) -> Result<String, AppError> {
    let email = raw.trim();
    if email.is_empty() {
        return Err(AppError::invalid("email is required"));
    }
    // A domain without a dot (`admin@localhost`) is a valid address, and self-hosted
    // deployments use them.
    if email.len() > MAX_FIELD_LEN || !email_address::EmailAddress::is_valid(email) {
        return Err(AppError::invalid("email is not a valid address"));
    }
    Ok(email.to_owned())
}

/// Create an account.
#[utoipa::path(post, path = "/api/auth/register", operation_id = "registerUser", tag = "users", request_body = RegisterRequest, responses(
    (status = 201, body = UserResponse),
    (status = 400, description = "invalid email, password under 8 or over 1,024 characters, malformed body", body = ErrorBody),
    (status = 409, description = "email already registered", body = ErrorBody)))]
async fn register(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<RegisterRequest>,
) -> Result<(StatusCode, Json<UserResponse>), AppError> {
    let email = valid_email(&request.email)?;
    if let Some(problem) = password_problem(&request.password) {
        return Err(AppError::invalid(problem));
    }
    let name = request.name.as_deref().map(str::trim).filter(|name| !name.is_empty());
    if name.is_some_and(|name| name.chars().count() > MAX_FIELD_LEN) {
        return Err(AppError::invalid("name must be at most 255 characters"));
    }
    let hash = state.passwords.hash(&request.password).await?;
    let user = users::insert(&state.db, &email, name, &hash).await?;
    tracing::info!(user_id = ?user.id, "user registered");
    Ok((StatusCode::CREATED, Json(user.into())))
}

/// Log in; sets the `vigil_session` cookie (HttpOnly, SameSite=Lax, lifetime `SESSION_TTL_HOURS`).
#[utoipa::path(post, path = "/api/auth/login", operation_id = "loginUser", tag = "users", request_body = LoginRequest, responses(
    (status = 200, body = UserResponse, headers(("set-cookie" = String, description = "vigil_session"))),
    (status = 400, body = ErrorBody),
    (status = 401, description = "unknown email or wrong password (one message for both)", body = ErrorBody)))]
async fn login(
    State(state): State<AppState>,
    jar: CookieJar,
    JsonBody(request): JsonBody<LoginRequest>,
) -> Result<(CookieJar, Json<UserResponse>), AppError> {
    let email = request.email.trim();
    // Registration refuses longer addresses, so no account has one: not looked up.
    let user = match email.len() {
        0..=MAX_FIELD_LEN => users::by_email(&state.db, email).await?,
        _ => None,
    };
    let matches = state
        .passwords
        .verify(&request.password, user.as_ref().map(|user| user.password_hash.as_str()))
        .await?;
    let Some(user) = user.filter(|_| matches) else {
        // Debug formatting escapes what the caller typed (a newline would forge a log line), and
        // the line is bounded whatever the body's size.
        tracing::warn!(email = ?shortened(email, MAX_FIELD_LEN), "failed login");
        return Err(AppError::Unauthorized("invalid email or password".into()));
    };
    let cookie = state.login_sessions.open(&user.id).await?;
    tracing::info!(user_id = ?user.id, "user logged in");
    Ok((jar.add(cookie), Json(user.into())))
}

/// End the cookie session (if any) and clear the cookie. Always 200.
#[utoipa::path(post, path = "/api/auth/logout", operation_id = "logoutUser", tag = "users", responses((status = 200, body = MessageResponse)))]
async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    jar: CookieJar,
) -> Result<(CookieJar, Json<MessageResponse>), AppError> {
    if let Some(token) = session_token(&headers) {
        state.login_sessions.close(&token).await?;
    }
    let message = MessageResponse {
        message: "logged out".into(),
    };
    Ok((jar.add(state.login_sessions.removal_cookie()), Json(message)))
}

/// Change the caller's password. Other login sessions of the user are ended.
///
/// An identity that names no registered account is 404 (spec: "user not found").
#[utoipa::path(post, path = "/api/auth/change-password", operation_id = "changePassword", tag = "users", request_body = ChangePasswordRequest,
    security(("user_id" = []), ("session_cookie" = [])), responses(
    (status = 200, body = MessageResponse),
    (status = 400, description = "new password under 8 characters or over 1,024", body = ErrorBody),
    (status = 401, description = "no identity, or wrong current password", body = ErrorBody),
    (status = 404, description = "no account with the caller's user id", body = ErrorBody)))]
async fn change_password(
    State(state): State<AppState>,
    caller: AuthUser,
    headers: HeaderMap,
    JsonBody(request): JsonBody<ChangePasswordRequest>,
) -> Result<Json<MessageResponse>, AppError> {
    if let Some(problem) = password_problem(&request.new_password) {
        return Err(AppError::invalid(format!("new {problem}")));
    }
    let user = users::by_id(&state.db, &caller.id)
        .await?
        .ok_or_else(|| AppError::NotFound("user not found".into()))?;
    if !state
        .passwords
        .verify(&request.current_password, Some(&user.password_hash))
        .await?
    {
        tracing::warn!(user_id = ?user.id, "password change refused: wrong current password");
        return Err(AppError::Unauthorized("current password is incorrect".into()));
    }
    let hash = state.passwords.hash(&request.new_password).await?;
    if !users::replace_password_hash(&state.db, &user.id, &user.password_hash, &hash).await? {
        // Changed (or deleted) since it was verified: the password given is no longer current.
        return Err(match users::by_id(&state.db, &user.id).await? {
            Some(_) => AppError::Unauthorized("current password is incorrect".into()),
            None => AppError::NotFound("user not found".into()),
        });
    }
    let current_session = session_token(&headers);
    state
        .login_sessions
        .close_others(&user.id, current_session.as_deref())
        .await?;
    tracing::info!(user_id = ?user.id, "password changed");
    Ok(Json(MessageResponse {
        message: "password changed".into(),
    }))
}
