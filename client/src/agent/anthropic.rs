//! The Anthropic Messages API (`POST {base}/v1/messages`, headers
//! `x-api-key` and `anthropic-version: 2023-06-01`; tools as `{name,
//! description, input_schema}`; responses as content blocks `text` and
//! `tool_use`; tool results as `tool_result` blocks in a user message).
//! Configuration: `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` (default
//! `https://api.anthropic.com`).

use serde_json::{json, Value};

use super::provider::*;

pub struct Anthropic {
    http: reqwest::Client,
    base: String,
    key: String,
    model: String,
    pub max_tokens: u32,
    pub retry: RetryPolicy,
}

impl Anthropic {
    /// A client for `model`; errors when `ANTHROPIC_API_KEY` is unset.
    pub fn from_env(model: &str) -> Result<Anthropic, ProviderError> {
        let key = std::env::var("ANTHROPIC_API_KEY")
            .ok()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| ProviderError::Config("ANTHROPIC_API_KEY is not set".into()))?;
        let base = std::env::var("ANTHROPIC_BASE_URL")
            .unwrap_or_else(|_| "https://api.anthropic.com".into());
        Anthropic::new(&base, &key, model)
    }

    pub fn new(base: &str, key: &str, model: &str) -> Result<Anthropic, ProviderError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(600))
            .build()
            .map_err(|e| ProviderError::Config(e.to_string()))?;
        Ok(Anthropic {
            http,
            base: base.trim_end_matches('/').to_string(),
            key: key.to_string(),
            model: model.to_string(),
            max_tokens: 4096,
            retry: RetryPolicy::default(),
        })
    }
}

/// History -> (system text, messages) in the Messages API's shape:
/// consecutive tool results merge into one user message of `tool_result`
/// blocks.
pub fn to_wire(history: &[Message]) -> (String, Vec<Value>) {
    let mut system = String::new();
    let mut out: Vec<Value> = Vec::new();
    for m in history {
        match m.role {
            Role::System => {
                if !system.is_empty() {
                    system.push('\n');
                }
                system.push_str(m.content.as_deref().unwrap_or_default());
            }
            Role::User => {
                out.push(json!({"role": "user", "content": m.content.clone().unwrap_or_default()}))
            }
            Role::Assistant => {
                let mut blocks = vec![];
                if let Some(t) = m.content.as_ref().filter(|t| !t.is_empty()) {
                    blocks.push(json!({"type": "text", "text": t}));
                }
                for c in &m.tool_calls {
                    let input = if c.arguments.is_object() {
                        c.arguments.clone()
                    } else {
                        json!({})
                    };
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                out.push(json!({"role": "assistant", "content": blocks}));
            }
            Role::Tool => {
                let block = json!({"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content.clone().unwrap_or_default()});
                match out.last_mut() {
                    Some(last) if last["role"] == "user" && last["content"].is_array() => {
                        last["content"].as_array_mut().expect("array").push(block)
                    }
                    _ => out.push(json!({"role": "user", "content": [block]})),
                }
            }
        }
    }
    (system, out)
}

/// Parses a Messages API response body.
pub fn parse_response(v: &Value, model: &str) -> Result<ModelResponse, ProviderError> {
    let blocks = v["content"]
        .as_array()
        .ok_or_else(|| ProviderError::BadResponse("no content blocks".into()))?;
    let mut text = String::new();
    let mut tool_calls = vec![];
    for b in blocks {
        match b["type"].as_str() {
            Some("text") => text.push_str(b["text"].as_str().unwrap_or_default()),
            Some("tool_use") => {
                let input = b["input"].clone();
                let malformed = !input.is_object();
                tool_calls.push(ToolCall {
                    id: b["id"].as_str().unwrap_or_default().to_string(),
                    name: b["name"].as_str().unwrap_or_default().to_string(),
                    arguments: input,
                    malformed,
                });
            }
            _ => {}
        }
    }
    Ok(ModelResponse {
        message: Message {
            role: Role::Assistant,
            content: if text.is_empty() { None } else { Some(text) },
            tool_calls,
            tool_call_id: None,
        },
        usage: Usage {
            input_tokens: v["usage"]["input_tokens"].as_u64().unwrap_or(0),
            output_tokens: v["usage"]["output_tokens"].as_u64().unwrap_or(0),
        },
        finish_reason: v["stop_reason"].as_str().unwrap_or("end_turn").to_string(),
        response_id: v["id"].as_str().map(str::to_string),
        model: v["model"].as_str().unwrap_or(model).to_string(),
    })
}

#[tonic::async_trait]
impl Provider for Anthropic {
    fn name(&self) -> &str {
        "anthropic"
    }
    fn model(&self) -> &str {
        &self.model
    }
    fn context_window(&self) -> usize {
        200_000
    }

    async fn complete(
        &self,
        history: &[Message],
        tools: &[ToolSpec],
    ) -> Result<ModelResponse, ProviderError> {
        let (system, messages) = to_wire(history);
        let mut body =
            json!({"model": self.model, "max_tokens": self.max_tokens, "messages": messages});
        if !system.is_empty() {
            body["system"] = json!(system);
        }
        if !tools.is_empty() {
            body["tools"] = tools.iter().map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters})).collect();
        }
        let headers = [
            ("x-api-key", self.key.clone()),
            ("anthropic-version", "2023-06-01".to_string()),
        ];
        let v = post_json(
            &self.http,
            &format!("{}/v1/messages", self.base),
            &headers,
            &body,
            &self.model,
            self.retry,
        )
        .await?;
        parse_response(&v, &self.model)
    }
}
