"""What a renderer crash ("Target crashed") needs explained: the machine's memory and limits, and Chromium's log.

A crash is a failure like any other (never retried); these facts go with it so that a crash on a machine that is
not the developer's (CI) says whether it was memory (available memory, the memory cgroup's limit, use and OOM
kills), threads (the pids cgroup), shared memory or disk, or Chromium itself (its stderr, which Playwright writes
to the file named by DEBUG_FILE when DEBUG includes ``pw:browser``; the conftest sets both).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# How Playwright words a renderer crash, by the call that was waiting (a navigation sees a detached frame).
CRASH_MARKS = ("Target crashed", "Page crashed", "frame was detached")
# The file Playwright's driver writes Chromium's stderr to (set by the conftest's browser fixture).
log_path: Path | None = None
# Chromium's stderr lines that say nothing about a crash on a machine with no session bus, fonts or GPU.
_NOISE = ("dbus/", "fontconfig", "Fontconfig", "unexpected operator")


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _mb(value: str | int | None) -> str:
    if value is None:
        return "?"
    try:
        n = int(value)
    except ValueError:
        return str(value)  # "max"
    return "none" if n >= 1 << 60 else f"{n / 1048576:.0f} MB"


def _keyed(path: Path) -> dict[str, str]:
    """A cgroup file of "key value" lines (memory.oom_control, memory.events) as a dict."""
    return dict(line.split(maxsplit=1) for line in (_read(path) or "").splitlines() if " " in line)


def _cgroup_dirs() -> dict[str, Path]:
    """This process's cgroup folder per controller ("" for the unified v2 hierarchy)."""
    base = Path("/sys/fs/cgroup")
    unified = base / "unified" if (base / "unified").is_dir() else base  # v2 beside v1, or alone
    out: dict[str, Path] = {}
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        _, controllers, rel = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = (base / c if c else unified) / rel.lstrip("/")
    return out


def _chromium_pss() -> tuple[int, int]:
    """Chromium's processes and their summed proportional memory (bytes)."""
    n = total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if "chrom" not in Path(f"/proc/{pid}/comm").read_text():
                continue
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    n += 1
        except OSError:
            continue
    return n, total


def machine_facts() -> str:
    """One line: memory and commit limits, cgroup limits and OOM kills, threads, /dev/shm and /tmp free, Chromium."""
    info = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        info[key] = int(rest.split()[0]) * 1024 if rest.strip() else 0  # "1234 kB"
    parts = [f"memory available {_mb(info.get('MemAvailable'))} of {_mb(info.get('MemTotal'))}, "
             f"committed {_mb(info.get('Committed_AS'))} (limit {_mb(info.get('CommitLimit'))}, "
             f"overcommit mode {_read('/proc/sys/vm/overcommit_memory')}), swap free {_mb(info.get('SwapFree'))}"]
    dirs = _cgroup_dirs()
    mem = dirs.get("memory")
    if mem is not None and (mem / "memory.limit_in_bytes").exists():
        oom = _keyed(mem / "memory.oom_control").get("oom_kill", "?")
        parts.append(f"cgroup v1 memory limit {_mb(_read(mem / 'memory.limit_in_bytes'))}, "
                     f"peak {_mb(_read(mem / 'memory.max_usage_in_bytes'))}, oom_kill {oom}")
    v2 = dirs.get("")
    if v2 is not None and (v2 / "memory.max").exists():
        oom = _keyed(v2 / "memory.events").get("oom_kill", "?")
        parts.append(f"cgroup memory.max {_mb(_read(v2 / 'memory.max'))}, current {_mb(_read(v2 / 'memory.current'))}, "
                     f"oom_kill {oom}")
    for ctl in ("pids", ""):
        d = dirs.get(ctl)
        if d is not None and (d / "pids.max").exists():
            parts.append(f"pids {_read(d / 'pids.current')}/{_read(d / 'pids.max')}")
            break
    parts.append(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    for where in ("/dev/shm", "/tmp"):
        try:
            parts.append(f"{where} free {_mb(shutil.disk_usage(where).free)}")
        except OSError:
            pass
    n, pss = _chromium_pss()
    parts.append(f"chromium {n} processes, {_mb(pss)}")
    return "; ".join(parts)


def kernel_kills(lines: int = 2) -> list[str]:
    """The kernel's last OOM-killer lines (dmesg), when this user may read them."""
    try:
        text = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln[:200] for ln in text.splitlines() if "Killed process" in ln or "invoked oom-killer" in ln][-lines:]


def browser_log_tail(lines: int = 12) -> list[str]:
    """The last lines Chromium wrote to stderr (Playwright's DEBUG_FILE), without the known noise."""
    text = _read(log_path) if log_path else None
    if not text:
        return []
    kept = [ln for ln in text.splitlines() if ("[err]" in ln or "<process" in ln) and not any(s in ln for s in _NOISE)]
    return [ln[:300] for ln in kept[-lines:]]
