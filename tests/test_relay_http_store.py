"""A real full disk under a relay process (its file-size limit reached by the SQLite file): writes are refused with
the JSON error shape and a stable code, /readyz says not ready, /healthz still answers."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, free_port, stop_process

from widget import protocol as P

pytestmark = pytest.mark.relay

SECRET = "store-test-secret-0123456789"
#: The biggest file the relay may write: the fresh database fits, a few hundred conversations do not.
FILE_LIMIT = 768 * 1024


def call(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    """Status, headers (case-insensitive) and JSON body."""
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def test_a_full_disk_is_a_json_503_and_not_ready(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "relay.toml").write_text(f'[apps.shop]\nsecret = "{SECRET}"\n')
    log = tmp_path / "relay.log"

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))

    proc = subprocess.Popen(
        [sys.executable, "-m", "widget.relay", "--port", str(port), "--db", str(tmp_path / "relay.sqlite3"),
         "--config", str(tmp_path / "relay.toml")], cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "AUTOPILOT_READINESS_TIMEOUT_S": "5"}, preexec_fn=limit_file_size)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(400):
            try:
                if call(f"{base}/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        assert call(f"{base}/readyz")[0] == 200
        auth = {"Authorization": f"Bearer {SECRET}", "Content-Type": "application/json"}
        created = 0
        for _ in range(5000):
            status, headers, body = call(f"{base}/api/apps/shop/conversations", "POST", auth)
            if status != 201:
                break
            created += 1
        assert created > 0 and status == 503, (created, status, body)
        assert body["error"]["code"] == P.ErrorCode.UNAVAILABLE and headers.get("Retry-After") == "5"
        status, _, body = call(f"{base}/readyz")
        assert status == 503 and body["checks"]["store"].startswith("error:"), body
        assert call(f"{base}/healthz")[0] == 200
        assert "Traceback" not in log.read_text()
    finally:
        stop_process(proc)
