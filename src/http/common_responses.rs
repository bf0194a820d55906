//! Responses that many operations share, added to the merged document once rather than on each
//! operation: what the rate limiter and the database outage answer, with their headers.

use axum::http::Method;
use utoipa::{
    openapi::{
        schema::{ObjectBuilder, Type},
        ContentBuilder, Header, OpenApi, Ref, RefOr, Response, ResponseBuilder,
    },
    Modify,
};

use crate::rate_limit;

/// Applied to the merged document, after every route is in. For every operation the rate limiter
/// counts (`rate_limit::Scope::of`): the `X-RateLimit-*` headers on each of its responses (the
/// limiter sets them on all of them), a 429 with `Retry-After`, and a 503 with `Retry-After`
/// (the database out of reach, `AppError::Unavailable`) where the operation has no 503 of its own.
pub struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                (Method::GET, &mut item.get),
                (Method::POST, &mut item.post),
                (Method::PUT, &mut item.put),
                (Method::PATCH, &mut item.patch),
                (Method::DELETE, &mut item.delete),
            ];
            for (method, operation) in operations {
                let Some(operation) = operation else { continue };
                if rate_limit::Scope::of(&method, path).is_none() {
                    continue;
                }
                let responses = &mut operation.responses.responses;
                responses.entry("429".to_owned()).or_insert_with(|| {
                    error_response("rate limit exceeded (per user and minute); retry after `Retry-After` seconds")
                });
                responses.entry("503".to_owned()).or_insert_with(|| {
                    error_response(
                        "the database is out of reach, or the request timed out; retry after `Retry-After` seconds",
                    )
                });
                for (status, response) in responses.iter_mut() {
                    let RefOr::T(response) = response else { continue };
                    if status == "429" || status == "503" {
                        response
                            .headers
                            .entry("Retry-After".to_owned())
                            .or_insert_with(|| integer_header("seconds to wait before retrying"));
                    }
                    for (name, description) in RATE_LIMIT_HEADERS {
                        response
                            .headers
                            .entry(name.to_owned())
                            .or_insert_with(|| integer_header(description));
                    }
                }
            }
        }
    }
}

const RATE_LIMIT_HEADERS: [(&str, &str); 3] = [
    ("X-RateLimit-Limit", "requests allowed in the caller's window"),
    ("X-RateLimit-Remaining", "requests left in the caller's window"),
    ("X-RateLimit-Reset", "seconds until the window closes"),
];

fn error_response(description: &str) -> RefOr<Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
        .into()
}

fn integer_header(description: &str) -> Header {
    let mut header = Header::new(ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0)));
    header.description = Some(description.to_owned());
    header
}
