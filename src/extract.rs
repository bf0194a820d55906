//! Request extractors whose rejections are [`AppError`]s, so that a malformed body, path or
//! query gets the service's JSON error shape instead of axum's plain text.

use std::borrow::Cow;

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::{header, HeaderMap},
};
use serde::de::DeserializeOwned;

use crate::{error::AppError, text::without_nul_escapes};

/// A JSON request body. Empty body → 400 `missing_body`; broken JSON → 400 `invalid_json`; JSON
/// of the wrong shape → 400 `invalid_request` naming the field; text after the document → 400
/// `invalid_json`. The body is read as JSON whatever the `Content-Type`: clients often omit it, or
/// send `text/plain`, and `curl -d` labels JSON as a form. A form or multipart body that is not
/// JSON is a 400 `invalid_json` that says so (the spec's "invalid format"; it lists no 415).
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match non_empty_body(req, state).await? {
            Some(body) => body.parse().map(JsonBody),
            None => Err(AppError::bad_request("missing_body", "a JSON request body is required")),
        }
    }
}

/// Any JSON document as the body, for handlers that tell the client themselves what shape they
/// need (an alert source's payload, a PATCH's fields); errors as for [`JsonBody`].
pub struct JsonDocument(pub serde_json::Value);

impl<S> FromRequest<S> for JsonDocument
where
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        required_body(req, state).await?.parse_any().map(JsonDocument)
    }
}

/// Any JSON document as the body, with its text as it was posted (without a byte order mark,
/// surrounding whitespace and NUL escapes): for what must be kept as it came, such as an alert
/// source's payload.
pub struct PostedJson {
    pub document: serde_json::Value,
    pub text: std::sync::Arc<str>,
}

impl<S> FromRequest<S> for PostedJson
where
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = required_body(req, state).await?;
        // Cleaned once, then both parsed and kept.
        let text = body.explained(json_text(&body.bytes))?;
        let document = body.explained(parse_json_text(&text))?;
        Ok(Self {
            document,
            text: text.trim_ascii().into(),
        })
    }
}

/// Like [`JsonBody`], for requests whose fields are all optional: an empty body, or `null`, is `{}`.
pub struct JsonBodyOrDefault<T>(pub T);

impl<T, S> FromRequest<S> for JsonBodyOrDefault<T>
where
    T: DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match non_empty_body(req, state).await? {
            Some(body) if body.bytes.trim_ascii() != b"null" => body.parse().map(JsonBodyOrDefault),
            _ => Ok(JsonBodyOrDefault(T::default())),
        }
    }
}

/// A request body that is not empty, with the `Content-Type` it came with when that names a
/// format other than JSON.
struct Body {
    bytes: Bytes,
    other_format: Option<String>,
}

impl Body {
    /// Every body the API takes is a JSON object; serde would read a struct from an array too,
    /// field by field in order, so an array is refused here rather than half understood.
    fn parse<T: DeserializeOwned>(&self) -> Result<T, AppError> {
        let parsed = match without_byte_order_mark(&self.bytes).trim_ascii_start().first() {
            Some(b'{') => parse_json(&self.bytes),
            _ => parse_json::<serde_json::Value>(&self.bytes).and_then(|document| {
                Err(AppError::invalid(format!(
                    "the request body must be a JSON object, not {}",
                    json_kind(&document)
                )))
            }),
        };
        self.explained(parsed)
    }

    fn parse_any(&self) -> Result<serde_json::Value, AppError> {
        self.explained(parse_json(&self.bytes))
    }

    /// A body that is not JSON at all, sent as a form or multipart, is told so.
    fn explained<T>(&self, parsed: Result<T, AppError>) -> Result<T, AppError> {
        parsed.map_err(|error| match (&self.other_format, error) {
            (
                Some(content_type),
                AppError::BadRequest {
                    code: "invalid_json", ..
                },
            ) => AppError::bad_request("invalid_json", format!("expected a JSON body, not `{content_type}`")),
            (_, error) => error,
        })
    }
}

/// The request body, which must not be empty.
async fn required_body<S: Send + Sync>(req: Request, state: &S) -> Result<Body, AppError> {
    non_empty_body(req, state)
        .await?
        .ok_or_else(|| AppError::bad_request("missing_body", "a JSON request body is required"))
}

