//! Hosting MCP servers as tools, with server trust levels.
