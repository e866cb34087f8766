"""Running the relay: ``start_relay`` (async, in the caller's loop) and ``serve_in_thread`` (its own
loop in a thread), both on a real uvicorn server, by default on a free loopback port."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from .app import create_app
from .config import RelayConfig
from .drain import RelayServer
from .http.limits import ConnectionGuard, EdgeSettings, protocol_for
from .models.base import ModelAdapter
from .storage.store import Store

#: Descriptors kept for the store, logs and outgoing connections when ``max_connections`` is 0 (automatic).
DESCRIPTOR_RESERVE = 128


def descriptor_limit(raise_soft: bool = False) -> int:
    """The process's open-file limit (raised to the hard limit first when ``raise_soft``); 0 if unknown."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if raise_soft and hard != resource.RLIM_INFINITY and soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        return 0 if soft == resource.RLIM_INFINITY else int(soft)
    except (ImportError, ValueError, OSError):
        return 0


def edge_settings(config: RelayConfig) -> EdgeSettings:
    """The connection bounds of ``config`` (``max_connections`` 0: the descriptor limit less a reserve)."""
    cap = config.max_connections
    if cap == 0:
        cap = max(0, descriptor_limit() - DESCRIPTOR_RESERVE)
    return EdgeSettings(header_timeout_s=config.http_header_timeout_s, body_timeout_s=config.http_body_timeout_s,
                        max_connections_per_address=config.max_connections_per_address, max_connections=cap,
                        uncapped_addresses=frozenset(config.trusted_proxies))


def uvicorn_config(app: Any, config: RelayConfig, log_level: str = "warning", **kwargs: Any) -> uvicorn.Config:
    """uvicorn's settings for the relay: the guarded HTTP/1.1 protocol (caps and deadlines), the idle timeout,
    forwarded headers only from ``trusted_proxies``, a bounded graceful stop."""
    guard = ConnectionGuard(edge_settings(config))
    ucfg = uvicorn.Config(
        app, log_level=log_level, lifespan="on", access_log=False, ws="auto",
        http=protocol_for(guard),
        timeout_keep_alive=config.http_idle_timeout_s,  # type: ignore[arg-type]  # uvicorn annotates int; seconds as a float work
        proxy_headers=bool(config.trusted_proxies),
        forwarded_allow_ips=list(config.trusted_proxies) or None,
        timeout_graceful_shutdown=5,
        **kwargs,
    )
    ucfg.guard = guard  # type: ignore[attr-defined]
    return ucfg


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


@dataclass
class RelayHandle:
    """A running relay: ``url`` (``http://127.0.0.1:PORT``), ``port``, ``app`` (with ``.hub``), ``config``."""

    url: str
    port: int
    config: RelayConfig
    app: Any
    server: RelayServer
    task: asyncio.Task[Any] | None = None
    thread: threading.Thread | None = None
    loop: asyncio.AbstractEventLoop | None = None
    _sock: socket.socket | None = field(default=None, repr=False)

    @property
    def hub(self) -> Any:
        return self.app.hub

    async def stop(self) -> None:
        """Stop (async handle from start_relay)."""
        self.server.should_exit = True
        if self.task is not None:
            await self.task
        if self._sock is not None:
            self._sock.close()

    def close(self) -> None:
        """Stop (thread handle from serve_in_thread)."""
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=15)
        if self._sock is not None:
            self._sock.close()


def _prepare(config: RelayConfig | None, store: Store | None, models: dict[str, ModelAdapter] | None,
             log_level: str) -> tuple[RelayHandle, socket.socket]:
    config = config or RelayConfig()
    sock = _bind(config.host, config.port)
    port = sock.getsockname()[1]
    config = dataclasses.replace(config, port=port)
    app = create_app(config, store=store, models=models)
    ucfg = uvicorn_config(app, app.config, log_level=log_level)
    server = RelayServer(ucfg, app.hub, app.config.drain_timeout_s)
    host = config.host if config.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    handle = RelayHandle(url=f"http://{host}:{port}", port=port, config=app.config, app=app, server=server, _sock=sock)
    return handle, sock


async def start_relay(config: RelayConfig | None = None, *, store: Store | None = None,
                      models: dict[str, ModelAdapter] | None = None, log_level: str = "warning") -> RelayHandle:
    """Start a relay in the running loop; ``config.port = 0`` (the default of tests) picks a free port.
    Returns once it accepts connections; ``await handle.stop()`` shuts it down cleanly."""
    handle, sock = _prepare(config, store, models, log_level)
    handle.task = asyncio.ensure_future(handle.server.serve(sockets=[sock]))
    while not handle.server.started:
        if handle.task.done():
            handle.task.result()
            raise RuntimeError("the relay stopped during startup")
        await asyncio.sleep(0.01)
    return handle


def serve_in_thread(config: RelayConfig | None = None, *, store: Store | None = None,
                    models: dict[str, ModelAdapter] | None = None, log_level: str = "warning") -> RelayHandle:
    """Start a relay on its own event loop in a daemon thread (for sync code such as Playwright
    tests). ``handle.close()`` stops it."""
    handle, sock = _prepare(config, store, models, log_level)
    errors: list[BaseException] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        handle.loop = loop
        try:
            loop.run_until_complete(handle.server.serve(sockets=[sock]))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            loop.close()

    handle.thread = threading.Thread(target=run, name="autopilot-relay", daemon=True)
    handle.thread.start()
    while not handle.server.started:
        if not handle.thread.is_alive():
            raise RuntimeError(f"the relay stopped during startup: {errors[0] if errors else 'unknown error'}")
        handle.thread.join(0.01)
    return handle