/// The request body, or `None` when it is empty or only whitespace. A compressed body is refused
/// saying so (400, as every body the API cannot read; the spec lists no 415), rather than read as
/// malformed JSON.
async fn non_empty_body<S: Send + Sync>(req: Request, state: &S) -> Result<Option<Body>, AppError> {
    if let Some(encoding) = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).trim().to_owned())
        .filter(|encoding| !encoding.eq_ignore_ascii_case("identity"))
    {
        return Err(AppError::bad_request(
            "unsupported_encoding",
            format!("request bodies are read uncompressed; this one is `{encoding}` (Content-Encoding)"),
        ));
    }
    let other_format = other_structured_format(req.headers());
    let bytes = Bytes::from_request(req, state).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    Ok(Some(Body { bytes, other_format }))
}

/// The document without a byte order mark before it: JSON text may not carry one (RFC 8259), but
/// some senders' libraries write it anyway, and it hides nothing.
fn without_byte_order_mark(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// What a JSON value is, in words: `an array`, `a string`...
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Parses a JSON document, naming the offending field on a shape error (without the value that
/// was there: it may be a password or a secret sent as the wrong type). NUL characters in its
/// strings are dropped (see [`without_nul_escapes`]).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AppError> {
    parse_json_text(&json_text(bytes)?)
}

/// A body's JSON text: without a byte order mark or NUL escapes, and UTF-8 throughout. serde_json
/// checks the encoding only of the strings it reads, so bytes that are not UTF-8 in a field the
/// type ignores would pass, where the same bytes in a field it reads are refused.
fn json_text(bytes: &[u8]) -> Result<Cow<'_, str>, AppError> {
    let not_utf8 = |_| AppError::bad_request("invalid_json", "malformed JSON: the body is not UTF-8");
    match without_nul_escapes(without_byte_order_mark(bytes)) {
        Cow::Borrowed(bytes) => std::str::from_utf8(bytes).map(Cow::Borrowed).map_err(not_utf8),
        Cow::Owned(bytes) => String::from_utf8(bytes)
            .map(Cow::Owned)
            .map_err(|error| not_utf8(error.utf8_error())),
    }
}

/// [`parse_json`] of text already cleaned by [`json_text`].
fn parse_json_text<T: DeserializeOwned>(text: &str) -> Result<T, AppError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let invalid = |problem: &str| {
            if path == "." {
                AppError::invalid(format!("invalid request body: {problem}"))
            } else {
                AppError::invalid(format!("invalid field `{path}`: {problem}"))
            }
        };
        match inner.classify() {
            serde_json::error::Category::Data => invalid(&without_offending_value(&inner.to_string())),
            // serde_json reports an enum given neither a string nor an object (`"sender": null`)
            // as "expected value", a syntax error, in a document that is valid JSON.
            serde_json::error::Category::Syntax if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => {
                invalid("a value of the wrong kind")
            }
            _ => AppError::bad_request("invalid_json", format!("malformed JSON: {inner}")),
        }
    })?;
    deserializer
        .end()
        .map_err(|error| AppError::bad_request("invalid_json", format!("malformed JSON: {error}")))?;
    Ok(value)
}

/// serde's "invalid type: string \"s3cr3t\", expected u32" as "invalid type: string, expected u32":
/// the kind of value found is what the client needs, and the value itself may be a secret.
fn without_offending_value(message: &str) -> Cow<'_, str> {
    let Some((lead, found)) = ["invalid type: ", "invalid value: "]
        .iter()
        .find_map(|lead| Some((*lead, message.strip_prefix(lead)?)))
    else {
        return Cow::Borrowed(message);
    };
    // A value follows its kind directly ("integer `5`"); a quote after a comma is the expected
    // part's ("map, expected `X`"), and kinds without a value ("map") are left as they are.
    let Some(value_at) = found.find(['`', '"']).filter(|&at| !found[..at].contains(',')) else {
        return Cow::Borrowed(message);
    };
    let kind = found[..value_at].trim_end();
    let value = &found[value_at..];
    // serde writes numbers, booleans and characters between backticks, strings quoted with
    // their own quotes and backslashes escaped.
    let value_len = if let Some(quoted) = value.strip_prefix('`') {
        quoted.find('`').map(|end| end + 2)
    } else {
        let mut escaped = false;
        value[1..]
            .char_indices()
            .find(|&(_, c)| {
                let closes = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            })
            .map(|(end, _)| end + 2)
    };
    match value_len {
        Some(len) => Cow::Owned(format!("{lead}{kind}{}", &value[len..])),
        None => Cow::Owned(format!("{lead}{kind}")),
    }
}

