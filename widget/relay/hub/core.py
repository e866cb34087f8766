"""The hub: the relay's live side, put together from its rooms.

Every sequenced event is stored (taking the conversation's next ``seq``) and then emitted to the
conversation's room, under the conversation's lock, so each socket sees one gap-free ordered log.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Coroutine
from typing import Any, cast

from ... import protocol as P
from ..config import AppConfig, RelayConfig
from ..docs import DocsIndex, open_docs_index
from ..mcp.servers import McpTools
from ..models.adapters import make_adapter
from ..models.base import ModelAdapter
from ..ratelimit import RateLimiter
from ..sio import RelaySocketServer
from ..storage import store as S
from ..storage.base import UsageRow
from ..tokens import TokenSigner
from ..tracing import Tracing, make_tracing
from .ask_user import AnswersContext, answer_prompts
from .context import Limiters, Switches, app_of
from .dispatch import CallDispatch, DispatchContext
from .fanout import Fanout, FanoutContext
from .joining import Membership, MembershipContext
from .lifecycle import Lifecycle, LifecycleContext
from .prompts import history
from .runtime import HEARTBEAT_S, ConvRuntime, Runtimes, new_id
from .sendqueue import SendQueues
from .skeleton import handlers_of, wrap
from .turns import TurnRunner, TurnsContext
from .writes import Writes, WritesContext

log = logging.getLogger("widget.relay")

#: How often a relay forgets the idempotency acks past their retention window.
ACK_SWEEP_S = 300.0


class _Limiter:
    """A ``Hub`` attribute that reads and replaces one of its ``Limiters`` (tests swap a limiter on the hub)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._field = name.removesuffix("_limiter")

    def __get__(self, hub: Hub, owner: type | None = None) -> RateLimiter:
        return cast(RateLimiter, getattr(hub.limiters, self._field))

    def __set__(self, hub: Hub, limiter: RateLimiter) -> None:
        setattr(hub.limiters, self._field, limiter)


