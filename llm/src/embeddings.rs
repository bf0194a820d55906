//! Embeddings over the OpenAI API: `POST /v1/embeddings`.

use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

use crate::{
    error::LlmError,
    http::{Endpoint, OpenAiConfig},
};

/// An embedding model behind an OpenAI-compatible API, with the same retry and timeout policy as
/// chat.
#[derive(Debug)]
pub struct OpenAiEmbeddings {
    endpoint: Endpoint,
    model: String,
}

impl OpenAiEmbeddings {
    /// Fails only when the HTTP client cannot be built (no TLS backend).
    pub fn new(config: OpenAiConfig) -> Result<Self, LlmError> {
        Ok(Self {
            endpoint: Endpoint::new(&config, "embeddings")?,
            model: config.model,
        })
    }

    pub fn model_name(&self) -> &str {
        &self.model
    }

    /// One vector per input, in the order of `inputs`. No request is made for no input.
    pub async fn embed<S: AsRef<str>>(&self, inputs: &[S]) -> Result<Vec<Vec<f32>>, LlmError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let request = EmbeddingsRequest {
            model: &self.model,
            input: inputs.iter().map(AsRef::as_ref).collect(),
        };
        let body = self
            .endpoint
            .post(&request)
            .await?
            .try_fold(Vec::new(), |mut body, chunk| async move {
                body.extend_from_slice(&chunk);
                Ok(body)
            })
            .await?;
        let response: EmbeddingsResponse = serde_json::from_slice(&body)
            .map_err(|error| LlmError::Protocol(format!("embeddings answer is not the expected JSON: {error}")))?;
        in_input_order(response.data, inputs.len())
    }
}

/// The vectors sorted by `index`, which the API does not promise to answer in order, checked to
/// be exactly one per input.
fn in_input_order(mut data: Vec<EmbeddingData>, inputs: usize) -> Result<Vec<Vec<f32>>, LlmError> {
    data.sort_by_key(|item| item.index);
    let indices_match = data.len() == inputs && data.iter().enumerate().all(|(position, item)| item.index == position);
    if !indices_match {
        let indices: Vec<usize> = data.iter().map(|item| item.index).collect();
        return Err(LlmError::Protocol(format!(
            "expected one embedding for each of {inputs} inputs, got indices {indices:?}"
        )));
    }
    Ok(data.into_iter().map(|item| item.embedding).collect())
}

#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: Vec<&'a str>,
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingData>,
}

#[derive(Deserialize)]
struct EmbeddingData {
    index: usize,
    embedding: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(index: usize, value: f32) -> EmbeddingData {
        EmbeddingData {
            index,
            embedding: vec![value],
        }
    }

    #[test]
    fn vectors_come_back_in_input_order() {
        let data = vec![item(2, 2.0), item(0, 0.0), item(1, 1.0)];
        assert_eq!(in_input_order(data, 3).unwrap(), vec![vec![0.0], vec![1.0], vec![2.0]]);
    }

    #[test]
    fn missing_or_duplicate_vectors_are_protocol_errors() {
        for data in [
            vec![item(0, 0.0)],
            vec![item(0, 0.0), item(0, 0.0)],
            vec![item(0, 0.0), item(2, 0.0)],
        ] {
            let error = in_input_order(data, 2).unwrap_err();
            assert!(matches!(error, LlmError::Protocol(_)), "{error:?}");
        }
    }
}
