"""The relay's model room: the adapter interface and its guard (``base``), the demo model, the OpenAI-compatible
adapter, and the factory that picks one by name (``adapters``)."""
