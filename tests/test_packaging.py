"""Packaging: ``python -m build`` in a clean copy of the sources builds the browser assets (the in-tree build
backend runs the asset build first) and then a wheel that ships them; installed into a fresh venv, its
``autopilot-relay`` command serves a working widget with no npm and no source tree around.

The new venv sees the site-packages of the Python running the tests (through a ``.pth`` file: when that Python
is itself a venv, ``--system-site-packages`` would show the base Python's instead), behind its own, and the wheel
goes in with ``--no-deps``, so nothing is downloaded; the build runs ``--no-isolation`` for the same reason
(setuptools and wheel come from the test extras).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, free_port, open_page

pytestmark = pytest.mark.build


def _source_copy(dest: Path) -> Path:
    """What a clean clone has (tracked and new, not ignored, files), without widget/_dist or caches."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "pyproject.toml", "README.md", "build.py",
                            "MANIFEST.in", "build.lock.json", "buildtools", "widget", "static"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    assert not (dest / "widget" / "_dist").exists()
    return dest


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def _get(url: str) -> tuple[int, Any, bytes]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.headers, r.read()


def _see_our_site_packages(py: Path) -> None:
    """Let the venv of ``py`` import what this Python has installed (the relay's dependencies), after its own.

    Plain path lines of a ``.pth`` file are appended to ``sys.path``; this environment's own ``.pth`` files (its
    editable install of this checkout among them) are not run, so ``widget`` can only come from the wheel."""
    ours = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    theirs = _run([str(py), "-c", "import site; print(site.getsitepackages()[0])"], cwd=py.parent).strip()
    Path(theirs, "_test_parent_env.pth").write_text("".join(f"{p}\n" for p in ours if Path(p).is_dir()))


def _build_and_install(tmp: Path) -> tuple[Path, Path, str]:
    try:
        import wheel  # noqa: F401
    except ImportError:
        pytest.fail("the packaging test builds --no-isolation and needs 'wheel': pip install -e '.[test]'")
    src = _source_copy(tmp / "src")
    env = {**os.environ, "AUTOPILOT_BUILD_CACHE": os.environ.get("AUTOPILOT_BUILD_CACHE", str(ROOT / ".build-cache"))}
    out = _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
                "--outdir", str(tmp / "dist")], cwd=src, env=env)
    assert "assemble" in out and "Successfully built" in out, out[-2000:]  # our asset build ran first
    wheels = list((tmp / "dist").glob("autopilot_widget-*-py3-none-any.whl"))
    assert len(wheels) == 1
    bid = json.loads((src / "widget" / "_dist" / "manifest.json").read_text())["build_id"]
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    py = venv / "bin" / "python"
    _see_our_site_packages(py)
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheels[0])],
         cwd=tmp)
    return wheels[0], venv, bid


async def test_wheel_built_by_python_m_build_serves_the_widget_from_a_fresh_venv(tmp_path, browser):
    t0 = time.monotonic()
    wheel, venv, bid = await asyncio.to_thread(_build_and_install, tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    for need in ("widget/_dist/autopilot.js", "widget/_dist/manifest.json", f"widget/_dist/{bid}/bundle.zip",
                 f"widget/_dist/{bid}/pyodide/pyodide.asm.wasm", f"widget/_dist/{bid}/pyscript/core.js",
                 f"widget/_dist/{bid}/demo/index.html", "widget/relay/__main__.py"):
        assert need in names, need
    assert not [n for n in names if n.startswith(("tests/", "static/", "bench/", "buildtools/")) or n == "build.py"]
    # The installed package is the venv's, not this checkout's.
    where = _run([str(venv / "bin" / "python"), "-c", "import widget; print(widget.__file__)"], cwd=tmp_path).strip()
    assert where.startswith(str(venv)), where

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "relay.log"
    proc = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "autopilot-relay"), "--host", "127.0.0.1", "--port", str(port),
        "--db", str(tmp_path / "relay.sqlite3"), "--demo-chunk-delay-ms", "2",
        cwd=tmp_path, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            try:
                await asyncio.to_thread(_get, base + "/healthz")
                break
            except OSError:
                assert proc.returncode is None, log.read_text()
                await asyncio.sleep(0.1)
        status, headers, body = await asyncio.to_thread(_get, base + "/widget/autopilot.js")
        assert status == 200 and bid.encode() in body
        status, headers, body = await asyncio.to_thread(_get, f"{base}/widget/{bid}/pyodide/pyodide.mjs")
        assert status == 200 and "immutable" in headers["Cache-Control"]
        # The demo page, booted and joined, from the installed package alone.
        ctx, page, plog = await open_page(browser, base + "/")
        try:
            assert await page.evaluate("window.Autopilot.config.buildId") == bid
            assert await page.evaluate("window.Autopilot.send('hello from the wheel')") is True
            await page.wait_for_function(
                "() => window.Autopilot.pyodide.runPython(\"from widget import get_client; "
                "any(m.get('role') == 'assistant' and 'Demo answer' in (m.get('content') or '') "
                "for m in get_client().messages)\")", timeout=20_000)
            assert plog.page_errors == []
        finally:
            await ctx.close()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
    print(f"wheel {wheel.stat().st_size / 1e6:.1f} MB, build + install + serve in {time.monotonic() - t0:.1f} s")


def test_sdist_carries_what_a_wheel_built_from_it_needs(tmp_path):
    """``python -m build`` makes the wheel from the sdist: the asset build, its programs and inputs go in; no
    build output does."""
    src = _source_copy(tmp_path / "src")
    _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check",
          "--outdir", str(tmp_path / "dist")], cwd=src)
    (sdist,) = (tmp_path / "dist").glob("autopilot?widget-*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for need in ("pyproject.toml", "MANIFEST.in", "build.py", "build.lock.json", "buildtools/backend.py",
                 "buildtools/programs/_autopilot_stdlib.py", "buildtools/programs/precompile.mjs",
                 "static/autopilot.js", "widget/relay/__main__.py"):
        assert need in names, need
    assert not [n for n in names if n.startswith("widget/_dist")]
