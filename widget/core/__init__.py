"""Sans-I/O core: protocol, state, streaming and registry logic (no asyncio, js or socketio imports)."""
