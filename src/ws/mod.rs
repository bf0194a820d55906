//! The chat WebSocket listener (port 5006). The protocol loop is generic over a `Sink` and a
//! `Stream` of tungstenite messages, so unit tests drive it through channels and the listener
//! feeds it real sockets.

mod protocol;

use std::time::Duration;

use futures::{Sink, SinkExt, Stream, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;

pub use protocol::{ClientMessage, ServerMessage};

use crate::state::AppState;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(listener: TcpListener, state: AppState, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let (state, shutdown) = (state.clone(), shutdown.clone());
                    tokio::spawn(async move {
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
}

async fn handle_socket(
    stream: TcpStream,
    state: AppState,
    shutdown: CancellationToken,
) -> Result<(), tungstenite::Error> {
    stream.set_nodelay(true).ok();
    let socket = tokio::time::timeout(HANDSHAKE_TIMEOUT, tokio_tungstenite::accept_async(stream))
        .await
        .map_err(|_| tungstenite::Error::ConnectionClosed)??;
    let (sink, stream) = socket.split();
    run_connection(sink, stream, state, shutdown).await
}

/// One client connection: read messages until the client leaves or the service shuts down.
pub async fn run_connection<Si, St>(
    mut sink: Si,
    mut stream: St,
    _state: AppState,
    shutdown: CancellationToken,
) -> Result<(), tungstenite::Error>
where
    Si: Sink<Message, Error = tungstenite::Error> + Unpin,
    St: Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    let mut connection = protocol::Connection::default();
    loop {
        let incoming = tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = sink.send(Message::Close(None)).await;
                return Ok(());
            }
            incoming = stream.next() => incoming,
        };
        let text = match incoming {
            None | Some(Ok(Message::Close(_))) => return Ok(()),
            Some(Err(error)) => return Err(error),
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Binary(_))) => {
                sink.send(ServerMessage::error("binary frames are not supported; send JSON text").to_frame())
                    .await?;
                continue;
            }
            Some(Ok(_)) => continue, // ping/pong are answered by tungstenite
        };
        for reply in connection.handle(text.as_str()) {
            sink.send(reply.to_frame()).await?;
        }
    }
}
