"""Run inside Pyodide before its memory snapshot is taken (snapshot.mjs): import what the widget's boot imports, so
the restored snapshot has it loaded. ``__BUNDLE__`` is replaced with where the bundle zip is mounted."""

import gc
import importlib
import sys
import zipfile

BUNDLE = "__BUNDLE__"


def prepare() -> None:
    """Put the bundle on sys.path, install the lazy-stdlib finder and import the widget's modules."""
    if BUNDLE not in sys.path:
        sys.path.insert(0, BUNDLE)
    import _autopilot_stdlib  # the lazy-stdlib finder, in the boot's stdlib zip

    _autopilot_stdlib.install(None)  # the loader sets the URL after the restore
    names = sorted({n[:-4].replace("/", ".").removesuffix(".__init__") for n in zipfile.ZipFile(BUNDLE).namelist()
                    if n.startswith("widget/") and n.endswith(".pyc")})
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - server-side transports and the like: not imported in the browser either
            pass
    for name in ("jsonpatch", "markdown"):  # jsonschema is a lazy group: imported on the first argument check
        importlib.import_module(name)
    try:
        from widget.core.markdown import render_markdown

        render_markdown("# a\n\n*b* `c` [d](https://e.f)\n\n- g\n\n```\nh\n```\n\n|i|j|\n|-|-|\n|1|2|\n")
    except ImportError:
        pass


prepare()
gc.collect()
