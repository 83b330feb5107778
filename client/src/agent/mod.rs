//! The agent loop: model providers, context management, tool dispatch.
