"""Several relay processes: python-socketio's Redis manager, with what the relay needs around it.

``RelayRedisManager`` is ``socketio.AsyncRedisManager`` (the same channel protocol: any process of the
same python-socketio major version interoperates) with three changes:

- publishing never stalls a turn: one attempt with a short timeout; after a failure publishing pauses
  with backoff (0.25 s doubling to 5 s). What was not published is in the store's event log: the other
  processes' poll sends it to their sockets (``Hub.poll``), so a Redis outage delays events, never
  loses them.
- the listener reconnects with backoff capped at 2 s (upstream: doubling to 60 s), and once subscribed
  again calls ``on_resync`` so the hub sends its sockets what they missed meanwhile.
- every event it delivers from another process is reported to ``on_event`` just before it reaches
  this process's sockets (the hub decides then whether it follows what they have, i.e. arrives in
  order), and the callable ``on_event`` returns is called once it has; ``ping()`` and
  ``listening`` feed ``/readyz``, ``healthy`` the hub's poll.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import socketio

log = logging.getLogger("widget.relay")

PUBLISH_TIMEOUT_S = 2.0
CONNECT_TIMEOUT_S = 2.0


class RelayRedisManager(socketio.AsyncRedisManager):  # type: ignore[misc]  # python-socketio ships no types: its classes are Any
    def __init__(self, url: str, *, channel: str = "autopilot-relay",
                 on_event: Callable[[str, Any, Any, Any], Callable[[], None] | None] | None = None,
                 on_resync: Callable[[], None] | None = None) -> None:
        super().__init__(url, channel=channel, logger=log)
        self.on_event = on_event
        self.on_resync = on_resync
        self.listening = False
        self.publishing = True
        self._pub: Any = None
        self._pause_until = 0.0
        self._pause = 0.25
        self._listen_failed = False
        #: publish failures and listener reconnects so far (tests and /readyz)
        self.failures = 0
        self.resyncs = 0

    @property
    def healthy(self) -> bool:
        return self.listening and self.publishing

    def _client(self, **extra: Any) -> Any:
        module = self._get_redis_module()
        return module.Redis.from_url(self.redis_url, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                     socket_keepalive=True, **extra)

    async def ping(self) -> None:
        client = self._client(socket_timeout=PUBLISH_TIMEOUT_S)
        try:
            await asyncio.wait_for(client.ping(), PUBLISH_TIMEOUT_S)
        finally:
            await client.aclose()

    async def _publish(self, data: Any) -> None:
        now = time.monotonic()
        if now < self._pause_until and not self.listening:
            return  # Redis is down: the store's log covers it (the other processes poll)
        text = self.json.dumps(data)
        try:
            for fresh in (self._pub is None, True):  # a connection made before an outage fails once: retry on a new one
                if self._pub is None:
                    self._pub = self._client(socket_timeout=PUBLISH_TIMEOUT_S)
                try:
                    await asyncio.wait_for(self._pub.publish(self.channel, text), PUBLISH_TIMEOUT_S)
                    break
                except Exception:
                    pub, self._pub = self._pub, None
                    try:
                        await pub.aclose()
                    except Exception:  # noqa: BLE001
                        pass
                    if fresh:
                        raise
        except Exception as exc:  # noqa: BLE001
            self.failures += 1
            if self.publishing:
                log.warning("redis: cannot publish (%s); the other relay processes read the events from the store", exc)
            self.publishing = False
            self._pause_until = now + self._pause
            self._pause = min(5.0, self._pause * 2)
            return
        if not self.publishing:
            log.info("redis: publishing again")
        self.publishing = True
        self._pause = 0.25

    async def _redis_listen_with_retries(self) -> Any:
        delay = 0.1
        while True:
            client = pubsub = None
            try:
                client = self._client()
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(self.channel)
                self.listening = True
                delay = 0.1
                if self._listen_failed:
                    self._listen_failed = False
                    self.resyncs += 1
                    log.info("redis: subscribed again; catching up from the store")
                    if self.on_resync is not None:
                        self.on_resync()
                async for message in pubsub.listen():
                    yield message
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                if self.listening or not self._listen_failed:
                    log.warning("redis: cannot receive (%s); retrying", exc)
                self.listening = False
                self._listen_failed = True
                self.failures += 1
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(2.0, delay * 2)
            finally:
                self.listening = False if self._listen_failed else self.listening
                for obj in (pubsub, client):
                    if obj is not None:
                        try:
                            await obj.aclose()
                        except Exception:  # noqa: BLE001
                            pass

    async def _handle_emit(self, message: dict[str, Any]) -> None:
        delivered: Callable[[], None] | None = None
        event = message.get("event")
        if self.on_event is not None and isinstance(event, str) and message.get("host_id") != self.host_id:
            data = message.get("data")
            if isinstance(data, list) and len(data) == 1:
                data = data[0]
            try:  # before the emit: whether the event is in order depends on what was sent before it
                delivered = self.on_event(event, message.get("room"), data, message.get("skip_sid"))
            except Exception:
                log.exception("redis: event hook failed")
        await super()._handle_emit(message)
        if delivered is not None:
            try:
                delivered()
            except Exception:
                log.exception("redis: event hook failed")

    async def aclose(self) -> None:
        task = getattr(self, "thread", None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._pub is not None:
            try:
                await self._pub.aclose()
            except Exception:  # noqa: BLE001
                pass
            self._pub = None
