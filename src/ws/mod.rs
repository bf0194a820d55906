//! The chat WebSocket listener (port 5006). The protocol loop is generic over a `Sink` and a
//! `Stream` of tungstenite messages, so unit tests drive it through channels and the listener
//! feeds it real sockets.

mod connection;
pub mod fanout;
pub mod protocol;
mod refusal;

use std::time::Duration;

use futures::{Sink, SinkExt, Stream, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::{
    self,
    protocol::{frame::coding::CloseCode, CloseFrame},
    Message,
};
use tokio_util::sync::CancellationToken;

pub use connection::{Connection, TokenBucket};
pub use protocol::{ClientMessage, ServerMessage};

use crate::agent::Outbox;

use crate::state::AppState;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stopping service lets its sockets' cancelled replies save what they wrote and send
/// their END.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

pub async fn serve(listener: TcpListener, state: AppState, shutdown: CancellationToken) {
    // The tokenizer loads its vocabulary on first use (tens of milliseconds): do it here, off the
    // runtime's worker threads, rather than on the first long message's socket task.
    tokio::task::spawn_blocking(|| vigil_llm::count_tokens("warm up"));
    let connections = tokio_util::task::TaskTracker::new();
    let places = std::sync::Arc::new(tokio::sync::Semaphore::new(state.config.ws_max_connections as usize));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(place) = places.clone().try_acquire_owned() else {
                        state.metrics.websocket.refused.inc();
                        tokio::spawn(refusal::refuse_when_full(stream));
                        continue;
                    };
                    let (state, shutdown) = (state.clone(), shutdown.clone());
                    connections.spawn(async move {
                        let _place = place;
                        if let Err(error) = handle_socket(stream, state, shutdown).await {
                            tracing::debug!(%peer, %error, "websocket connection ended with an error");
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "websocket accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    // Each socket ends its replies (saving them) and says goodbye; not waited for beyond the
    // grace period, plus a moment for the goodbyes.
    connections.close();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), connections.wait()).await;
}

async fn handle_socket(
    mut stream: TcpStream,
    state: AppState,
    shutdown: CancellationToken,
) -> Result<(), tungstenite::Error> {
    stream.set_nodelay(true).ok();
    // Chat frames are small: a 4 KiB read buffer per socket instead of tungstenite's eager 128 KiB
    // (long messages still arrive whole; the buffer grows for them).
    let config = tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(max_message_bytes(&state.config)));
    // The socket is lent, not given, to tungstenite: a refused handshake is still answered on
    // it, and every connection ends with a lingering close.
    let handshake = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tokio_tungstenite::accept_async_with_config(&mut stream, Some(config)),
    )
    .await;
    let socket = match handshake {
        Err(_) => return Err(tungstenite::Error::ConnectionClosed),
        Ok(Err(error)) => {
            refusal::answer_bad_handshake(&mut stream, &error).await;
            return Err(error);
        }
        Ok(Ok(socket)) => socket,
    };
    let (sink, socket_stream) = socket.split();
    let result = run_connection(sink, socket_stream, state, shutdown).await;
    refusal::linger_close(&mut stream).await;
    result
}

/// The largest message a client may send (a larger one closes the socket with 1009, "message
/// too big"): room for an attachment of the largest size, base64-encoded, and a query at its
/// limit; never less than the HTTP API's body limit. tungstenite's own default, 64 MiB, let a
/// client store a 60 MiB `ui_state`.
fn max_message_bytes(config: &crate::config::Config) -> usize {
    const QUERY_AND_FIELDS: usize = 1024 * 1024;
    (config.attachment_max_bytes.div_ceil(3) * 4 + QUERY_AND_FIELDS).max(config.max_body_bytes)
}

/// Each socket's read buffer, allocated up front.
const READ_BUFFER_BYTES: usize = 4 * 1024;
/// Messages a client may have queued before it counts as too slow and is dropped.
const OUTBOUND_QUEUE: usize = 1024;
/// How long one frame may take to be written before the client counts as gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// One client connection: read messages and write what the workflows queue, until the client
/// leaves, reads too slowly, or the service shuts down.
pub async fn run_connection<Si, St>(
    mut sink: Si,
    mut stream: St,
    state: AppState,
    shutdown: CancellationToken,
) -> Result<(), tungstenite::Error>
where
    Si: Sink<Message, Error = tungstenite::Error> + Unpin,
    St: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    let metrics = state.metrics.websocket.clone();
    let _open = metrics.open();
    let (outbox, mut outgoing) = Outbox::new(OUTBOUND_QUEUE);
    let overflowed = outbox.overflowed().clone();
    let mut connection = Connection::new(state, outbox);
    let result = loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                connection.close(true);
                // The cancelled replies save what was written and send their END: passed on
                // while they do, then 1001 (going away).
                let ended = connection.replies_ended();
                tokio::pin!(ended);
                let grace = tokio::time::sleep(SHUTDOWN_GRACE);
                tokio::pin!(grace);
                loop {
                    tokio::select! {
                        _ = &mut ended => break,
                        _ = &mut grace => break,
                        Some(message) = outgoing.recv() => {
                            if let Ok(Ok(())) = tokio::time::timeout(WRITE_TIMEOUT, sink.send(message.to_frame())).await {
                                metrics.sent.inc();
                            }
                        }
                    }
                }
                while let Ok(message) = outgoing.try_recv() {
                    if let Ok(Ok(())) = tokio::time::timeout(WRITE_TIMEOUT, sink.send(message.to_frame())).await {
                        metrics.sent.inc();
                    }
                }
                let goodbye = CloseFrame {
                    code: CloseCode::Away,
                    reason: "the service is stopping".into(),
                };
                let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.send(Message::Close(Some(goodbye)))).await;
                return Ok(());
            }
            _ = overflowed.cancelled() => break Ok(()),
            Some(message) = outgoing.recv() => {
                match tokio::time::timeout(WRITE_TIMEOUT, sink.send(message.to_frame())).await {
                    Ok(Ok(())) => metrics.sent.inc(),
                    Ok(Err(error)) => break Err(error),
                    Err(_) => break Ok(()),
                }
            }
            incoming = stream.next() => match incoming {
                None => break Ok(()),
                Some(Ok(Message::Close(frame))) => {
                    // A close code the RFC does not allow (999, 1005, ...) is answered with 1002 by
                    // tungstenite, which reports that code here.
                    tracing::debug!(code = frame.as_ref().map(|frame| u16::from(frame.code)), "websocket closed by the client");
                    // Flushes the Close reply tungstenite queued, so the client sees a clean close.
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.close()).await;
                    break Ok(());
                }
                Some(Err(error)) => {
                    // A frame that breaks the protocol (invalid UTF-8, unmasked, reserved bits or
                    // opcode, a control frame over 125 bytes, a message too big) is answered with
                    // its Close code before the connection is dropped.
                    let Some(frame) = refusal::close_for(&error) else { break Err(error) };
                    tracing::debug!(code = u16::from(frame.code), %error, "websocket protocol error; closing");
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.send(Message::Close(Some(frame)))).await;
                    break Ok(());
                }
                Some(Ok(Message::Text(text))) => {
                    metrics.received.inc();
                    connection.handle(text.as_str());
                }
                Some(Ok(Message::Binary(_))) => {
                    metrics.received.inc();
                    connection.reject("binary frames are not supported; send JSON text");
                }
                Some(Ok(_)) => {} // ping/pong are answered by tungstenite
            },
        }
    };
    connection.close(false);
    result
}
