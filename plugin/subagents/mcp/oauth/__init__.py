"""OAuth for MCP servers: client credentials, sign-in, per-user consent, the token store."""
