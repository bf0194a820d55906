//! The language model, when one is configured (`LLM_BASE_URL`): every call goes through
//! [`Model::complete`], which records it as one `llm_usage` row (tokens, cost from the price
//! table, time, error).

use std::{sync::Arc, time::Instant};

use futures::StreamExt;
use serde_json::json;
use sqlx::PgPool;
use vigil_llm::{
    collect, ChatRequest, Completion, LanguageModel, LlmError, OpenAiCompatible, OpenAiConfig, Pricing, StreamEvent,
    Usage,
};

use crate::{
    config::Config,
    metrics::{ModelMetrics, ModelOutcome},
};

/// What a call is for, for its usage record.
pub struct Call<'a> {
    pub user_id: &'a str,
    pub session_id: Option<&'a str>,
    /// `chat`, `rca`, `summary`, `postmortem`.
    pub request_type: &'static str,
}

pub struct Model {
    client: Arc<dyn LanguageModel>,
    pricing: Pricing,
    db: PgPool,
    metrics: ModelMetrics,
}

impl Model {
    /// The configured model; `None` when no `LLM_BASE_URL` is set (the built-in analyst serves).
    pub fn from_config(config: &Config, db: &PgPool) -> anyhow::Result<Option<Self>> {
        let Some(base_url) = config.llm_base_url.as_deref().filter(|url| !url.trim().is_empty()) else {
            return Ok(None);
        };
        let mut settings = OpenAiConfig::new(base_url, &config.llm_model);
        if let Some(key) = config.llm_api_key.as_ref().filter(|key| !key.is_empty()) {
            settings = settings.with_api_key(key.expose());
        }
        let pricing = match config.llm_prices.as_deref() {
            Some(spec) => Pricing::parse(spec).map_err(|error| anyhow::anyhow!("LLM_PRICES: {error}"))?,
            None => Pricing::default(),
        };
        let client = OpenAiCompatible::new(settings).map_err(|error| anyhow::anyhow!("LLM client: {error}"))?;
        Ok(Some(Self {
            client: Arc::new(client),
            pricing,
            db: db.clone(),
            metrics: ModelMetrics::default(),
        }))
    }

