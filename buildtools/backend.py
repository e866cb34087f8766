"""The in-tree PEP 517 build backend: setuptools', with the browser assets built into ``widget/_dist`` first, so
every wheel ships them (``python -m build``, ``pip wheel .``, ``pip install .``). Editable installs and sdists
build nothing: a checkout runs ``python build.py`` itself, and an sdist carries the sources the build needs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable", "build_sdist", "build_wheel", "get_requires_for_build_editable", "get_requires_for_build_sdist",
    "get_requires_for_build_wheel", "prepare_metadata_for_build_editable", "prepare_metadata_for_build_wheel",
]


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    """Build the browser assets of this source tree (the backend's working directory), then the wheel.

    The asset build runs as its own process: it looks pip up, and under pip setuptools' distutils shim takes that
    as its cue to unload itself from this process."""
    done = subprocess.run([sys.executable, str(Path.cwd() / "build.py")], check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the browser asset build (python build.py) failed with exit code {done.returncode}")
    return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))
