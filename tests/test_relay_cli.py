"""The relay's command line: a bad config exits 2 with its one-line reason; a good one starts the relay and says
where it listens (a subprocess, so the relay tier)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.relay


def test_cli_bad_config_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text('[apps.a]\nmodel = "nope"')
    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, "-m", "widget.relay", "--config", str(f)], cwd=root,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "unknown model 'nope'" in p.stderr


def test_cli_starts_and_says_where(tmp_path: Path) -> None:
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parent.parent
    p = subprocess.Popen([sys.executable, "-m", "widget.relay", "--port", str(port), "--db",
                          str(tmp_path / "r.sqlite3"),
                          "--dist", str(tmp_path / "nodist"), "--demo-chunk-delay-ms", "0"],
                         cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith(f"Autopilot relay listening on http://127.0.0.1:{port} (model: demo)")
        assert f"open http://127.0.0.1:{port}/ for the demo" in line
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                    assert r.status == 200
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise AssertionError("the CLI relay did not answer")
    finally:
        p.terminate()
        p.wait(timeout=10)
