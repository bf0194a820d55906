//! Language models for vigil: one streaming chat interface ([`LanguageModel`]) with an
//! implementation for OpenAI-compatible APIs, sentence chunking of streamed text,
//! token counting and prices.
//!
//! With the `fake` feature, [`fake::FakeOpenAi`] serves a scripted OpenAI-compatible API on
//! loopback for tests.

use async_trait::async_trait;
use futures::stream::BoxStream;

mod chunker;
mod error;
#[cfg(feature = "fake")]
pub mod fake;
mod http;
mod openai;
mod pricing;
mod tokens;
mod types;

pub use chunker::{SentenceChunker, MAX_CHUNK_CHARS};
pub use error::{ApiKey, LlmError, TimeoutKind};
pub use http::{OpenAiConfig, RetryPolicy, Timeouts};
pub use openai::OpenAiCompatible;
pub use pricing::{ModelPrice, Pricing, PricingError};
pub use tokens::{count_tokens, MAX_USER_MESSAGE_TOKENS};
pub use types::{collect, ChatMessage, ChatRequest, Completion, ContentPart, StreamEvent, ToolCall, ToolSpec, Usage};

/// A chat model that answers as a stream of events.
#[async_trait]
pub trait LanguageModel: Send + Sync {
    /// The model used when a request names none.
    fn model_name(&self) -> &str;

    /// Which kind of API serves the model, e.g. `openai_compatible`.
    fn provider(&self) -> &str;

    /// Sends the request. Errors before the answer starts (after any retries) come as `Err`; the
    /// stream then yields the answer's events, or one error that ends it.
    async fn stream(
        &self,
        request: &ChatRequest,
    ) -> Result<BoxStream<'static, Result<StreamEvent, LlmError>>, LlmError>;
}
