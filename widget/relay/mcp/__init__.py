"""The relay's MCP room: the servers an app configures (``config``) and their tools on the relay (``servers``)."""
