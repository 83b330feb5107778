//! The provider-neutral model interface: messages, tool calls, usage, and
//! the [`Provider`] trait every model backend implements. Also the shared
//! HTTP retry policy (429 / 5xx with backoff, honouring `Retry-After`,
//! RFC 9110 section 10.2.3).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-chosen id, echoed in the tool result.
    pub id: String,
    pub name: String,
    /// Arguments as JSON. A model may send invalid JSON: then this holds the
    /// raw text as a JSON string and [`ToolCall::malformed`] is set.
    pub arguments: serde_json::Value,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub malformed: bool,
}

/// One message of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(text: impl Into<String>) -> Message {
        Message {
            role: Role::System,
            content: Some(text.into()),
            tool_calls: vec![],
            tool_call_id: None,
        }
    }
    pub fn user(text: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            content: Some(text.into()),
            tool_calls: vec![],
            tool_call_id: None,
        }
    }
    pub fn tool_result(call_id: &str, text: impl Into<String>) -> Message {
        Message {
            role: Role::Tool,
            content: Some(text.into()),
            tool_calls: vec![],
            tool_call_id: Some(call_id.to_string()),
        }
    }

    /// Rough size in tokens (4 bytes a token), for context management.
    pub fn estimated_tokens(&self) -> usize {
        let mut n = self.content.as_ref().map(|c| c.len()).unwrap_or(0);
        for c in &self.tool_calls {
            n += c.name.len() + c.arguments.to_string().len();
        }
        n / 4 + 4
    }
}

/// A tool offered to the model: name, description, JSON Schema of the
/// arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// Token usage of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One model response.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    /// The assistant message (content and/or tool calls).
    pub message: Message,
    pub usage: Usage,
    /// `stop`, `tool_calls`, `length`, ... as the provider said it.
    pub finish_reason: String,
    /// Provider response id, where one is given.
    pub response_id: Option<String>,
    /// The model that answered.
    pub model: String,
}

/// Errors of a model call.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("authentication failed ({status}): check the API key ({detail})")]
    Auth { status: u16, detail: String },
    #[error("unknown model {model:?}: {detail}")]
    UnknownModel { model: String, detail: String },
    #[error("rate limited or unavailable after {attempts} attempts: {detail}")]
    Exhausted { attempts: u32, detail: String },
    #[error("bad response: {0}")]
    BadResponse(String),
    #[error("request failed: {0}")]
    Http(String),
    #[error("{0}")]
    Config(String),
}

/// A model backend.
#[tonic::async_trait]
pub trait Provider: Send + Sync {
    /// `openai`, `anthropic`, `script`.
    fn name(&self) -> &str;
    /// The requested model name.
    fn model(&self) -> &str;
    /// Context window in tokens.
    fn context_window(&self) -> usize {
        128_000
    }
    /// Cost of a call in micro-dollars (0 when unknown).
    fn cost_micros(&self, _usage: Usage) -> u64 {
        0
    }
    /// One completion over `history` with `tools` offered.
    async fn complete(
        &self,
        history: &[Message],
        tools: &[ToolSpec],
    ) -> Result<ModelResponse, ProviderError>;
}

/// Retry policy for HTTP providers.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// Sends a JSON POST with retries on 429 and 5xx (exponential backoff, or
/// the server's `Retry-After` seconds when given, capped at `max_delay`).
/// 401/403 map to [`ProviderError::Auth`]; 404 to [`ProviderError::UnknownModel`].
pub async fn post_json(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, String)],
    body: &serde_json::Value,
    model: &str,
    retry: RetryPolicy,
) -> Result<serde_json::Value, ProviderError> {
    let mut last = String::new();
    for attempt in 1..=retry.max_attempts {
        let mut req = http.post(url).json(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                last = e.to_string();
                if attempt < retry.max_attempts && (e.is_connect() || e.is_timeout()) {
                    tokio::time::sleep(backoff(retry, attempt, None)).await;
                    continue;
                }
                return Err(ProviderError::Http(last));
            }
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|s| Duration::from_secs_f64(s.clamp(0.0, 3600.0)));
        let text = resp.text().await.unwrap_or_default();
        match status {
            200..=299 => {
                return serde_json::from_str(&text).map_err(|e| {
                    ProviderError::BadResponse(format!("not JSON ({e}): {}", clip(&text)))
                })
            }
            401 | 403 => {
                return Err(ProviderError::Auth {
                    status,
                    detail: clip(&text),
                })
            }
            404 => {
                return Err(ProviderError::UnknownModel {
                    model: model.to_string(),
                    detail: clip(&text),
                })
            }
            429 | 500..=599 => {
                last = format!("HTTP {status}: {}", clip(&text));
                if attempt < retry.max_attempts {
                    tokio::time::sleep(backoff(retry, attempt, retry_after)).await;
                    continue;
                }
            }
            _ => {
                return Err(ProviderError::Http(format!(
                    "HTTP {status}: {}",
                    clip(&text)
                )))
            }
        }
    }
    Err(ProviderError::Exhausted {
        attempts: retry.max_attempts,
        detail: last,
    })
}

fn backoff(retry: RetryPolicy, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let d = retry_after
        .unwrap_or_else(|| retry.base_delay * 2u32.saturating_pow(attempt.saturating_sub(1)));
    d.min(retry.max_delay)
}

fn clip(s: &str) -> String {
    let s = s.trim();
    if s.len() <= 300 {
        return s.to_string();
    }
    let mut end = 300;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Parses tool-call arguments sent as a JSON string; invalid JSON is kept as
/// a string and flagged malformed (answered to the model as an error).
pub fn parse_arguments(raw: &str) -> (serde_json::Value, bool) {
    if raw.trim().is_empty() {
        return (serde_json::json!({}), false);
    }
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(v @ serde_json::Value::Object(_)) => (v, false),
        _ => (serde_json::Value::String(raw.to_string()), true),
    }
}
