"""Relay configuration: TOML / env / flags and one-line errors, each part's settings (starters, config functions,
fallback model, MCP servers, docs, socket bounds, demo docs, docs scopes, reasoning effort) and the start-up banner
(the CLI that reads it: test_relay_cli.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_relay_tool_checks import SUGGEST

from widget.errors import ConfigError
from widget.relay.__main__ import main as relay_main
from widget.relay.__main__ import startup_banner
from widget.relay.config import (
    DEMO_STARTERS,
    AppConfig,
    DocsConfig,
    ModelConfig,
    RelayConfig,
    ToolConfig,
    load_config,
    parse_app_flag,
)
from widget.relay.mcp.config import McpServerConfig, finalize_servers

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


def test_the_banner_offers_the_demo_only_when_there_is_one() -> None:
    demo = startup_banner(load_config(env={}))
    assert "for the demo" in demo and "http://127.0.0.1:8765/" in demo
    mine = startup_banner(load_config(env={}, apps=dict([parse_app_flag("my-site=http://localhost:9150")])))
    assert "demo" not in mine.replace("model: demo", "")
    assert "app my-site: allowed origins http://localhost:9150" in mine
    assert '<script src="http://127.0.0.1:8765/widget/autopilot.js" data-app="my-site"></script>' in mine


def test_starters_from_toml_stripped(tmp_path: Path) -> None:
    f = tmp_path / "relay.toml"
    f.write_text('[apps.a]\nstarters = ["  How do I start?  ", "Pricing", "Plans", "Limits"]\nsuggestions = true\n'
                 '[apps.b]\n')
    cfg = load_config(f, env={})
    assert cfg.apps["a"].starters == ["How do I start?", "Pricing", "Plans", "Limits"]
    assert cfg.apps["a"].suggestions is True
    assert cfg.apps["b"].starters == [] and cfg.apps["b"].suggestions is False
    # the built-in demo app (no apps configured) has suggestions on and starters the demo model acts on
    default = load_config(env={}).apps["demo"]
    assert default.suggestions is True and default.starters == list(DEMO_STARTERS)


@pytest.mark.parametrize(
    "toml, needle",
    [
        ('starters = "Hello"', "starters must be a list of strings, got 'Hello'"),
        ('starters = ["a", "b", "c", "d", "e"]', "starters has 5 entries; at most 4 are shown"),
        ('starters = ["a", 3]', "starters[1] must be a string, got 3"),
        ('starters = ["a", "   "]', "starters[1] is empty"),
        (f'starters = ["{"x" * 201}"]', "starters[0] has 201 characters; the limit is 200"),
        ('starters = ["Hi", " Hi"]', "starters[1] repeats entry 0"),
        ('suggestions = "yes"', "suggestions must be true or false"),
    ],
)
def test_bad_starters_are_one_line_config_errors(tmp_path: Path, toml: str, needle: str) -> None:
    f = tmp_path / "relay.toml"
    f.write_text("[apps.a]\n" + toml + "\n")
    with pytest.raises(ConfigError) as exc:
        load_config(f, env={})
    assert needle in str(exc.value) and "apps.a" in str(exc.value) and "\n" not in str(exc.value)


def test_starters_given_in_python_are_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"app 'x': starters has 5 entries"):
        load_config(env={}, apps={"x": AppConfig(starters=["a", "b", "c", "d", "e"])})
    with pytest.raises(ConfigError, match=r"app 'x': suggestions must be true or false"):
        load_config(env={}, apps={"x": AppConfig(suggestions="on")})  # type: ignore[arg-type]
    cfg = load_config(env={}, apps={"x": AppConfig(starters=(" a ", "b"))})  # type: ignore[arg-type]
    assert cfg.apps["x"].starters == ["a", "b"]


def test_the_tool_name_is_the_relays_own(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'suggest_followups' is the relay's own tool"):
        tool = ToolConfig(callable=lambda a, c: 1, description="d")
        load_config(env={}, apps={"x": AppConfig(tools={SUGGEST: tool})})


def test_config_functions_bound_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "site_tools.py").write_text("def limits(args, ctx):\n    return {'plan': args['plan']}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    f = tmp_path / "relay.toml"
    f.write_text('''
[apps.shop]
allowed_origins = ["https://shop.example"]

[apps.shop.tools.plan_limits]
callable = "site_tools:limits"
description = "Live limits of one plan."

[apps.shop.tools.plan_limits.parameters]
type = "object"
properties = { plan = { type = "string", enum = ["free", "pro"] } }
required = ["plan"]
''')
    cfg = load_config(f, env={})
    tool = cfg.apps["shop"].tools["plan_limits"]
    assert tool.func is not None and tool.func({"plan": "pro"}, {}) == {"plan": "pro"}
    assert tool.parameters["properties"]["plan"]["enum"] == ["free", "pro"]


@pytest.mark.parametrize("table, needle", [
    ('callable = "no_such_module_xyz:f"\ndescription = "d"',
     "cannot import 'no_such_module_xyz:f': ModuleNotFoundError"),
    ('callable = "json:no_such_function"\ndescription = "d"', "cannot import 'json:no_such_function': AttributeError"),
    ('callable = "json.decoder:JSONDecodeError.nope"\ndescription = "d"', "AttributeError"),
    ('callable = "json"\ndescription = "d"', 'callable must be "module:function"'),
    ('callable = "json:__name__"\ndescription = "d"', "is not callable"),
    ('callable = "json:dumps"', "needs a description"),
    ('callable = "json:dumps"\ndescription = "d"\nparameters = { type = "object", properties = { a = { type = "array" '
     '} } }', "type must be string, number, integer or boolean"),
    ('callable = "json:dumps"\ndescription = "d"\ncolour = 1', "unknown key 'colour'"),
])
def test_bad_config_function_is_a_config_error(tmp_path: Path, table: str, needle: str) -> None:
    f = tmp_path / "relay.toml"
    f.write_text(f"[apps.shop.tools.plan_limits]\n{table}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(f, env={})
    assert needle in str(exc.value) and "\n" not in str(exc.value)
    assert "app 'shop'" in str(exc.value) or "apps.shop" in str(exc.value)
    f.write_text('[apps.shop.tools.offer_actions]\ncallable = "json:dumps"\ndescription = "d"\n')
    with pytest.raises(ConfigError, match="the relay's own tool"):
        load_config(f, env={})


@pytest.mark.parametrize("fallback, message", [("nope", "fallback_model must name another model"),
                                               ("primary", "fallback_model must name another model")])
def test_a_fallback_must_name_another_configured_model(tmp_path: Path, fallback: str, message: str) -> None:
    cfg = RelayConfig(db_path=str(tmp_path / "r.sqlite3"), models={"primary": ModelConfig()},
                      apps={"a": AppConfig(model="primary", fallback_model=fallback)})
    with pytest.raises(ConfigError, match=message):
        cfg.finalized()


def test_config_checks_and_secrets_from_the_environment(tmp_path: Path) -> None:
    ok = McpServerConfig(command=["srv"], env={"TOKEN": "MY_TOKEN"}, tools=["a"])
    got = finalize_servers("app 'x'", {"s1": ok}, {"MY_TOKEN": "t"})
    assert got["s1"].resolved_env == {"TOKEN": "t"} and ok.resolved_env == {}
    bad = [
        ({"s1": McpServerConfig(command=["srv"], env={"TOKEN": "MY_TOKEN"}, tools=["a"])}, {},
         "environment variable MY_TOKEN is not set"),
        ({"s1": McpServerConfig(command=["srv"], env={"TOKEN": "sk-123 secret"}, tools=["a"])}, {},
         "not an environment variable name"),
        ({"s1": McpServerConfig(command=["srv"], tools=[])}, {}, "tools must list"),
        ({"s 1": McpServerConfig(command=["srv"], tools=["a"])}, {}, "a server name is"),
        ({"s1": McpServerConfig(transport="sse", command=["srv"], tools=["a"])}, {}, "transport must be"),
        ({"s1": McpServerConfig(transport="http", url="ftp://x", tools=["a"])}, {}, "http needs url"),
        ({"s1": McpServerConfig(command=[], tools=["a"])}, {}, "stdio needs command"),
        ({"s1": McpServerConfig(command=["srv"], tools=["a"], timeout_s=0)}, {}, "timeout_s must be a number > 0"),
    ]
    for given, env, words in bad:
        with pytest.raises(ConfigError, match=words):
            finalize_servers("app 'x'", given, env)
    toml = tmp_path / "relay.toml"
    toml.write_text('[apps.shop]\nallowed_origins = ["https://shop.example"]\n'
                    '[apps.shop.mcp.docs]\ntransport = "http"\nurl = "https://mcp.example/mcp"\n'
                    'headers = { Authorization = "DOCS_AUTH" }\ntools = ["search"]\n')
    cfg = load_config(toml, env={"DOCS_AUTH": "Bearer abc"})
    assert cfg.apps["shop"].mcp["docs"].resolved_headers == {"Authorization": "Bearer abc"}
    toml.write_text('[apps.shop.mcp.docs]\ntransport = "http"\nurl = "https://mcp.example/mcp"\ntools = '
                    '["search"]\nretries = 3\n')
    with pytest.raises(ConfigError, match="unknown key 'retries'"):
        load_config(toml, env={})


def test_config_docs_and_loop(tmp_path: Path) -> None:
    f = tmp_path / "relay.toml"
    f.write_text('[apps.a]\nloop = "one-shot"\n[apps.a.docs]\nnot_found_text = "Nope."\n'
                 'fallback_actions = ["contact_support"]\nrequire_citations = false\n[apps.b]\n')
    cfg = load_config(f, env={})
    a, b = cfg.apps["a"], cfg.apps["b"]
    assert a.loop == "one-shot" and a.docs == DocsConfig(True, False, "Nope.", ["contact_support"])
    assert b.loop == "auto" and b.docs.enabled and b.docs.require_citations and b.docs.fallback_actions == []
    for toml, needle in [
        ('[apps.a]\nloop = "sometimes"', "loop must be one of auto, agentic, one-shot"),
        ('[apps.a]\ndocs = 3', "apps.a.docs must be a table"),
        ('[apps.a.docs]\nnot_found_text = ""', "docs.not_found_text must be a non-empty string"),
        ('[apps.a.docs]\nfallback_actions = ["a", "b", "c", "d"]', "at most 3 action names"),
        ('[apps.a.docs]\nfallback_actions = ["no spaces"]', "docs.fallback_actions must be a list"),
        ('[apps.a.docs]\nrequire_citations = "yes"', "docs.require_citations must be true or false"),
        ('[apps.a.docs]\nindex = "x"', "unknown key 'index'"),
        ('[apps.a.tools.search_docs]\ncallable = "json:dumps"\ndescription = "x"',
         "'search_docs' is the relay's own tool"),
    ]:
        f.write_text(toml + "\n")
        with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
            load_config(f, env={})


def test_socket_bounds_are_settings(tmp_path: Path) -> None:
    """Each bound is a TOML key and an environment variable, with its default, and a negative one is refused."""
    from widget.errors import ConfigError
    from widget.relay.config import load_config

    cfg = load_config(env={})
    assert (cfg.replay_rate_per_minute, cfg.state_patch_rate_per_minute, cfg.socket_send_queue_bytes,
            cfg.unjoined_socket_timeout_s, cfg.idempotency_retention_s, cfg.max_events_per_conversation) == (
        30, 1200, 4_000_000, 20.0, 86_400.0, 50_000)
    toml = tmp_path / "relay.toml"
    toml.write_text("replay_rate_per_minute = 5\nstate_patch_rate_per_minute = 7\nmax_events_per_conversation = 9\n")
    env = {"AUTOPILOT_UNJOINED_SOCKET_TIMEOUT_S": "3", "AUTOPILOT_SOCKET_SEND_QUEUE_BYTES": "1000",
           "AUTOPILOT_IDEMPOTENCY_RETENTION_S": "60"}
    cfg = load_config(toml, env=env)
    assert (cfg.replay_rate_per_minute, cfg.state_patch_rate_per_minute, cfg.max_events_per_conversation) == (5, 7, 9)
    got = (cfg.unjoined_socket_timeout_s, cfg.socket_send_queue_bytes, cfg.idempotency_retention_s)
    assert got == (3.0, 1000, 60.0)
    with pytest.raises(ConfigError, match="replay_rate_per_minute must be >= 0"):
        load_config(env={"AUTOPILOT_REPLAY_RATE_PER_MINUTE": "-1"})


def test_demo_docs_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="demo_docs must be a folder of Markdown pages"):
        RelayConfig(demo_docs=tmp_path / "nope").finalized()
    with pytest.raises(ConfigError, match="the relay has no 'demo' app"):
        RelayConfig(demo_docs=tmp_path, apps={"shop": AppConfig()}).finalized()
    assert relay_main(["--demo-docs", str(tmp_path / "nope"), "--port", "0"]) == 2
    assert "demo_docs must be a folder" in capsys.readouterr().err
    banner = startup_banner(load_config(env={}, demo_docs=tmp_path))
    assert banner.splitlines()[1] == ("  the demo's docs: http://127.0.0.1:8765/docs/ "
                                      "(ask the demo a question about them)")


def test_the_scope_settings(tmp_path: Path) -> None:
    f = tmp_path / "relay.toml"
    f.write_text('[apps.a.docs]\nscopes = false\n[apps.b.docs]\nscope_base = "/docs/"\n'
                 'version_pattern = "\\\\d{4}\\\\.\\\\d+"\n[apps.c]\n')
    cfg = load_config(f, env={})
    assert cfg.apps["a"].docs.scopes is False
    assert cfg.apps["b"].docs.scope_base == "/docs/" and cfg.apps["b"].docs.version_pattern == r"\d{4}\.\d+"
    assert cfg.apps["c"].docs == DocsConfig() and DocsConfig().scopes and DocsConfig().scope_base == "/"
    for toml, needle in [
        ('[apps.a.docs]\nscopes = "yes"', "docs.scopes must be true or false"),
        ('[apps.a.docs]\nscope_base = "docs/"', "docs.scope_base must be a URL path that starts with '/'"),
        ('[apps.a.docs]\nscope_base = "/docs/?v=1"', "docs.scope_base must be a URL path"),
        ('[apps.a.docs]\nversion_pattern = "(3"', "docs.version_pattern '(3' is not a regular expression"),
        ('[apps.a.docs]\nversion_pattern = ""', "docs.version_pattern must be a regular expression"),
        ('[apps.a.docs]\nversions = true', "unknown key 'versions'"),
    ]:
        f.write_text(toml)
        with pytest.raises(ConfigError, match=needle.replace("?", r"\?").replace("(", r"\(")):
            load_config(f, env={})


@pytest.mark.parametrize("adapter, effort, error", [
    ("openai-responses", "low", None),
    ("openai-responses", "huge", "one of none, minimal, low, medium, high, xhigh, max; got 'huge'"),
    ("openai", "low", "reasoning_effort is for the openai-responses adapter"),
])
def test_reasoning_effort_in_the_config_file(tmp_path: Path, adapter: str, effort: str, error: str | None) -> None:
    f = tmp_path / "relay.toml"
    f.write_text(f'[models.m]\nadapter = "{adapter}"\nmodel = "o4-mini"\nreasoning_effort = "{effort}"\n'
                 '[apps.demo]\nmodel = "m"\n')
    if error is None:
        assert load_config(f, env={}).models["m"].reasoning_effort == effort
    else:
        with pytest.raises(ConfigError, match=re.escape(error)):
            load_config(f, env={})
