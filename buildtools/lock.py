"""The lock file: exact versions and sha256 of every download."""
from __future__ import annotations

import json
from pathlib import Path

from .config import LOCK_VERSION, NPM_PINS, WHEEL_PINS
from .util import BuildError, JsonObject


def load_lock(lock_path: Path) -> JsonObject | None:
    if not lock_path.exists():
        return None
    try:
        lock: JsonObject = json.loads(lock_path.read_text())
    except (OSError, ValueError) as e:
        raise BuildError(f"{lock_path.name} is unreadable ({e}); fix it or run with --update-lock") from None
    if lock.get("lock_version") != LOCK_VERSION:
        raise BuildError(f"{lock_path.name} has lock_version {lock.get('lock_version')!r}, "
                         f"expected {LOCK_VERSION}; run with --update-lock")
    return lock


def check_lock_matches_pins(lock: JsonObject, lock_path: Path) -> None:
    for kind, pins in (("npm", NPM_PINS), ("wheels", WHEEL_PINS)):
        locked = lock.get(kind, {})
        for name, version in pins.items():
            got = locked.get(name, {}).get("version")
            if got != version:
                raise BuildError(f"{lock_path.name} pins {kind} {name} {got or '(missing)'} but "
                                 f"build.py pins {version}; run `python build.py --update-lock`")
        extra = set(locked) - set(pins)
        if extra:
            raise BuildError(f"{lock_path.name} lists {kind} {sorted(extra)} that build.py does not "
                             f"pin; run `python build.py --update-lock`")
