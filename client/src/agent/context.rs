//! Context management: when the history nears the model's context window,
//! degrade deterministically — first shorten old tool outputs, then replace
//! the oldest turns with a summary — and record what was done and how much.

use serde::Serialize;

use super::provider::{Message, Role};

/// Share of the context window the history may fill before degrading.
pub const HIGH_WATER: f64 = 0.75;
/// Tool outputs older than the most recent this many are shortened first.
pub const KEEP_RECENT_TOOL_OUTPUTS: usize = 2;
/// Bytes of head and of tail kept of a shortened tool output.
pub const SHORTENED_KEEP_BYTES: usize = 400;

/// One degradation applied to the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Degradation {
    /// `shorten_tool_outputs` or `summarise`.
    pub kind: String,
    /// Messages affected.
    pub messages: usize,
    /// Estimated tokens before and after.
    pub tokens_before: usize,
    pub tokens_after: usize,
}

/// Estimated tokens of a history.
pub fn estimate(history: &[Message]) -> usize {
    history.iter().map(Message::estimated_tokens).sum()
}

fn shorten(text: &str) -> Option<String> {
    if text.len() <= 2 * SHORTENED_KEEP_BYTES + 64 {
        return None;
    }
    let mut head = SHORTENED_KEEP_BYTES;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - SHORTENED_KEEP_BYTES;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    Some(format!(
        "{}\n[warden: {} bytes of this old tool output dropped to fit the context]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    ))
}

/// Degrades `history` in place until it fits `HIGH_WATER` of `window`
/// tokens; returns what was done (empty when it already fit). The system
/// prompt and the task (the first user message) are never touched, nor are
/// the latest turns; tool calls are never separated from their results.
pub fn fit(history: &mut Vec<Message>, window: usize) -> Vec<Degradation> {
    let limit = (window as f64 * HIGH_WATER) as usize;
    let mut done = vec![];
    let before = estimate(history);
    if before <= limit {
        return done;
    }
    // Stage 1: shorten old tool outputs, oldest first.
    let tool_idx: Vec<usize> = history
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Tool)
        .map(|(i, _)| i)
        .collect();
    let old = tool_idx.len().saturating_sub(KEEP_RECENT_TOOL_OUTPUTS);
    let mut n = 0;
    for &i in &tool_idx[..old] {
        if estimate(history) <= limit {
            break;
        }
        if let Some(short) = history[i].content.as_deref().and_then(shorten) {
            history[i].content = Some(short);
            n += 1;
        }
    }
    if n > 0 {
        done.push(Degradation {
            kind: "shorten_tool_outputs".into(),
            messages: n,
            tokens_before: before,
            tokens_after: estimate(history),
        });
    }
    // Stage 2: summarise the oldest turns after the task, whole turns at a
    // time (an assistant message with its tool results).
    let before = estimate(history);
    if before > limit {
        let first_kept = history
            .iter()
            .position(|m| m.role == Role::User)
            .map(|i| i + 1)
            .unwrap_or(1);
        let mut end = first_kept;
        let mut dropped = 0usize;
        let mut tools_used: Vec<String> = vec![];
        // Keep at least the latest assistant turn and its results.
        let last_assistant = history
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .unwrap_or(history.len());
        while end < last_assistant
            && estimate(history) - estimate(&history[first_kept..end]) > limit
        {
            // Advance over one whole turn.
            let mut j = end + 1;
            while j < history.len() && history[j].role == Role::Tool {
                j += 1;
            }
            for m in &history[end..j] {
                tools_used.extend(m.tool_calls.iter().map(|c| c.name.clone()));
            }
            dropped += j - end;
            end = j;
        }
        if dropped > 0 {
            let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
            for t in &tools_used {
                *counts.entry(t.clone()).or_default() += 1;
            }
            let summary = format!(
                "[warden: {dropped} earlier messages were summarised to fit the context window. Tool calls in them: {}. \
                 Re-read files you need rather than relying on memory.]",
                if counts.is_empty() { "none".into() } else { counts.iter().map(|(k, v)| format!("{k} x{v}")).collect::<Vec<_>>().join(", ") }
            );
            history.splice(first_kept..end, [Message::user(summary)]);
            done.push(Degradation {
                kind: "summarise".into(),
                messages: dropped,
                tokens_before: before,
                tokens_after: estimate(history),
            });
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::provider::ToolCall;

    fn turn(i: usize, out: usize) -> Vec<Message> {
        vec![
            Message {
                role: Role::Assistant,
                content: None,
                tool_calls: vec![ToolCall {
                    id: format!("c{i}"),
                    name: "shell".into(),
                    arguments: serde_json::json!({"command": "cat big"}),
                    malformed: false,
                }],
                tool_call_id: None,
            },
            Message::tool_result(&format!("c{i}"), "x".repeat(out)),
        ]
    }

    #[test]
    fn shortens_old_outputs_first_then_summarises_deterministically() {
        let mut h = vec![Message::system("sys"), Message::user("task")];
        for i in 0..10 {
            h.extend(turn(i, 8000));
        }
        let mut h2 = h.clone();
        let d = fit(&mut h, 10_000);
        assert_eq!(d[0].kind, "shorten_tool_outputs");
        assert!(estimate(&h) <= 7_500);
        assert_eq!(h[0].content.as_deref(), Some("sys"));
        assert_eq!(h[1].content.as_deref(), Some("task"));
        // Deterministic: the same input degrades the same way.
        assert_eq!(fit(&mut h2, 10_000), d);
        assert_eq!(h, h2);
        // Every tool call still has its result.
        for (i, m) in h.iter().enumerate() {
            for c in &m.tool_calls {
                assert!(h[i + 1..]
                    .iter()
                    .any(|r| r.tool_call_id.as_deref() == Some(&c.id)));
            }
        }
        // A tiny window forces a summary.
        let d = fit(&mut h, 2_000);
        assert!(d.iter().any(|x| x.kind == "summarise"), "{d:?}");
        assert!(h
            .iter()
            .any(|m| m.content.as_deref().unwrap_or("").contains("summarised")));
        assert_eq!(h[1].content.as_deref(), Some("task"));
    }

    #[test]
    fn a_history_that_fits_is_untouched() {
        let mut h = vec![Message::system("s"), Message::user("t")];
        assert!(fit(&mut h, 1000).is_empty());
    }
}
