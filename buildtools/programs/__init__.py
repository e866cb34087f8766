"""The programs the build runs under Node and inside Pyodide, and the lazy-stdlib finder it ships.

They are real files (linted, and hashed into the cache keys of the steps that run them); the build copies them
into its work folder or passes their text to the Node driver.
"""
from __future__ import annotations

import functools
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: The line of ``_autopilot_stdlib.py`` the split step replaces with the lazy groups it found.
FINDER_GROUPS_LINE = "GROUPS: dict[str, tuple[str, list[str]]] = {}\n"


@functools.cache
def program(name: str) -> str:
    """The text of one program file of this folder."""
    text = (HERE / name).read_text()
    if name == "_autopilot_stdlib.py" and FINDER_GROUPS_LINE not in text:
        raise RuntimeError(f"{name} lost its GROUPS line; the split step writes the lazy groups there")
    return text
