//! What a client that breaks the WebSocket protocol is told before its connection is dropped: an
//! HTTP answer to a bad handshake, and a Close frame with RFC 6455's code to a bad frame.
//! tungstenite sends neither itself: it returns the error, and such connections used to be
//! dropped unanswered.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_tungstenite::tungstenite::{
    error::ProtocolError,
    protocol::{frame::coding::CloseCode, CloseFrame},
    Error,
};

/// How long an answer may take to be written, and the client to close its side after ours.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// One HTTP refusal of a socket that did not become a WebSocket.
struct Answer {
    status: &'static str,
    /// Extra header lines, each ending in CRLF.
    headers: &'static str,
    code: &'static str,
    message: String,
}

impl Answer {
    fn render(&self) -> String {
        let body = serde_json::json!({ "error": self.message, "code": self.code }).to_string();
        format!(
            "HTTP/1.1 {}\r\n{}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.status,
            self.headers,
            body.len()
        )
    }
}

/// Answers a socket past `WS_MAX_CONNECTIONS` with a plain HTTP 503 instead of its handshake:
/// with no cap, idle sockets used up the process's file descriptors, and the HTTP API (health
/// checks included) stopped accepting connections.
pub(super) async fn refuse_when_full(mut stream: TcpStream) {
    let answer = Answer {
        status: "503 Service Unavailable",
        headers: "Retry-After: 5\r\nConnection: close\r\n",
        code: "service_unavailable",
        message: "too many chat connections; retry later".into(),
    };
    tracing::debug!("websocket connection refused: WS_MAX_CONNECTIONS reached");
    // The handshake request is read first, so that the answer follows it.
    let mut request = [0u8; 4096];
    if tokio::time::timeout(ANSWER_TIMEOUT, stream.read(&mut request))
        .await
        .is_err()
    {
        return;
    }
    send_and_close(&mut stream, &answer).await;
}

/// Answers a handshake tungstenite refused with 426 (not a WebSocket upgrade, or not version 13;
/// RFC 6455 section 4.4 names the version it speaks) or 400 (any other malformed request).
/// Nothing is sent when the client has left.
pub(super) async fn answer_bad_handshake(stream: &mut TcpStream, error: &Error) {
    let Some(answer) = handshake_answer(error) else {
        return;
    };
    tracing::debug!(status = answer.status, %error, "websocket handshake refused");
    send_and_close(stream, &answer).await;
}

fn handshake_answer(error: &Error) -> Option<Answer> {
    const UPGRADE: &str = "Upgrade: websocket\r\nConnection: Upgrade, close\r\nSec-WebSocket-Version: 13\r\n";
    let upgrade_required = |message: &str| Answer {
        status: "426 Upgrade Required",
        headers: UPGRADE,
        code: "upgrade_required",
        message: message.into(),
    };
    Some(match error {
        Error::Protocol(
            ProtocolError::MissingConnectionUpgradeHeader | ProtocolError::MissingUpgradeWebSocketHeader,
        ) => upgrade_required(
            "this port speaks WebSocket only: send an upgrade (Upgrade: websocket, Connection: Upgrade)",
        ),
        // Sent for a missing version too: tungstenite does not tell the two apart.
        Error::Protocol(ProtocolError::MissingSecWebSocketVersionHeader) => {
            upgrade_required("unsupported WebSocket version: Sec-WebSocket-Version must be 13")
        }
        Error::Io(_) | Error::ConnectionClosed | Error::AlreadyClosed | Error::Tls(_) => return None,
        other => Answer {
            status: "400 Bad Request",
            headers: "Connection: close\r\n",
            code: "invalid_handshake",
            message: crate::text::shortened(&format!("invalid WebSocket handshake: {other}"), 200),
        },
    })
}

async fn send_and_close(stream: &mut TcpStream, answer: &Answer) {
    let written = tokio::time::timeout(ANSWER_TIMEOUT, stream.write_all(answer.render().as_bytes())).await;
    if matches!(written, Ok(Ok(()))) {
        linger_close(stream).await;
    }
}

/// Closes this side of `stream`, then reads (and discards) what the client still sends until it
/// closes too, for at most a second: a socket closed with unread input is reset, and the reset
/// can discard the answer or Close frame before the client reads it. RFC 6455 also has the server
/// close the TCP connection first.
pub(super) async fn linger_close(stream: &mut TcpStream) {
    let _ = tokio::time::timeout(ANSWER_TIMEOUT, async {
        stream.shutdown().await?;
        let mut unread = [0u8; 4096];
        while stream.read(&mut unread).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// The Close frame a read error earns (RFC 6455 section 7.4.1): 1007 for text that is not UTF-8,
/// 1009 for a message too big, 1002 for any other protocol violation. `None` when the client is
/// gone or already closing: there is no one to tell.
pub(super) fn close_for(error: &Error) -> Option<CloseFrame> {
    let code = match error {
        Error::Utf8(_) => CloseCode::Invalid,
        Error::Capacity(_) => CloseCode::Size,
        Error::Protocol(
            ProtocolError::ResetWithoutClosingHandshake
            | ProtocolError::ReceivedAfterClosing
            | ProtocolError::SendAfterClosing,
        ) => return None,
        Error::Protocol(_) => CloseCode::Protocol,
        _ => return None,
    };
    Some(CloseFrame {
        code,
        reason: close_reason(&error.to_string()).into(),
    })
}

/// At most 123 bytes, a Close frame's room for its reason, cut at a character boundary.
fn close_reason(text: &str) -> String {
    let mut end = text.len().min(123);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_errors_map_to_rfc_6455_close_codes() {
        let code = |error: Error| close_for(&error).map(|frame| frame.code);
        assert_eq!(code(Error::Utf8("\u{fffd}".repeat(100))), Some(CloseCode::Invalid));
        assert_eq!(
            code(Error::Protocol(ProtocolError::UnmaskedFrameFromClient)),
            Some(CloseCode::Protocol)
        );
        assert_eq!(code(Error::Protocol(ProtocolError::ResetWithoutClosingHandshake)), None);
        assert_eq!(code(Error::ConnectionClosed), None);
        let long = close_for(&Error::Utf8("\u{fffd}".repeat(100))).unwrap();
        assert!(long.reason.len() <= 123 && !long.reason.is_empty());
    }

    #[test]
    fn handshake_errors_map_to_400_or_426() {
        let status = |error: Error| handshake_answer(&error).map(|answer| answer.status);
        assert_eq!(
            status(Error::Protocol(ProtocolError::MissingSecWebSocketVersionHeader)),
            Some("426 Upgrade Required")
        );
        assert_eq!(
            status(Error::Protocol(ProtocolError::MissingSecWebSocketKey)),
            Some("400 Bad Request")
        );
        assert_eq!(status(Error::ConnectionClosed), None);
    }
}