    /// Counts its calls in `metrics` (the service's registry) as well as in `llm_usage`.
    pub fn with_metrics(mut self, metrics: ModelMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn name(&self) -> &str {
        self.client.model_name()
    }

    /// Streams the answer to its end and records the call, failed or not.
    pub async fn complete(&self, call: Call<'_>, request: ChatRequest) -> Result<Completion, LlmError> {
        self.complete_streaming(call, request, &mut |_| {}).await
    }

    /// [`Model::complete`], showing each event of the stream to `on_event` as it arrives. A call
    /// dropped before its end (the reply was cancelled) is recorded too, with its tokens estimated:
    /// the request as sent and the text streamed so far.
    pub async fn complete_streaming(
        &self,
        call: Call<'_>,
        request: ChatRequest,
        on_event: &mut (dyn FnMut(&StreamEvent) + Send),
    ) -> Result<Completion, LlmError> {
        let (outcome, recording) = self.complete_streaming_then_record(call, request, on_event).await;
        recording.await;
        outcome
    }

    /// [`Model::complete_streaming`], handing back the writing of the call's `llm_usage` row for
    /// the caller to run: a chat reply saves its answer while the row is written, rather than
    /// after. The row is lost if the returned future is dropped unpolled: spawn it.
    pub async fn complete_streaming_then_record(
        &self,
        call: Call<'_>,
        request: ChatRequest,
        on_event: &mut (dyn FnMut(&StreamEvent) + Send),
    ) -> (
        Result<Completion, LlmError>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let started = Instant::now();
        let model = request
            .model
            .clone()
            .unwrap_or_else(|| self.client.model_name().to_owned());
        let mut unfinished = UnfinishedCall {
            record: Some(UsageRecord {
                db: self.db.clone(),
                pricing: self.pricing.clone(),
                metrics: self.metrics.clone(),
                user_id: call.user_id.to_owned(),
                session_id: call.session_id.map(str::to_owned),
                model: model.clone(),
                provider: self.client.provider().to_owned(),
                request_type: call.request_type,
                started,
                cancelled: false,
            }),
            request,
            answering: false,
            streamed: String::new(),
        };
        let outcome = match self.client.stream(&unfinished.request).await {
            Ok(stream) => {
                unfinished.answering = true;
                collect(stream.inspect(|event| {
                    if let Ok(event) = event {
                        if let StreamEvent::TextDelta(text) = event {
                            unfinished.streamed.push_str(text);
                        }
                        on_event(event);
                    }
                }))
                .await
            }
            Err(error) => Err(error),
        };
        let record = unfinished.record.take().expect("taken once, here");
        // Estimated when the provider reported none (a stream without a usage chunk, or one
        // that failed part-way): the call was billed all the same.
        let reported = outcome.as_ref().ok().and_then(|completion| completion.usage);
        let usage = reported.unwrap_or_else(|| unfinished.estimate());
        let recording = record.insert(
            usage,
            outcome.as_ref().err().map(ToString::to_string),
            json!({
                "finish_reason": outcome.as_ref().ok().and_then(|c| c.finish_reason.clone()),
                "tokens_estimated": reported.is_none(),
            }),
        );
        (outcome, recording)
    }
}

/// What a call's `llm_usage` row says besides its tokens and outcome.
struct UsageRecord {
    db: PgPool,
    pricing: Pricing,
    metrics: ModelMetrics,
    user_id: String,
    session_id: Option<String>,
    model: String,
    provider: String,
    request_type: &'static str,
    started: Instant,
    /// Dropped before its end (the reply was cancelled).
    cancelled: bool,
}

impl UsageRecord {
    async fn insert(self, usage: Usage, error: Option<String>, metadata: serde_json::Value) {
        let outcome = match (&error, self.cancelled) {
            (_, true) => ModelOutcome::Cancelled,
            (Some(_), false) => ModelOutcome::Error,
            (None, false) => ModelOutcome::Ok,
        };
        self.metrics.observe(
            self.request_type,
            outcome,
            (usage.input_tokens, usage.output_tokens),
            self.pricing.cost(&self.model, usage),
            self.started.elapsed(),
        );
        let recorded = sqlx::query(
            "INSERT INTO llm_usage (user_id, session_id, model_name, api_provider, request_type, input_tokens,
                 output_tokens, estimated_cost, response_time_ms, error_message, request_metadata)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8::numeric, $9, $10, $11)",
        )
        .bind(&self.user_id)
        .bind(&self.session_id)
        .bind(&self.model)
        .bind(&self.provider)
        .bind(self.request_type)
        .bind(usage.input_tokens as i32)
        .bind(usage.output_tokens as i32)
        .bind(self.pricing.cost_decimal(&self.model, usage))
        .bind(self.started.elapsed().as_millis().min(i32::MAX as u128) as i32)
        .bind(error)
        .bind(metadata)
        .execute(&self.db)
        .await;
        if let Err(error) = recorded {
            // The answer stands; a lost usage row is an accounting gap worth an alert, not a failure.
            tracing::error!(%error, model = self.model, request_type = self.request_type, "language-model usage not recorded");
        }
    }
}

/// A call in flight, and what its tokens are estimated from when the provider reports none:
/// recorded when dropped before its end, since the provider bills what it streamed whether or
/// not the answer was read to its end.
struct UnfinishedCall {
    record: Option<UsageRecord>,
    request: ChatRequest,
    /// Whether the provider took the request and began answering (a refused request is not billed).
    answering: bool,
    streamed: String,
}

impl UnfinishedCall {
    /// The request as sent and the text streamed so far, counted; nothing for a request the
    /// provider refused. Only when the provider reports no usage, so the request is serialized
    /// for it only then.
    fn estimate(&self) -> Usage {
        if !self.answering {
            return Usage::default();
        }
        let request_text = serde_json::to_string(&self.request.messages).unwrap_or_default();
        Usage {
            input_tokens: vigil_llm::count_tokens(&request_text).min(u32::MAX as usize) as u32,
            output_tokens: vigil_llm::count_tokens(&self.streamed).min(u32::MAX as usize) as u32,
        }
    }
}

impl Drop for UnfinishedCall {
    fn drop(&mut self) {
        let Some(mut record) = self.record.take() else { return };
        record.cancelled = true;
        let usage = self.estimate();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(record.insert(
                usage,
                Some("cancelled before the end of the answer".into()),
                json!({ "finish_reason": "cancelled", "tokens_estimated": true }),
            ));
        }
    }
}
