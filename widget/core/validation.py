"""Argument checks against a function's JSON Schema, the one validation module of client and relay (D6).

jsonschema is imported on first use: it is the slowest import of the bundle and most pages never need it
before the first call. Any exception from the validator counts as "invalid" (known defects of 4.17.3).
"""

from __future__ import annotations

from typing import Any

_validator_cache: dict[int, Any] = {}


def validate_arguments(schema: dict[str, Any] | None, args: Any) -> str | None:
    """None when ``args`` satisfies ``schema``; otherwise a short reason naming the failing path."""
    if not isinstance(args, dict):
        return f"arguments must be an object, got {type(args).__name__}"
    if not schema:
        return None
    try:
        import jsonschema

        validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator = validator_cls(schema)
        errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    except Exception as exc:  # noqa: BLE001 - a broken schema or validator bug must not run the handler
        return f"the arguments could not be checked ({type(exc).__name__}: {exc})"
    if not errors:
        return None
    first = errors[0]
    where = "/".join(str(p) for p in first.absolute_path) or "(root)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.message}{more}"
