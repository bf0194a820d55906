//! RFC 6455 violations over a raw TCP socket (handshake and frames written by hand, as a broken
//! or hostile client would): each is answered, with a Close frame's code or an HTTP status, before
//! the connection is dropped.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{spawn_app, CapturedLogs, TestApp};

const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// A handshake request with `headers` (each `Name: value`) after the request line.
fn request(request_line: &str, headers: &[&str]) -> String {
    let mut text = format!("{request_line}\r\nHost: localhost\r\n");
    for header in headers {
        text.push_str(header);
        text.push_str("\r\n");
    }
    text.push_str("\r\n");
    text
}

const UPGRADE: [&str; 4] = [
    "Upgrade: websocket",
    "Connection: Upgrade",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version: 13",
];

/// A socket past a successful handshake (101), with nothing of the server's left unread.
async fn upgraded(app: &TestApp) -> TcpStream {
    let mut socket = TcpStream::connect(app.ws_addr).await.unwrap();
    socket
        .write_all(request("GET / HTTP/1.1", &UPGRADE).as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = tokio::time::timeout(ANSWER_WITHIN, socket.read_u8())
            .await
            .expect("a handshake answer")
            .expect("the handshake answer is complete");
        head.push(byte);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101 "), "handshake accepted: {head}");
    socket
}

/// One frame as a client writes it: `first` is FIN, RSV and opcode; masked unless told not.
fn frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mask_bit = if masked { 0x80 } else { 0 };
    let mut bytes = vec![first];
    match payload.len() {
        short @ 0..=125 => bytes.push(mask_bit | short as u8),
        medium => {
            bytes.push(mask_bit | 126);
            bytes.extend_from_slice(&(medium as u16).to_be_bytes());
        }
    }
    if masked {
        let key = [0x37, 0xfa, 0x21, 0x3d];
        bytes.extend_from_slice(&key);
        bytes.extend(payload.iter().enumerate().map(|(i, byte)| byte ^ key[i % 4]));
    } else {
        bytes.extend_from_slice(payload);
    }
    bytes
}

/// The code of the server's Close frame: the first frame it sends, unmasked, before the end of
/// the connection.
async fn close_code(socket: &mut TcpStream) -> u16 {
    let read = async {
        let mut header = [0u8; 2];
        socket.read_exact(&mut header).await?;
        assert_eq!(
            header[0], 0x88,
            "a final Close frame, got first byte {:#04x}",
            header[0]
        );
        assert_eq!(header[1] & 0x80, 0, "server frames are not masked");
        let mut payload = vec![0u8; usize::from(header[1] & 0x7f)];
        socket.read_exact(&mut payload).await?;
        assert!(payload.len() >= 2, "the Close frame carries a code");
        assert!(std::str::from_utf8(&payload[2..]).is_ok(), "its reason is UTF-8");
        Ok::<_, std::io::Error>(u16::from_be_bytes([payload[0], payload[1]]))
    };
    let code = tokio::time::timeout(ANSWER_WITHIN, read)
        .await
        .expect("a Close frame in time")
        .expect("a Close frame before the connection ends");
    // The server then closes the connection itself.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(ANSWER_WITHIN, socket.read_to_end(&mut rest)).await;
    code
}

#[tokio::test]
async fn frames_that_break_the_protocol_are_answered_with_1007_or_1002() {
    const TEXT: u8 = 0x81;
    let logs = CapturedLogs::start();
    let app = spawn_app().await;
    let mut close_999 = 999u16.to_be_bytes().to_vec();
    close_999.extend_from_slice(b"bye");
    let mut close_with_bad_reason = 1000u16.to_be_bytes().to_vec();
    close_with_bad_reason.extend_from_slice(&[0xc3, 0x28]);
    let cases: [(&str, Vec<u8>, u16); 9] = [
        (
            "text that is not UTF-8",
            frame(TEXT, &[b'{', 0xff, 0xfe, b'}'], true),
            1007,
        ),
        (
            "text split over fragments, not UTF-8 once joined",
            [frame(0x01, &[0xe2, 0x82], true), frame(0x80, &[0x28], true)].concat(),
            1007,
        ),
        ("an unmasked client frame", frame(TEXT, b"{}", false), 1002),
        ("RSV1 set", frame(TEXT | 0x40, b"{}", true), 1002),
        ("reserved data opcode 3", frame(0x83, b"{}", true), 1002),
        ("reserved control opcode 11", frame(0x8b, b"", true), 1002),
        ("a ping of 126 bytes", frame(0x89, &[b'p'; 126], true), 1002),
        ("close code 999", frame(0x88, &close_999, true), 1002),
        (
            "a close reason that is not UTF-8",
            frame(0x88, &close_with_bad_reason, true),
            1007,
        ),
    ];
    for (case, bytes, expected) in cases {
        let mut socket = upgraded(&app).await;
        socket.write_all(&bytes).await.unwrap();
        assert_eq!(close_code(&mut socket).await, expected, "{case}");
    }
    let text = logs.text();
    assert!(
        text.contains("websocket protocol error; closing") && text.contains("code=1002"),
        "protocol errors are logged with their code: {text}"
    );
}

