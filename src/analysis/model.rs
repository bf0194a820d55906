//! The language model, when one is configured (`LLM_BASE_URL`): every call goes through
//! [`Model::complete`], which records it as one `llm_usage` row (tokens, cost from the price
//! table, time, error).

use std::{sync::Arc, time::Instant};

use futures::StreamExt;
use serde_json::json;
use sqlx::PgPool;
use vigil_llm::{
    collect, ChatRequest, Completion, LanguageModel, LlmError, OpenAiCompatible, OpenAiConfig, Pricing, StreamEvent,
};

use crate::config::Config;

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
        }))
    }

    pub fn name(&self) -> &str {
        self.client.model_name()
    }

    /// Streams the answer to its end and records the call, failed or not.
    pub async fn complete(&self, call: Call<'_>, request: ChatRequest) -> Result<Completion, LlmError> {
        self.complete_streaming(call, request, &mut |_| {}).await
    }

    /// [`Model::complete`], showing each event of the stream to `on_event` as it arrives.
    pub async fn complete_streaming(
        &self,
        call: Call<'_>,
        request: ChatRequest,
        on_event: &mut (dyn FnMut(&StreamEvent) + Send),
    ) -> Result<Completion, LlmError> {
        let started = Instant::now();
        let model = request
            .model
            .clone()
            .unwrap_or_else(|| self.client.model_name().to_owned());
        let outcome = match self.client.stream(request).await {
            Ok(stream) => {
                collect(stream.inspect(|event| {
                    if let Ok(event) = event {
                        on_event(event);
                    }
                }))
                .await
            }
            Err(error) => Err(error),
        };
        let usage = outcome
            .as_ref()
            .ok()
            .and_then(|completion| completion.usage)
            .unwrap_or_default();
        let recorded = sqlx::query(
            "INSERT INTO llm_usage (user_id, session_id, model_name, api_provider, request_type, input_tokens,
                 output_tokens, estimated_cost, response_time_ms, error_message, request_metadata)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8::numeric, $9, $10, $11)",
        )
        .bind(call.user_id)
        .bind(call.session_id)
        .bind(&model)
        .bind(self.client.provider())
        .bind(call.request_type)
        .bind(usage.input_tokens as i32)
        .bind(usage.output_tokens as i32)
        .bind(self.pricing.cost_decimal(&model, usage))
        .bind(started.elapsed().as_millis().min(i32::MAX as u128) as i32)
        .bind(outcome.as_ref().err().map(ToString::to_string))
        .bind(json!({ "finish_reason": outcome.as_ref().ok().and_then(|c| c.finish_reason.clone()) }))
        .execute(&self.db)
        .await;
        if let Err(error) = recorded {
            // The answer stands; a lost usage row is an accounting gap worth an alert, not a failure.
            tracing::error!(%error, model, request_type = call.request_type, "language-model usage not recorded");
        }
        outcome
    }
}
