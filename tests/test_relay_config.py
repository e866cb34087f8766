"""Relay configuration: TOML / env / flags and one-line errors (the CLI that reads it: test_relay_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from widget.errors import ConfigError
from widget.relay.config import RelayConfig, load_config

pytestmark = pytest.mark.unit


def test_defaults_have_demo_app_with_own_origins() -> None:
    cfg = load_config(env={})
    assert cfg.port == 8765 and cfg.host == "127.0.0.1"
    assert cfg.apps["demo"].model == "demo"
    assert cfg.apps["demo"].allowed_origins == ["http://127.0.0.1:8765", "http://localhost:8765"]
    assert cfg.models["demo"].adapter == "demo"


def test_toml_env_and_overrides(tmp_path: Path) -> None:
    f = tmp_path / "relay.toml"
    f.write_text('''
port = 9000
db = "/tmp/x.sqlite3"
retention_days = 7
public_url = "https://relay.example/"

[apps.shop]
allowed_origins = ["https://shop.example", "https://www.shop.example/"]
secret = "0123456789abcdef0123"
ask_user = true
model = "local"

[models.local]
adapter = "openai"
base_url = "http://127.0.0.1:11434/v1"
model = "llama3.1"
api_key_env = "MY_KEY"
''')
    cfg = load_config(f, env={"AUTOPILOT_PORT": "9100", "MY_KEY": "sk-test"}, host="0.0.0.0")
    assert cfg.port == 9100 and cfg.host == "0.0.0.0" and cfg.db_path == "/tmp/x.sqlite3"
    assert cfg.public_url == "https://relay.example" and cfg.retention_days == 7
    shop = cfg.apps["shop"]
    assert shop.allowed_origins == ["https://shop.example", "https://www.shop.example"]
    assert shop.ask_user is True and shop.model == "local"
    assert cfg.models["local"].api_key == "sk-test"
    assert "demo" not in cfg.apps  # a config that lists apps gets exactly those
    assert "https://shop.example" in cfg.all_allowed_origins()


@pytest.mark.parametrize(
    "toml, needle",
    [
        ('port = "x"', "port"),
        ("colour = 1", "unknown key 'colour'"),
        ('[apps.a]\nallowed_origins = ["*"]', "'*' is not allowed"),
        ('[apps.a]\nallowed_origins = ["shop.example"]', "must look like"),
        ('[apps.a]\nmodel = "gpt"', "unknown model 'gpt'"),
        ('[apps.a]\nsecret = "short"', "at least 16"),
        ('[models.m]\nadapter = "magic"', "adapter must be one of"),
        ('[models.m]\nadapter = "openai"', "needs 'model'"),
        ("port = [", "not valid TOML"),
        ('database_url = "mysql://db/x"\nsecret = "0123456789abcdef"', "postgresql://"),
        ('database_url = "postgresql://db/x"', "shared secret"),
        ('redis_url = "redis://r:6379/0"\nsecret = "0123456789abcdef"', "database_url"),
        ('redis_url = "http://r"\ndatabase_url = "postgresql://db/x"\nsecret = "0123456789abcdef"', "redis://"),
        ("get_rate_per_minute = -1", "get_rate_per_minute must be >= 0"),
        ("max_body_bytes = 0", "max_body_bytes must be > 0"),
        ("http_header_timeout_s = 0", "http_header_timeout_s must be > 0"),
        ('trusted_proxies = "127.0.0.1"', "trusted_proxies"),
        ("trusted_proxies = [1]", "trusted_proxies must be a list"),
        ("drain_timeout_s = -5", "drain_timeout_s must be >= 0"),
    ],
)
def test_bad_config_one_line_reason(tmp_path: Path, toml: str, needle: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(toml)
    with pytest.raises(ConfigError) as exc:
        load_config(f, env={})
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_bad_env_and_missing_file() -> None:
    with pytest.raises(ConfigError, match="AUTOPILOT_PORT"):
        load_config(env={"AUTOPILOT_PORT": "eighty"})
    with pytest.raises(ConfigError, match="not found"):
        load_config("/nonexistent/relay.toml", env={})
    with pytest.raises(ConfigError, match="port"):
        RelayConfig(port=70000).finalized()


def test_scale_settings_from_env() -> None:
    cfg = load_config(env={"AUTOPILOT_DATABASE_URL": "postgresql://relay@db:5432/a",
                           "AUTOPILOT_REDIS_URL": "redis://r:6379/0",
                           "AUTOPILOT_SECRET": "0123456789abcdef0123", "AUTOPILOT_REDIS_CHANNEL": "ap"})
    assert (cfg.database_url, cfg.redis_url, cfg.redis_channel) == ("postgresql://relay@db:5432/a", "redis://r:6379/0",
                                                                    "ap")


def test_edge_settings_from_toml_env_and_cli(tmp_path: Path) -> None:
    f = tmp_path / "edge.toml"
    f.write_text("max_body_bytes = 1000\nget_rate_per_minute = 7\nhttp_body_timeout_s = 2.5\n"
                 'trusted_proxies = ["10.0.0.1"]\nmax_connections = 50\n')
    cfg = load_config(f, env={"AUTOPILOT_ASK_USER_RATE_PER_MINUTE": "3", "AUTOPILOT_TRUSTED_PROXIES": "127.0.0.1, ::1",
                              "AUTOPILOT_DRAIN_TIMEOUT_S": "4.5"})
    assert (cfg.max_body_bytes, cfg.get_rate_per_minute, cfg.ask_user_rate_per_minute) == (1000, 7, 3)
    assert (cfg.http_body_timeout_s, cfg.max_connections, cfg.drain_timeout_s) == (2.5, 50, 4.5)
    assert cfg.trusted_proxies == ["127.0.0.1", "::1"]  # the environment wins over the file
    defaults = load_config(env={})
    assert (defaults.max_body_bytes, defaults.http_header_timeout_s, defaults.max_connections_per_address,
            defaults.max_sockets_per_address, defaults.drain_timeout_s, defaults.trusted_proxies) == (262_144, 10.0,
                                                                                                      256, 256, 20.0,
                                                                                                      [])
    from widget.relay.__main__ import build_parser

    args = build_parser().parse_args(["--trusted-proxy", "10.1.1.1", "--trusted-proxy", "10.1.1.2", "--drain-timeout",
                                      "9"])
    assert args.trusted_proxies == ["10.1.1.1", "10.1.1.2"] and args.drain_timeout_s == 9.0
