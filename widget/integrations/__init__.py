"""The widget where a site's documentation is made: a MkDocs plugin and a Sphinx extension (server side).

``widget.integrations.mkdocs`` (the ``autopilot`` entry point of ``mkdocs.plugins``) and
``widget.integrations.sphinx`` (``extensions = ["widget.integrations.sphinx"]``) put the widget's script tag on
every built page and index the built site into the relay's docs index at the end of a build. They run in the docs
build, never in a browser: the package is left out of the browser bundle (``buildtools/config.py``), and
browser-side code never imports it (tests/test_layers.py).
"""
