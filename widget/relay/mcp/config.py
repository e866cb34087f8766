"""The MCP servers of an app in the relay config (``[apps.<id>.mcp.<server>]``).

A server is reached over stdio (the relay starts ``command``) or streamable HTTP (``url``). Only the tools on
its ``tools`` allowlist reach the model. Secrets never sit in the config file: ``env`` and ``headers`` map a
name to the name of a relay environment variable, read when the relay starts (a missing one is a
ConfigError), so a page can never supply or see them.

    [apps.shop.mcp.tickets]
    transport = "stdio"
    command = ["python", "-m", "tickets_mcp"]
    env = { TICKETS_TOKEN = "SHOP_TICKETS_TOKEN" }   # the server's variable = the relay's variable
    tools = ["search", "close_ticket"]
    sensitive = { close_ticket = true }              # the reader confirms it in the bar
    timeout_s = 10

    [apps.shop.mcp.docs]
    transport = "http"
    url = "https://mcp.example.com/mcp"
    headers = { Authorization = "DOCS_MCP_AUTHORIZATION" }
    tools = ["*"]
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from ...errors import ConfigError

#: A server's name: it is part of its tools' names (``mcp__<server>__<tool>``), so short and plain.
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,23}$")
#: An environment variable's name.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Every tool of the server (an allowlist that lists nothing else).
ALL_TOOLS = "*"

Transport = Literal["stdio", "http"]


@dataclass
class McpServerConfig:
    """One MCP server of an app."""

    transport: Transport = "stdio"
    #: stdio: the program and its arguments, started by the relay.
    command: list[str] = field(default_factory=list)
    #: stdio: the server's working directory (default: the relay's).
    cwd: str | None = None
    #: stdio: the server's environment variable -> the relay environment variable holding its value.
    env: dict[str, str] = field(default_factory=dict)
    #: http: the streamable-HTTP endpoint.
    url: str = ""
    #: http: a request header -> the relay environment variable holding its value.
    headers: dict[str, str] = field(default_factory=dict)
    #: The allowlist: tool names of the server the model may call (``["*"]``: all of them).
    tools: list[str] = field(default_factory=list)
    #: Per tool: whether the reader must confirm each call in the bar. A tool not named here is sensitive when
    #: the server marks it destructive (and not read-only).
    sensitive: dict[str, bool] = field(default_factory=dict)
    #: A call's limit, seconds.
    timeout_s: float = 10.0
    #: Starting the server (process start or connection, handshake, tool list), seconds.
    startup_timeout_s: float = 10.0
    #: After a failed start, the next attempt waits this long (seconds); until then the model is told why.
    retry_after_s: float = 30.0
    #: The largest message the relay reads from the server (bytes): a tool result over it is not read (the model
    #: is told so), and memory stays bounded whatever the server sends.
    max_result_bytes: int = 1_000_000
    #: The values of ``env`` / ``headers`` read from the relay's environment (set by ``finalize_servers``).
    resolved_env: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    resolved_headers: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def allows(self, tool: str) -> bool:
        """Whether the allowlist lets the model see ``tool``."""
        return ALL_TOOLS in self.tools or tool in self.tools


def parse_servers(data: Any, where: str) -> dict[str, McpServerConfig]:
    """``[apps.<id>.mcp]`` from TOML: server name -> its config (ConfigError naming the key)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table of MCP servers")
    names = {f.name for f in dataclasses.fields(McpServerConfig) if not f.name.startswith("resolved_")}
    out = {}
    for server, table in data.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}.{server} must be a table")
        unknown = sorted(set(table) - names)
        if unknown:
            raise ConfigError(f"{where}.{server}: unknown key {unknown[0]!r} (known: {', '.join(sorted(names))})")
        out[server] = McpServerConfig(**dict(table))
    return out


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{where} must be a number > 0")
    return float(value)


def _names(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k and isinstance(v, str)
                                                 for k, v in value.items()):
        raise ConfigError(f"{where} must be a table of NAME = \"ENVIRONMENT_VARIABLE\"")
    for var in value.values():
        if not ENV_NAME.match(var):
            raise ConfigError(f"{where}: {var!r} is not an environment variable name (the value is read from the "
                              "relay's environment, never written in the config)")
    return dict(value)


def _resolve(names: dict[str, str], env: Mapping[str, str], where: str) -> dict[str, str]:
    out = {}
    for key, var in names.items():
        value = env.get(var)
        if value is None:
            raise ConfigError(f"{where}: environment variable {var} is not set (it gives {key})")
        out[key] = value
    return out


def finalize_servers(where: str, servers: Any, env: Mapping[str, str]) -> dict[str, McpServerConfig]:
    """Checked copies of an app's servers, their secrets read from ``env`` (ConfigError, one line)."""
    if not isinstance(servers, Mapping):
        raise ConfigError(f"{where}: mcp must be a table of servers")
    out: dict[str, McpServerConfig] = {}
    for name, given in servers.items():
        at = f"{where}: mcp server {name!r}"
        if not isinstance(given, McpServerConfig):
            raise ConfigError(f"{at} must be a table (transport, command or url, tools, ...)")
        if not isinstance(name, str) or not SERVER_NAME.match(name):
            raise ConfigError(f"{at}: a server name is 1-24 letters, digits or '-' (it is part of its tools' names)")
        s = dataclasses.replace(given, command=list(given.command),
                                tools=list(given.tools), sensitive=dict(given.sensitive))
        if s.transport == "stdio":
            if not s.command or not all(isinstance(c, str) and c for c in s.command):
                raise ConfigError(f"{at}: stdio needs command, a list like [\"python\", \"server.py\"]")
            if s.url or s.headers:
                raise ConfigError(f"{at}: url and headers are for transport = \"http\"")
            if s.cwd is not None and not isinstance(s.cwd, str):
                raise ConfigError(f"{at}: cwd must be a path")
        elif s.transport == "http":
            parts = urlsplit(s.url) if isinstance(s.url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(f"{at}: http needs url, like https://host/mcp")
            if s.command or s.env:
                raise ConfigError(f"{at}: command and env are for transport = \"stdio\"")
        else:
            raise ConfigError(f"{at}: transport must be \"stdio\" or \"http\", got {s.transport!r}")
        if not isinstance(s.tools, list) or not s.tools or not all(isinstance(t, str) and t for t in s.tools):
            raise ConfigError(f"{at}: tools must list the tool names the model may call ([\"*\"] for all)")
        if not isinstance(s.sensitive, dict) or not all(isinstance(v, bool) for v in s.sensitive.values()):
            raise ConfigError(f"{at}: sensitive must be a table of tool = true/false")
        s.timeout_s = _number(s.timeout_s, f"{at}: timeout_s")
        s.startup_timeout_s = _number(s.startup_timeout_s, f"{at}: startup_timeout_s")
        s.retry_after_s = _number(s.retry_after_s, f"{at}: retry_after_s")
        if isinstance(s.max_result_bytes, bool) or not isinstance(s.max_result_bytes, int) or s.max_result_bytes < 1024:
            raise ConfigError(f"{at}: max_result_bytes must be an integer >= 1024")
        s.env = _names(s.env, f"{at}: env")
        s.headers = _names(s.headers, f"{at}: headers")
        s.resolved_env = _resolve(s.env, env, at)
        s.resolved_headers = _resolve(s.headers, env, at)
        out[name] = s
    return out
