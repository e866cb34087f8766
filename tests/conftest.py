"""Shared fixtures. Browser and relay fixtures live in tests/browser_fixtures.py and tests/relay_helpers.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
