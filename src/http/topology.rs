//! The service topology per user (issue 27 item 2): the declared catalog, replaced as a whole by
//! `PUT`, and `GET` of it with the edges correlation uses, declared and learned.

use axum::{extract::State, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};
use vigil_aggregates::{
    correlation::topology::Topology,
    topology::{Catalog, DeclaredService, TopologyCommand},
};
use vigil_projections::topology as read;

use crate::{
    auth::AuthUser,
    error::{AppError, ErrorBody},
    event_store::{execute, Actor},
    extract::JsonBody,
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_topology, put_topology))
}

/// The catalog: every service the user runs, at most 500.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopologyRequest {
    #[schema(max_items = 500)]
    services: Vec<ServiceRequest>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceRequest {
    /// Unique (case-insensitively) among names and aliases; at most 128 characters.
    #[schema(
        max_length = 128,
        pattern = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    )]
    name: String,
    /// Services this one calls, by name or alias (declared in the same catalog, not itself).
    #[serde(default)]
    #[schema(max_items = 100)]
    depends_on: Vec<String>,
    /// What it owns: IPs, `IP:port`, `host:port`, host and DNS names (each owned by one service).
    #[serde(default)]
    #[schema(max_items = 100)]
    addresses: Vec<String>,
    /// Other names alerts give it.
    #[serde(default)]
    #[schema(max_items = 20)]
    aliases: Vec<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyView {
    /// The declared catalog, normalized (dependencies by name, addresses lowercase).
    services: Vec<ServiceView>,
    /// Declared edges first, then learned ones.
    edges: Vec<EdgeView>,
    /// How many catalogs the user has declared (0: none yet).
    version: i64,
    declared_at: Option<DateTime<Utc>>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceView {
    name: String,
    depends_on: Vec<String>,
    addresses: Vec<String>,
    aliases: Vec<String>,
}

/// `from` depends on `to` (a learned edge points the way its alerts' mentions mostly went).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EdgeView {
    from: String,
    to: String,
    /// 1 for a declared edge; for a learned one see `docs/correlation.md` (Topology).
    confidence: f64,
    /// `declared` or `learned`.
    #[schema(pattern = "^(declared|learned)$")]
    source: &'static str,
    support: SupportView,
}

/// What was learned of the pair: the user's merges of incidents of the two, their splits of one
/// from the other, and alerts of one naming the other (or an address it owns).
#[derive(Serialize, utoipa::ToSchema)]
pub struct SupportView {
    merges: u32,
    splits: u32,
    mentions: u32,
}

/// The caller's topology: the declared catalog and every edge, with its confidence and support.
#[utoipa::path(get, path = "/api/topology", operation_id = "getTopology", tag = "topology", security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, body = TopologyView), (status = 401, description = "no identity", body = ErrorBody)))]
async fn get_topology(State(state): State<AppState>, user: AuthUser) -> Result<Json<TopologyView>, AppError> {
    Ok(Json(view(&state, &user.id).await?))
}

/// Replace the caller's catalog (an empty `services` clears it). Correlation relates an alert to
/// an incident when their services are one (an alias), a declared dependency either way, or when
/// one side names an address the other side's service owns.
#[utoipa::path(put, path = "/api/topology", operation_id = "putTopology", tag = "topology", request_body = TopologyRequest,
    security(("user_id" = []), ("session_cookie" = [])),
    responses((status = 200, description = "the topology as declared now", body = TopologyView),
        (status = 400, description = "malformed body; too many services, dependencies, addresses or aliases; a name \
            blank, too long or declared twice; a dependency on an undeclared service or on itself; a malformed address \
            or one owned twice", body = ErrorBody),
        (status = 401, description = "no identity", body = ErrorBody)))]
async fn put_topology(
    State(state): State<AppState>,
    user: AuthUser,
    JsonBody(request): JsonBody<TopologyRequest>,
) -> Result<Json<TopologyView>, AppError> {
    let catalog = Catalog::new(request.services.into_iter().map(DeclaredService::from).collect())
        .map_err(|error| AppError::invalid(error.to_string()))?;
    let command = TopologyCommand::Declare {
        user_id: user.id.clone(),
        catalog,
        at: Utc::now(),
    };
    execute(&state.events.topologies, &user.id, command, Actor::User(&user.id)).await?;
    state.topologies.invalidate(&user.id);
    Ok(Json(view(&state, &user.id).await?))
}

impl From<ServiceRequest> for DeclaredService {
    fn from(request: ServiceRequest) -> Self {
        Self {
            name: request.name,
            depends_on: request.depends_on,
            addresses: request.addresses,
            aliases: request.aliases,
        }
    }
}

async fn view(state: &AppState, user_id: &str) -> Result<TopologyView, AppError> {
    let (declared, (catalog, observations)) =
        tokio::try_join!(read::declared(&state.db, user_id), read::load(&state.db, user_id))?;
    let topology = Topology::new(&catalog, &observations);
    let edges = topology
        .edges()
        .iter()
        .map(|edge| EdgeView {
            from: edge.from.clone(),
            to: edge.to.clone(),
            confidence: edge.confidence,
            source: if edge.declared { "declared" } else { "learned" },
            support: SupportView {
                merges: edge.support.merges,
                splits: edge.support.splits,
                mentions: edge.support.mentions,
            },
        })
        .collect();
    let services = catalog
        .services()
        .iter()
        .map(|s| ServiceView {
            name: s.name.clone(),
            depends_on: s.depends_on.clone(),
            addresses: s.addresses.clone(),
            aliases: s.aliases.clone(),
        })
        .collect();
    Ok(TopologyView {
        services,
        edges,
        version: declared.as_ref().map_or(0, |d| d.version),
        declared_at: declared.map(|d| d.declared_at),
    })
}