class Hub:
    """The Socket.IO server and everything live behind it, for one relay process. Its parts each get a narrow
    context with what they use (see ``widget.relay.hub.context``), never the hub."""

    message_limiter = _Limiter()  # per conversation
    join_limiter = _Limiter()  # per address
    replay_limiter = _Limiter()  # per socket
    patch_limiter = _Limiter()  # per conversation
    cancel_limiter = _Limiter()  # per socket
    refused_limiter = _Limiter()  # per socket

    def __init__(self, config: RelayConfig, store: S.Store, models: dict[str, ModelAdapter] | None = None) -> None:
        self.config = config
        self.store = store
        self.signer = TokenSigner(config.secret)
        self.instance = new_id("r_", 6)
        self.models: dict[str, ModelAdapter] = dict(models or {})
        for name, mcfg in config.models.items():
            if name not in self.models:
                self.models[name] = make_adapter(mcfg)
        self.runtimes = Runtimes()
        self.convs: dict[str, ConvRuntime] = self.runtimes.convs
        self.clients: dict[str, str] = self.runtimes.clients  # sid -> conversation id
        self.addresses: dict[str, str] = {}  # sid -> client address
        #: the rate limiters (``message_limiter`` and the others below read and replace them here)
        self.limiters = Limiters.of(config)
        #: sockets of this process that disconnected and whose leaving the store is still recording
        #: (set when it is recorded): a join or activate racing that write waits for it, so a call
        #: held by the socket that left goes to the new active client (§3.1 pending_calls)
        self.leaving: dict[str, asyncio.Event] = {}
        #: ``closing`` and ``draining`` (below), read by the parts when they act
        self.switches = Switches()
        self._loops: list[asyncio.Task[Any]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.mcp = McpTools(config)  # the apps' MCP servers
        #: the site documentation's index (``search_docs``), in the relay's store (connects on first use)
        self.docs: DocsIndex | None = open_docs_index(
            config.database_url, config.db_path, embeddings_model=config.embeddings_model,
            embeddings_max_windows=config.embeddings_max_windows, models=config.models,
            embeddings_threads=config.embeddings_threads)
        #: OpenTelemetry spans of turns and calls, made from the stored events (None: off)
        self.tracing: Tracing | None = make_tracing(config)
        self.redis: Any = None
        if config.redis_url:
            from ..scale import RelayRedisManager

            self.redis = RelayRedisManager(config.redis_url, channel=config.redis_channel)  # hooks: below
        self.sio = RelaySocketServer(
            async_mode="asgi",
            cors_allowed_origins=config.all_allowed_origins(),
            max_http_buffer_size=P.ENGINEIO_MAX_BUFFER,
            logger=False,
            engineio_logger=False,
            client_manager=self.redis,
        )
        # The parts, each given what it uses (lower parts first: a part gets its siblings' operations as callables).
        self.send_queues = SendQueues(config, self.sio)
        self.dispatch = CallDispatch(DispatchContext(
            config, store, self.runtimes, self.sio, self.send_queues, self.emit_event, self.switches, self.leaving))
        self.recovery = Lifecycle(LifecycleContext(store, self.runtimes, self.sio, self.instance, self.emit_locked))
        self.fanout = Fanout(FanoutContext(
            store, self.runtimes, self.instance, self.spawn, self.redis, self.dispatch.emit_stored,
            self.recovery.recover, self.recovery.disconnect_conversation))
        if self.redis is not None:
            self.redis.on_event = self.fanout.seen_remote
            self.redis.on_resync = self.fanout.on_redis_back
        self.turns = TurnRunner(TurnsContext(
            config, store, self.runtimes, self.models, self.emit_event, self.switches, self.mcp, lambda: self.docs,
            self.dispatch.await_call, self.dispatch.run_relay_tool, self.trace_usage))
        self._answers = AnswersContext(store, self.runtimes, self.instance, self.spawn,
                                       functools.partial(self.turns.run_turn, resume=True))
        self.membership = Membership(MembershipContext(
            config, store, self.runtimes, self.sio, self.instance, self.spawn, self.signer, self.limiters,
            self.switches, self.send_queues, self.dispatch, self.recovery.recover, self.addresses, self.leaving))
        self.writes = Writes(WritesContext(
            config, store, self.instance, self.spawn, self.limiters, self.switches, self.emit_locked, self.recovery,
            self.turns))
        self.store.add_listener(self.fanout.on_signal)
        self.sio.on("connect", self.membership.on_connect)
        self.sio.on("disconnect", self.membership.on_disconnect)
        self.sio.on_connection_closed = self.membership.connection_closed
        for owner in (self.membership, self.writes):
            for event, (spec, fn) in handlers_of(owner).items():
                self.sio.on(event, wrap(self.runtimes, store, owner, spec, fn))

    # ------------------------------------------------------------------ plumbing
    def rt(self, cid: str) -> ConvRuntime:
        """This process's entry for a conversation (made if missing)."""
        return self.runtimes.rt(cid)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the hub cancels on shutdown."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def app_of(self, conv: dict[str, Any]) -> AppConfig:
        """The app configuration of a conversation (the defaults for an app no longer configured)."""
        return app_of(self.config, conv)

    async def start(self) -> None:
        """Once the store is open: mark this instance alive (and keep it so), start the Redis manager's
        listener, and with a shared store the poll for missed events and dead turns."""
        await self.store.heartbeat(self.instance)
        self._loops.append(asyncio.ensure_future(self._heartbeat_forever()))
        if self.redis is not None and not self.sio.manager_initialized:
            self.sio.manager_initialized = True
            self.sio.manager.initialize()
        if self.store.shared:
            self._loops.append(asyncio.ensure_future(self.fanout.poll_forever()))

    @property
    def closing(self) -> bool:
        """The relay is shutting down: running turns are left for the next open to recover."""
        return self.switches.closing

    @closing.setter
    def closing(self, value: bool) -> None:
        self.switches.closing = value

    @property
    def draining(self) -> bool:
        """Set by a graceful shutdown (widget.relay.drain): no new joins or turns, running turns end with
        turn_interrupted when cancelled."""
        return self.switches.draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self.switches.draining = value

    def refuse_new_work(self) -> None:
        """While the relay drains for shutdown, a join or a new turn is refused ``unavailable``."""
        self.switches.refuse_new_work()

    async def shutdown(self) -> None:
        """Stop every task (running turns are left for the next open to recover) and close connections."""
        self.closing = True
        for t in self._loops:
            t.cancel()
        for rt in self.convs.values():
            if rt.turn and not rt.turn.done():
                rt.turn.cancel()
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks or self._loops:
            await asyncio.gather(*tasks, *self._loops, return_exceptions=True)
        try:  # other processes see this one's turns as dead (and recover them) at once
            await asyncio.wait_for(self.store.forget_instance(self.instance), 5)
        except Exception:  # noqa: BLE001 - its heartbeat expires anyway
            log.warning("could not unregister relay instance %s", self.instance)
        if self.redis is not None:
            await self.redis.aclose()
        for m in self.models.values():
            await m.aclose()
        await self.mcp.aclose()
        if self.docs is not None:
            await self.docs.close()
        if self.tracing is not None:  # its exporter may flush over the network: not on the event loop
            await asyncio.to_thread(self.tracing.shutdown)

    async def _heartbeat_forever(self) -> None:
        last_sweep = time.monotonic()
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self.store.heartbeat(self.instance)
                if time.monotonic() - last_sweep >= ACK_SWEEP_S:
                    last_sweep = time.monotonic()
                    await self.expire_acks()
            except Exception as exc:  # noqa: BLE001 - the store reconnects; try again next beat
                log.warning("heartbeat failed: %s", exc)

    async def expire_acks(self, now: float | None = None) -> int:
        """Forget the idempotency acks older than ``idempotency_retention_s``; how many."""
        window = self.config.idempotency_retention_s
        if window <= 0:
            return 0
        return await self.store.expire_acks((time.time() if now is None else now) - window)

    # ------------------------------------------------------------------ sequenced events
    async def emit_event(self, cid: str, name: str, payload: dict[str, Any], **store_kw: Any) -> int:
        """Store a sequenced event (taking the next seq), then emit it to the conversation."""
        rt = self.rt(cid)
        async with rt.lock:
            return await self.emit_locked(rt, cid, name, payload, **store_kw)

    def trace_usage(self, cid: str, row: UsageRow) -> None:
        """A model round's token counts, for the tracing spans (when tracing is on)."""
        if self.tracing is not None:
            self.tracing.usage(cid, row)

    async def emit_locked(self, rt: ConvRuntime, cid: str, name: str, payload: dict[str, Any], **store_kw: Any) -> int:
        """``emit_event`` for a caller that holds ``rt.lock``."""
        if name == P.Event.FUNCTION_CALL_BEGIN:
            payload["run"] = False  # the stored (replayed) copy never runs anything
        seq = await self.store.append_event(cid, name, payload, **store_kw)
        if self.tracing is not None:
            self.tracing.saw(cid, name, payload)
        await self._send(rt, cid, name, payload)
        return seq

    async def _send(self, rt: ConvRuntime, cid: str, name: str, payload: dict[str, Any]) -> None:
        """Emit a stored sequenced event live (caller holds ``rt.lock``)."""
        seq = payload.get("seq") or 0
        in_order = self.fanout.in_order(rt, seq)  # before the emit: another process's event may overtake it
        if name == P.Event.FUNCTION_CALL_BEGIN:
            await self.dispatch.send_call(rt, cid, payload)
        else:
            await self.sio.emit(name, payload, room=cid)
        self.fanout.delivered(cid, rt, seq, in_order)

    # ------------------------------------------------------------------ entry points of the HTTP API
    async def recover(self, conv: dict[str, Any]) -> bool:
        """Close a turn whose relay died (see ``Lifecycle.recover``)."""
        return await self.recovery.recover(conv)

    async def cancel_turn(self, cid: str) -> bool:
        """Stop the conversation's turn (see ``Lifecycle.cancel_turn``)."""
        return await self.recovery.cancel_turn(cid)

    async def disconnect_conversation(self, cid: str, everywhere: bool = True) -> None:
        """Drop a deleted conversation's sockets and turn (see ``Lifecycle.disconnect_conversation``)."""
        await self.recovery.disconnect_conversation(cid, everywhere)

    async def answer_prompts(self, cid: str, answers: list[dict[str, Any]], idempotency: S.Ack | None = None) -> None:
        """Store ask-user answers and resume the turn (see ``ask_user.answer_prompts``)."""
        await answer_prompts(self._answers, cid, answers, idempotency)

    def _history(
        self,
        messages: list[dict[str, Any]],
        cut_for: dict[str, int | None],
        offers: dict[str, dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """The chat history the model is sent, trimmed to ``max_history_chars`` (see ``prompts.history``)."""
        return history(messages, cut_for, offers, self.config.max_history_chars)
