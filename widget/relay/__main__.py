"""``python -m widget.relay``: run the relay with uvicorn."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from .config import RelayConfig


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.name == "widget.relay.turns":
            return msg  # already one JSON object
        out = {"level": record.levelname.lower(), "logger": record.name, "message": msg}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m widget.relay", description="Run the autopilot relay.",
                                epilog="autopilot-relay stats --help: an app's figures for a period, as JSON. "
                                       "autopilot-relay index --help / search --help / eval --help: the site's "
                                       "documentation; embeddings --help: hybrid docs search's model.")
    p.add_argument("--host", help="interface to listen on (default 127.0.0.1; env AUTOPILOT_HOST)")
    p.add_argument("--port", type=int, help="port (default 8765; env AUTOPILOT_PORT)")
    p.add_argument("--db", dest="db_path",
                   help="SQLite database path (default ./autopilot-relay.sqlite3; env AUTOPILOT_DB)")
    p.add_argument("--database-url", dest="database_url",
                   help="PostgreSQL URL instead of SQLite, for several relay processes (env AUTOPILOT_DATABASE_URL)")
    p.add_argument("--redis-url", dest="redis_url",
                   help="Redis URL: events reach sockets joined on other relay processes (env AUTOPILOT_REDIS_URL)")
    p.add_argument("--config", help="TOML config file (env AUTOPILOT_CONFIG)")
    p.add_argument("--app", action="append", default=[], metavar="ID=ORIGIN[,ORIGIN...]",
                   help="add an app with its allowed browser origins (repeatable)")
    p.add_argument("--public-url", dest="public_url",
                   help="base URL clients use to reach the relay (env AUTOPILOT_PUBLIC_URL)")
    p.add_argument("--dist", dest="dist_dir", help="build output folder to serve (default widget/_dist)")
    p.add_argument("--retention-days", dest="retention_days", type=float,
                   help="delete conversations idle this long (0: never)")
    p.add_argument("--demo-chunk-delay-ms", dest="demo_chunk_delay_ms", type=float,
                   help="pause between the demo model's streamed chunks (default 15)")
    p.add_argument("--demo-docs", dest="demo_docs", metavar="DIR",
                   help="index DIR's Markdown for the demo app at start and serve it at /docs/<name>.html")
    p.add_argument("--log-level", dest="log_level", help="debug, info, warning, error (default info)")
    p.add_argument("--trusted-proxy", dest="trusted_proxies", action="append", metavar="ADDRESS",
                   help="address of a reverse proxy in front (repeatable; env AUTOPILOT_TRUSTED_PROXIES, "
                        "comma-separated)")
    p.add_argument("--drain-timeout", dest="drain_timeout_s", type=float, metavar="SECONDS",
                   help="on SIGTERM, how long running turns may finish (default 20; env AUTOPILOT_DRAIN_TIMEOUT_S)")
    return p


def startup_banner(config: RelayConfig) -> str:
    """What the relay prints at start: where it listens, and only URLs that work (the demo page only when the demo
    app is configured; else the apps, their origins and the tag to embed)."""
    from .config import DEFAULT_APP

    shown = "127.0.0.1" if config.host in ("0.0.0.0", "::") else config.host
    base = config.public_url or f"http://{shown}:{config.port}"
    models = sorted({a.model for a in config.apps.values()})
    scale = "; store: postgresql" if config.database_url else ""
    scale += ", redis" if config.redis_url else ""
    lines = [f"Autopilot relay listening on http://{shown}:{config.port} (model: {', '.join(models)}{scale})"]
    if DEFAULT_APP in config.apps:
        lines[0] += f" — open {base}/ for the demo"
        if config.demo_docs is not None:
            lines.append(f"  the demo's docs: {base}/docs/ (ask the demo a question about them)")
    for app_id, app in sorted(config.apps.items()):
        if app_id == DEFAULT_APP:
            continue
        origins = ", ".join(app.allowed_origins) or "none (a backend creates conversations with the app secret)"
        lines.append(f"  app {app_id}: allowed origins {origins}")
        lines.append(f'    embed: <script src="{base}/widget/autopilot.js" data-app="{app_id}"></script>')
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["stats"]:  # autopilot-relay stats: the site owner's figures (widget.relay.http.insight)
        from .http.insight import main as stats_main

        return stats_main(argv[1:])
    if argv[:1] == ["index"]:  # autopilot-relay index: build an app's docs index (widget.relay.docs.cli)
        from .docs.cli import index_main

        return index_main(argv[1:])
    if argv[:1] == ["search"]:  # autopilot-relay search: what search_docs gives the model for a question
        from .docs.cli import search_main

        return search_main(argv[1:])
    if argv[:1] == ["embeddings"]:  # autopilot-relay embeddings fetch|check: hybrid docs search's model folder
        from .docs.embeddings import embeddings_main

        return embeddings_main(argv[1:])
    if argv[:1] == ["eval"]:  # autopilot-relay eval: the docs index measured on a probe file
        from .docs.eval import eval_main

        return eval_main(argv[1:])
    args = build_parser().parse_args(argv)
    from .config import load_config, parse_app_flag

    try:
        apps = dict(parse_app_flag(spec) for spec in args.app) or None
        config = load_config(
            args.config,
            host=args.host, port=args.port, db_path=args.db_path, public_url=args.public_url,
            database_url=args.database_url, redis_url=args.redis_url,
            dist_dir=Path(args.dist_dir) if args.dist_dir else None, retention_days=args.retention_days,
            log_level=args.log_level, apps=apps, trusted_proxies=args.trusted_proxies,
            drain_timeout_s=args.drain_timeout_s,
            demo_docs=Path(args.demo_docs) if args.demo_docs else None,
        )
        if args.demo_chunk_delay_ms is not None:
            if args.demo_chunk_delay_ms < 0:
                raise ConfigError("--demo-chunk-delay-ms must be >= 0")
            config.models["demo"].chunk_delay_ms = args.demo_chunk_delay_ms
    except ConfigError as exc:
        print(f"autopilot relay: bad config: {exc}", file=sys.stderr)
        return 2

    from .app import create_app
    from .drain import RelayServer
    from .http.limits import LogStormFilter
    from .server import descriptor_limit, uvicorn_config

    # Every logger (the relay's, uvicorn's, asyncio's) writes JSON lines through one handler, at most one line
    # per cause per interval.
    handler = logging.StreamHandler()
    handler.setFormatter(_JsonFormatter())
    handler.addFilter(LogStormFilter(config.log_repeat_interval_s))
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(logging.WARNING)
    root = logging.getLogger("widget")
    root.handlers[:] = []
    root.setLevel(config.log_level.upper())
    root.propagate = True
    descriptor_limit(raise_soft=True)
    try:
        app = create_app(config)
    except ConfigError as exc:
        print(f"autopilot relay: bad config: {exc}", file=sys.stderr)
        return 2
    print(startup_banner(config), flush=True)
    ucfg = uvicorn_config(app, config, log_level="warning", host=config.host, port=config.port, log_config=None)
    RelayServer(ucfg, app.hub, config.drain_timeout_s).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
