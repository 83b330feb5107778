//! OpenAI-compatible Chat Completions with tool calling (OpenAI, Ollama,
//! vLLM, llama.cpp server, LM Studio). Wire format: the Chat Completions API
//! (`POST {base}/chat/completions`, `tools: [{type: function, function:
//! {name, description, parameters}}]`, `choices[0].message.tool_calls`).
//! Configuration: `OPENAI_BASE_URL` (default `https://api.openai.com/v1`),
//! `OPENAI_API_KEY` (required for the default endpoint, optional for local
//! servers).

use serde_json::{json, Value};

use super::provider::*;

/// The endpoint used when `OPENAI_BASE_URL` is unset; it needs a key.
const DEFAULT_BASE: &str = "https://api.openai.com/v1";

pub struct OpenAi {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
    model: String,
    pub retry: RetryPolicy,
}

impl OpenAi {
    /// A client for `model`, configured from the environment.
    pub fn from_env(model: &str) -> Result<OpenAi, ProviderError> {
        let base = std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| DEFAULT_BASE.into());
        let key = std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.is_empty());
        if key.is_none() && base.trim_end_matches('/') == DEFAULT_BASE {
            return Err(ProviderError::Config(format!(
                "OPENAI_API_KEY is not set; {DEFAULT_BASE} needs it (set OPENAI_BASE_URL for a local server that needs no key)"
            )));
        }
        OpenAi::new(&base, key, model)
    }

    pub fn new(base: &str, key: Option<String>, model: &str) -> Result<OpenAi, ProviderError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(600))
            .build()
            .map_err(|e| ProviderError::Config(e.to_string()))?;
        Ok(OpenAi {
            http,
            base: base.trim_end_matches('/').to_string(),
            key,
            model: model.to_string(),
            retry: RetryPolicy::default(),
        })
    }
}

fn to_wire(m: &Message) -> Value {
    match m.role {
        Role::Tool => {
            json!({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content.clone().unwrap_or_default()})
        }
        Role::Assistant => {
            let mut v = json!({"role": "assistant", "content": m.content});
            if !m.tool_calls.is_empty() {
                v["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        let args = match &c.arguments {
                            Value::String(s) if c.malformed => s.clone(),
                            a => a.to_string(),
                        };
                        json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": args}})
                    })
                    .collect();
            }
            v
        }
        Role::System => json!({"role": "system", "content": m.content}),
        Role::User => json!({"role": "user", "content": m.content}),
    }
}

/// Parses a Chat Completions response body.
pub fn parse_response(v: &Value, model: &str) -> Result<ModelResponse, ProviderError> {
    let choice = v["choices"]
        .get(0)
        .ok_or_else(|| ProviderError::BadResponse("no choices".into()))?;
    let msg = &choice["message"];
    let mut tool_calls = Vec::new();
    if let Some(calls) = msg["tool_calls"].as_array() {
        for (i, c) in calls.iter().enumerate() {
            let raw = c["function"]["arguments"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| c["function"]["arguments"].to_string());
            let (arguments, malformed) = parse_arguments(&raw);
            tool_calls.push(ToolCall {
                id: c["id"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("call_{i}")),
                name: c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                arguments,
                malformed,
            });
        }
    }
    Ok(ModelResponse {
        message: Message {
            role: Role::Assistant,
            content: msg["content"].as_str().map(str::to_string),
            tool_calls,
            tool_call_id: None,
        },
        usage: Usage {
            input_tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            output_tokens: v["usage"]["completion_tokens"].as_u64().unwrap_or(0),
        },
        finish_reason: choice["finish_reason"]
            .as_str()
            .unwrap_or("stop")
            .to_string(),
        response_id: v["id"].as_str().map(str::to_string),
        model: v["model"].as_str().unwrap_or(model).to_string(),
    })
}

#[tonic::async_trait]
impl Provider for OpenAi {
    fn name(&self) -> &str {
        "openai"
    }
    fn model(&self) -> &str {
        &self.model
    }

    async fn complete(
        &self,
        history: &[Message],
        tools: &[ToolSpec],
    ) -> Result<ModelResponse, ProviderError> {
        let mut body = json!({
            "model": self.model,
            "messages": history.iter().map(to_wire).collect::<Vec<_>>(),
        });
        if !tools.is_empty() {
            body["tools"] = tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                .collect();
        }
        let mut headers = vec![];
        if let Some(k) = &self.key {
            headers.push(("authorization", format!("Bearer {k}")));
        }
        let v = post_json(
            &self.http,
            &format!("{}/chat/completions", self.base),
            &headers,
            &body,
            &self.model,
            self.retry,
        )
        .await?;
        parse_response(&v, &self.model)
    }
}
