//! The scripted provider (`--model script:FILE`): replays a JSON Lines file
//! of assistant turns for deterministic runs and tests.
//!
//! Format, one assistant turn a line (blank lines and lines starting with
//! `#` are skipped):
//!
//! ```json
//! {"content": "text or null", "tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "ls"}}]}
//! ```
//!
//! `arguments` may also be a string (then it is parsed as JSON, and an
//! invalid one is a malformed call, as from a real model). Tool results go
//! back into the history as with any provider. The turn replayed is the one
//! after the last assistant turn in the history, so a resumed run continues
//! where it stopped. When the file runs out the reply is empty with finish
//! reason `stop`. Usage is estimated at 4 bytes a token.

use std::path::Path;

use serde::Deserialize;

use super::provider::*;

#[derive(Debug, Deserialize)]
struct Turn {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<TurnCall>,
}

#[derive(Debug, Deserialize)]
struct TurnCall {
    id: String,
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
}

pub struct Script {
    path: String,
    turns: Vec<Message>,
}

impl Script {
    /// Loads a script. Errors name the file and line.
    pub fn load(path: &Path) -> Result<Script, ProviderError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ProviderError::Config(format!("script {}: {e}", path.display())))?;
        Script::parse(&path.display().to_string(), &text)
    }

    pub fn parse(name: &str, text: &str) -> Result<Script, ProviderError> {
        let mut turns = vec![];
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let t: Turn = serde_json::from_str(line)
                .map_err(|e| ProviderError::Config(format!("script {name}:{}: {e}", i + 1)))?;
            let tool_calls = t
                .tool_calls
                .into_iter()
                .map(|c| {
                    let (arguments, malformed) = match c.arguments {
                        serde_json::Value::String(s) => parse_arguments(&s),
                        serde_json::Value::Null => (serde_json::json!({}), false),
                        v @ serde_json::Value::Object(_) => (v, false),
                        other => (other, true),
                    };
                    ToolCall {
                        id: c.id,
                        name: c.name,
                        arguments,
                        malformed,
                    }
                })
                .collect();
            turns.push(Message {
                role: Role::Assistant,
                content: t.content,
                tool_calls,
                tool_call_id: None,
            });
        }
        Ok(Script {
            path: name.to_string(),
            turns,
        })
    }

    /// Number of turns in the script.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }
}

#[tonic::async_trait]
impl Provider for Script {
    fn name(&self) -> &str {
        "script"
    }
    fn model(&self) -> &str {
        &self.path
    }

    async fn complete(
        &self,
        history: &[Message],
        _tools: &[ToolSpec],
    ) -> Result<ModelResponse, ProviderError> {
        let done = history.iter().filter(|m| m.role == Role::Assistant).count();
        let input_tokens = history.iter().map(|m| m.estimated_tokens() as u64).sum();
        let (message, finish) = match self.turns.get(done) {
            Some(m) => {
                let finish = if m.tool_calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                };
                (m.clone(), finish)
            }
            None => (
                Message {
                    role: Role::Assistant,
                    content: None,
                    tool_calls: vec![],
                    tool_call_id: None,
                },
                "stop",
            ),
        };
        let output_tokens = message.estimated_tokens() as u64;
        Ok(ModelResponse {
            message,
            usage: Usage {
                input_tokens,
                output_tokens,
            },
            finish_reason: finish.into(),
            response_id: Some(format!("script-turn-{}", done + 1)),
            model: self.path.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn replays_turns_in_order_then_stops() {
        let s = Script::parse(
            "t",
            "# comment\n{\"content\": \"hi\", \"tool_calls\": [{\"id\": \"c1\", \"name\": \"shell\", \"arguments\": {\"command\": \"ls\"}}]}\n\n{\"content\": \"bye\"}\n",
        )
        .unwrap();
        let mut h = vec![Message::user("task")];
        let r = s.complete(&h, &[]).await.unwrap();
        assert_eq!(r.finish_reason, "tool_calls");
        assert_eq!(r.message.tool_calls[0].arguments["command"], "ls");
        h.push(r.message);
        h.push(Message::tool_result("c1", "out"));
        let r = s.complete(&h, &[]).await.unwrap();
        assert_eq!(r.message.content.as_deref(), Some("bye"));
        h.push(r.message);
        let r = s.complete(&h, &[]).await.unwrap();
        assert_eq!(r.finish_reason, "stop");
        assert!(r.message.content.is_none() && r.message.tool_calls.is_empty());
    }

    #[test]
    fn malformed_arguments_and_bad_lines() {
        let s = Script::parse("t", r#"{"content": null, "tool_calls": [{"id": "c1", "name": "shell", "arguments": "{not json"}]}"#).unwrap();
        assert!(s.turns[0].tool_calls[0].malformed);
        let e = Script::parse("t", "{\"content\": 1}\n").err().unwrap();
        assert!(e.to_string().contains("t:1"));
    }
}
