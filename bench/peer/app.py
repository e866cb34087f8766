"""Minimal Chainlit echo app for bench/peer.py (runs in the bench venv, not the project's)."""

import chainlit as cl


@cl.on_message
async def on_message(message: cl.Message) -> None:
    await cl.Message(content=f"Echo: {message.content}").send()
