"""Steps 2-4: the pinned npm packages (npm pack) and wheels (pip download), checked against the lock."""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from .config import PIP_TARGET_ARGS
from .util import BuildError, JsonObject, pip_command, require_tool, run_tool, sha256_file


def npm_pack(specs: list[str], tmp: Path) -> dict[str, JsonObject]:
    npm = require_tool("npm", "fetch npm packages")
    proc = run_tool([npm, "pack", *specs, "--pack-destination", str(tmp), "--json",
                 "--ignore-scripts", "--no-fund", "--no-audit"], "npm pack", cwd=tmp)
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        raise BuildError("npm pack: could not parse its --json output") from None
    out = {}
    for item in info:
        if not (tmp / item["filename"]).is_file():
            raise BuildError(f"npm pack: {item['filename']} was not written")
        out[item["name"]] = {"version": item["version"], "file": item["filename"],
                             "integrity": item.get("integrity", "")}
    return out


def pip_download(specs: list[str], tmp: Path) -> dict[str, JsonObject]:
    pip = pip_command()
    run_tool([*pip, "download", "--no-deps", "--only-binary=:all:", *PIP_TARGET_ARGS,
          "--disable-pip-version-check", "--no-input", "-q", "-d", str(tmp), *specs],
         "pip download")
    out = {}
    for whl in sorted(tmp.glob("*.whl")):
        dist, version = whl.name.split("-")[:2]
        if not whl.name.endswith("-none-any.whl"):
            raise BuildError(f"pip download: {whl.name} is not a pure-Python wheel")
        out[normalize_name(dist)] = {"version": version, "file": whl.name}
    return out


def normalize_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def fetch_pinned(kind: str, pins: dict[str, str], lock: JsonObject | None, new_lock: JsonObject, dl_dir: Path,
           update_lock: bool) -> tuple[dict[str, Path], str]:
    """Make sure every pinned artifact is in the cache and matches the lock."""
    dl_dir.mkdir(parents=True, exist_ok=True)
    locked = (lock or {}).get(kind, {})
    have: dict[str, Path] = {}
    missing = []
    for name in pins:
        entry = locked.get(name)
        path = dl_dir / entry["file"] if entry else None
        if not update_lock and path and path.is_file() and sha256_file(path) == entry["sha256"]:
            have[name] = path
            new_lock[kind][name] = entry
        else:  # not cached, or the cached copy does not match: fetch it and check again
            missing.append(name)
    if missing:
        tmp = Path(tempfile.mkdtemp(prefix=f".incoming-{kind}-", dir=dl_dir))
        try:
            if kind == "npm":
                packed = npm_pack([f"{n}@{pins[n]}" for n in missing], tmp)
                got: dict[str, JsonObject | None] = {n: packed.get(n) for n in missing}
            else:
                raw = pip_download([f"{n}=={pins[n]}" for n in missing], tmp)
                got = {n: raw.get(normalize_name(n)) for n in missing}
            for name in missing:
                info = got.get(name)
                if not info:
                    raise BuildError(f"{kind}: {name} {pins[name]} was not downloaded")
                if info["version"] != pins[name]:
                    raise BuildError(f"{kind}: asked for {name} {pins[name]}, got {info['version']}")
                digest = sha256_file(tmp / info["file"])
                entry = locked.get(name)
                if entry and not update_lock and (digest != entry["sha256"] or info["file"] != entry["file"]):
                    raise BuildError(
                        f"sha256 mismatch for {kind} {name} {pins[name]} ({info['file']}): "
                        f"build.lock.json has {entry['sha256'][:16]}..., the registry served "
                        f"{digest[:16]}...; if the change is expected run --update-lock")
                os.replace(tmp / info["file"], dl_dir / info["file"])
                info = dict(info, sha256=digest)
                if not info.get("integrity"):
                    info.pop("integrity", None)
                new_lock[kind][name] = info
                have[name] = dl_dir / info["file"]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    status = "cached" if not missing else f"downloaded {len(missing)}, cached {len(pins) - len(missing)}"
    return have, f"{status}: " + ", ".join(f"{n} {pins[n]}" for n in pins)
