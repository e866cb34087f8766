"""``python -m widget.relay``: run the relay with uvicorn."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from ..errors import ConfigError


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
    p = argparse.ArgumentParser(prog="python -m widget.relay", description="Run the autopilot relay.")
    p.add_argument("--host", help="interface to listen on (default 127.0.0.1; env AUTOPILOT_HOST)")
    p.add_argument("--port", type=int, help="port (default 8765; env AUTOPILOT_PORT)")
    p.add_argument("--db", dest="db_path", help="SQLite database path (default ./autopilot-relay.sqlite3; env AUTOPILOT_DB)")
    p.add_argument("--database-url", dest="database_url",
                   help="PostgreSQL URL instead of SQLite, for several relay processes (env AUTOPILOT_DATABASE_URL)")
    p.add_argument("--redis-url", dest="redis_url",
                   help="Redis URL: events reach sockets joined on other relay processes (env AUTOPILOT_REDIS_URL)")
    p.add_argument("--config", help="TOML config file (env AUTOPILOT_CONFIG)")
    p.add_argument("--app", action="append", default=[], metavar="ID=ORIGIN[,ORIGIN...]",
                   help="add an app with its allowed browser origins (repeatable)")
    p.add_argument("--public-url", dest="public_url", help="base URL clients use to reach the relay (env AUTOPILOT_PUBLIC_URL)")
    p.add_argument("--dist", dest="dist_dir", help="build output folder to serve (default widget/_dist)")
    p.add_argument("--retention-days", dest="retention_days", type=float, help="delete conversations idle this long (0: never)")
    p.add_argument("--demo-chunk-delay-ms", dest="demo_chunk_delay_ms", type=float,
                   help="pause between the demo model's streamed chunks (default 15)")
    p.add_argument("--log-level", dest="log_level", help="debug, info, warning, error (default info)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .config import load_config, parse_app_flag

    try:
        apps = dict(parse_app_flag(spec) for spec in args.app) or None
        config = load_config(
            args.config,
            host=args.host, port=args.port, db_path=args.db_path, public_url=args.public_url,
            database_url=args.database_url, redis_url=args.redis_url,
            dist_dir=Path(args.dist_dir) if args.dist_dir else None, retention_days=args.retention_days,
            log_level=args.log_level, apps=apps,
        )
        if args.demo_chunk_delay_ms is not None:
            if args.demo_chunk_delay_ms < 0:
                raise ConfigError("--demo-chunk-delay-ms must be >= 0")
            config.models["demo"].chunk_delay_ms = args.demo_chunk_delay_ms
    except ConfigError as exc:
        print(f"autopilot relay: bad config: {exc}", file=sys.stderr)
        return 2

    import uvicorn

    from .app import create_app

    handler = logging.StreamHandler()
    handler.setFormatter(_JsonFormatter())
    root = logging.getLogger("widget")
    root.handlers[:] = [handler]
    root.setLevel(config.log_level.upper())
    root.propagate = False
    try:
        app = create_app(config)
    except ConfigError as exc:
        print(f"autopilot relay: bad config: {exc}", file=sys.stderr)
        return 2
    shown = "127.0.0.1" if config.host in ("0.0.0.0", "::") else config.host
    base = f"http://{shown}:{config.port}"
    models = sorted({a.model for a in config.apps.values()})
    scale = "; store: postgresql" if config.database_url else ""
    scale += ", redis" if config.redis_url else ""
    print(f"Autopilot relay listening on {base} (model: {', '.join(models)}{scale}) — open {base}/ for the demo", flush=True)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False, lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