/// The `Content-Type` when it names a format that is certainly not JSON (an HTML form's).
fn other_structured_format(headers: &HeaderMap) -> Option<String> {
    let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    (essence == "application/x-www-form-urlencoded" || essence.starts_with("multipart/")).then_some(essence)
}

/// Path parameters; a parameter of the wrong type (a non-UUID id) is a 400.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(AppError))]
pub struct Path<T>(pub T);

/// Query parameters with the service's error shape.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(AppError))]
pub struct Query<T>(pub T);

/// A page size of 1 to `max` given as digits, `default` when not given.
pub fn page_limit(limit: Option<&str>, default: i64, max: i64) -> Result<i64, AppError> {
    let Some(limit) = limit else {
        return Ok(default);
    };
    limit
        .parse::<i64>()
        .ok()
        .filter(|n| (1..=max).contains(n) && limit.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| AppError::invalid(format!("limit: must be 1 to {max}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_errors_name_the_kind_of_value_found_but_not_the_value() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Login {
            password: String,
            attempts: Option<u8>,
        }
        let cases = [
            (r#"{"password": 98765432101}"#, "integer"),
            (r#"{"password": 1.5e3}"#, "floating point"),
            (r#"{"password": true}"#, "boolean"),
            (r#"{"password": "ok", "attempts": "s3cr3t, \"quoted\" `x`"}"#, "string"),
            (r#"{"password": "ok", "attempts": 4000}"#, "integer"),
        ];
        for (body, kind) in cases {
            let Err(AppError::BadRequest { message, .. }) = parse_json::<Login>(body.as_bytes()) else {
                panic!("{body} was accepted");
            };
            for secret in ["98765432101", "1.5", "1500", "true", "s3cr3t", "quoted", "4000"] {
                assert!(!message.contains(secret), "{message}");
            }
            assert!(message.contains(&format!(": {kind}, expected")), "{message}");
        }
    }

    #[test]
    fn an_enum_given_neither_string_nor_object_is_a_shape_error_not_broken_json() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        enum Sender {
            User,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Message {
            sender: Sender,
        }
        for body in [r#"{"sender": null}"#, r#"{"sender": 1}"#, r#"{"sender": [true]}"#] {
            let Err(AppError::BadRequest { code, message }) = parse_json::<Message>(body.as_bytes()) else {
                panic!("{body} was accepted");
            };
            assert_eq!(code, "invalid_request", "{body}: {message}");
            assert!(message.contains("`sender`"), "{message}");
        }
        let Err(AppError::BadRequest { code, .. }) = parse_json::<Message>(br#"{"sender": nul}"#) else {
            panic!("broken JSON was accepted");
        };
        assert_eq!(code, "invalid_json");
    }

    #[test]
    fn offending_values_are_cut_whatever_their_quoting() {
        for (given, expected) in [
            (
                r#"invalid type: string "a\"b, expected x", expected u8"#,
                "invalid type: string, expected u8",
            ),
            (
                "invalid value: integer `-1`, expected u8 at line 1",
                "invalid value: integer, expected u8 at line 1",
            ),
            (
                "invalid type: map, expected a string",
                "invalid type: map, expected a string",
            ),
            (
                "invalid type: map, expected `Login`",
                "invalid type: map, expected `Login`",
            ),
            ("missing field `password`", "missing field `password`"),
            (r#"invalid type: string "unterminated"#, "invalid type: string"),
        ] {
            assert_eq!(without_offending_value(given), expected);
        }
    }

    #[test]
    fn a_byte_order_mark_before_the_document_is_skipped() {
        let value: serde_json::Value = parse_json(b"\xEF\xBB\xBF{\"a\": 1}").unwrap();
        assert_eq!(value, serde_json::json!({"a": 1}));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused_in_ignored_fields_too() {
        #[derive(Debug, serde::Deserialize)]
        struct OnlyTitle {
            #[allow(dead_code)]
            title: String,
        }
        let error = parse_json::<OnlyTitle>(b"{\"zz\":\"\xff\xfe\",\"title\":\"ok\"}").unwrap_err();
        assert!(
            matches!(
                error,
                AppError::BadRequest {
                    code: "invalid_json",
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn parsed_bodies_hold_no_nul() {
        let value: serde_json::Value = parse_json(br#"{"title":"a\u0000b","n":[ "\u0000" ]}"#).unwrap();
        assert_eq!(value, serde_json::json!({"title": "ab", "n": [""]}));
    }
}
