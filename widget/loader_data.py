"""What the JS loader (static/autopilot.js) shares with the Python side, written into it by the build.

The loader paints the toggle and reports a failed start before Python runs, so it needs some of the bar's
labels, the toggle's CSS and the names of the client events in JS, at once. Each has one home in Python — the
labels in widget/ui/labels.py, the event names in widget.protocol, the toggle's CSS here (the bar uses it for a
toggle of its own) — and build.py copies them into the loader with :func:`fill_loader`.

build.py loads this file by path, not as part of the package (the build may run where the widget's
dependencies are not installed), so it imports nothing of the package at module level.
"""

from __future__ import annotations

from typing import Final, TypedDict

#: The labels the loader shows before Python runs (keys of widget/ui/labels.py's LABELS); the second line: its
#: composer at the click (static/loader/composer.mjs), worded as the bar's.
LOADER_LABELS: Final = (
    "title", "open", "retry", "starting", "boot_failed", "csp_wasm", "origin_refused", "relay_unreachable",
    "stage_python", "stage_bundle", "stage_widget",
    "dialog", "state_connecting", "input", "send", "hint", "hint_held", "close",
)

#: The toggle's shadow-root CSS, with the loader's status card. ``!important`` on the host: a host page's own
#: ``!important`` rules on ``div`` must not move or hide the toggle. A long URL in a message wraps in the card.
TOGGLE_CSS: Final = (
    ":host{all:initial !important;position:fixed !important;z-index:2147483000 !important;"
    "right:var(--autopilot-toggle-offset-x,20px) !important;bottom:var(--autopilot-toggle-offset-y,20px) !important;"
    "display:block !important;font-family:var(--autopilot-font,system-ui,sans-serif) !important}"
    ":host([data-position=bottom-left]){right:auto !important;left:var(--autopilot-toggle-offset-x,20px) !important}"
    "button.toggle{all:unset;box-sizing:border-box;width:56px;height:56px;border-radius:50%;display:grid;"
    "place-items:center;cursor:pointer;background:var(--autopilot-accent,#4f46e5);color:var(--autopilot-on-accent,#fff);"
    "box-shadow:0 4px 14px rgba(0,0,0,.25)}"
    "button.toggle:focus-visible{outline:3px solid var(--autopilot-focus,#f59e0b);outline-offset:3px}"
    "button.toggle svg{width:26px;height:26px}"
    ".status{position:absolute;bottom:66px;right:0;box-sizing:border-box;width:max-content;min-width:220px;"
    "max-width:min(320px,calc(100vw - 40px));padding:10px 12px;border-radius:10px;overflow-wrap:anywhere;"
    "background:var(--autopilot-surface,#fff);color:var(--autopilot-text,#111);box-shadow:0 4px 18px rgba(0,0,0,.2);"
    "font-size:14px;line-height:1.4}"
    ":host([data-position=bottom-left]) .status{right:auto;left:0}"
    ".status[hidden]{display:none}.status button{margin-top:8px;font:inherit;padding:4px 10px;border-radius:6px;"
    "border:1px solid currentColor;background:transparent;color:inherit;cursor:pointer}"
    "@media (prefers-color-scheme: dark){:host(:not([data-theme=light])) .status{"
    "background:var(--autopilot-surface,#1f2937);color:var(--autopilot-text,#f3f4f6)}}"
    ":host([data-theme=dark]) .status{background:var(--autopilot-surface,#1f2937);color:var(--autopilot-text,#f3f4f6)}"
)

#: Where the build writes the data into the loader.
PLACEHOLDER: Final = b"/*__LOADER_DATA__*/null"


class LoaderData(TypedDict):
    """The object the loader reads as ``SHARED``."""

    labels: dict[str, str]
    events: list[str]
    toggleCss: str


def loader_data() -> LoaderData:
    """The loader's labels (English defaults), the event names ``on()`` accepts, and the toggle's CSS."""
    import runpy  # build time only: the browser imports this module for TOGGLE_CSS alone
    from pathlib import Path

    here = Path(__file__).resolve().parent
    labels = runpy.run_path(str(here / "ui" / "labels.py"))["LABELS"]
    events = runpy.run_path(str(here / "protocol" / "names.py"))["SUBSCRIBABLE_EVENTS"]
    return {"labels": {k: labels[k] for k in LOADER_LABELS}, "events": sorted(events, key=lambda e: (e == "*", e)),
            "toggleCss": TOGGLE_CSS}


def fill_loader(js: bytes) -> bytes:
    """``js`` (the loader's source) with its placeholder replaced by :func:`loader_data` (unchanged without one)."""
    import json

    if PLACEHOLDER not in js:
        return js
    return js.replace(PLACEHOLDER, json.dumps(loader_data(), ensure_ascii=False, sort_keys=True).encode())