#[tokio::test]
async fn a_valid_ping_is_still_answered_and_the_socket_stays_open() {
    let app = spawn_app().await;
    let mut socket = upgraded(&app).await;
    socket.write_all(&frame(0x89, &[b'p'; 125], true)).await.unwrap();
    let mut pong = vec![0u8; 2 + 125];
    tokio::time::timeout(ANSWER_WITHIN, socket.read_exact(&mut pong))
        .await
        .expect("a pong in time")
        .unwrap();
    assert_eq!(&pong[..2], &[0x8a, 125], "a final Pong of 125 bytes");
    assert!(pong[2..].iter().all(|&byte| byte == b'p'), "the ping's payload echoed");
}

/// The status line and the whole answer to a raw handshake `text`.
async fn handshake_answer(app: &TestApp, text: &str) -> (String, String) {
    let mut socket = TcpStream::connect(app.ws_addr).await.unwrap();
    socket.write_all(text.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(ANSWER_WITHIN, socket.read_to_end(&mut answer))
        .await
        .expect("the server answers and closes in time")
        .expect("the connection ends cleanly, not reset");
    let answer = String::from_utf8(answer).expect("a text answer");
    let status = answer.lines().next().unwrap_or_default().to_owned();
    (status, answer)
}

fn json_body(answer: &str) -> serde_json::Value {
    let (_, body) = answer.split_once("\r\n\r\n").expect("headers end");
    serde_json::from_str(body).expect("a JSON body")
}

#[tokio::test]
async fn bad_handshakes_get_an_http_answer_not_a_dropped_connection() {
    let app = spawn_app().await;
    let without = |name: &str| -> Vec<&str> {
        UPGRADE
            .iter()
            .copied()
            .filter(|header| !header.starts_with(name))
            .collect()
    };

    let (status, answer) = handshake_answer(&app, &request("GET / HTTP/1.1", &without("Sec-WebSocket-Key"))).await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request", "{answer}");
    assert_eq!(json_body(&answer)["code"], "invalid_handshake");
    assert!(json_body(&answer)["error"]
        .as_str()
        .unwrap()
        .contains("Sec-WebSocket-Key"));

    let mut version_8 = without("Sec-WebSocket-Version");
    version_8.push("Sec-WebSocket-Version: 8");
    let (status, answer) = handshake_answer(&app, &request("GET / HTTP/1.1", &version_8)).await;
    assert_eq!(status, "HTTP/1.1 426 Upgrade Required", "{answer}");
    assert!(
        answer
            .lines()
            .any(|line| line.eq_ignore_ascii_case("Sec-WebSocket-Version: 13")),
        "the supported version is named: {answer}"
    );
    assert_eq!(json_body(&answer)["code"], "upgrade_required");

    let post = format!(
        "{}{{}}",
        request(
            "POST / HTTP/1.1",
            &["Content-Type: application/json", "Content-Length: 2"]
        )
    );
    let (status, answer) = handshake_answer(&app, &post).await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request", "{answer}");
    assert_eq!(json_body(&answer)["code"], "invalid_handshake");

    let (status, answer) = handshake_answer(&app, &request("GET / HTTP/1.1", &[])).await;
    assert_eq!(status, "HTTP/1.1 426 Upgrade Required", "{answer}");
    assert!(
        answer
            .lines()
            .any(|line| line.eq_ignore_ascii_case("Upgrade: websocket")),
        "a 426 names the protocol to upgrade to: {answer}"
    );

    // The listener still takes good handshakes.
    drop(upgraded(&app).await);
}
