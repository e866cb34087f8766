"""Argument checks against a function's JSON Schema, the one validation module of client and relay.

jsonschema is imported on first use: it is the slowest import of the bundle and most pages never need it
before the first call. Any exception from the validator counts as "invalid" (known defects of 4.17.3).
``enum`` compares as JSON does at any depth (4.17.3 takes ``[0]`` for ``[false]``). References are resolved
inside the schema and against the bundled meta-schemas only: a ``$ref`` to a URL is never fetched (no request,
no local file read, no hang on a slow host); it makes the arguments invalid. Works with the browser's
jsonschema 4.17.3 and with later versions (``referencing``). tests/test_schema_suite*.py run the
JSON-Schema-Test-Suite on ``validate`` in CPython and in the browser.
"""

from __future__ import annotations

import inspect
import operator
import sys
from typing import Any

_kwargs_cache: dict[type, str] = {}
_strict_cache: dict[type, Any] = {}


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality (RFC 6902's ``test``, JSON Schema's ``enum``): ``false`` is not ``0`` at any depth; numbers
    compare by value (``1`` == ``1.0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _strict(validator_cls: Any) -> Any:
    """``validator_cls`` with ``enum`` comparing as JSON does (4.17.3 accepts ``[0]`` for ``enum: [[false]]``)."""
    cls = _strict_cache.get(validator_cls)
    if cls is None:
        import jsonschema

        def enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Any:
            if not any(json_equal(instance, e) for e in enums):
                yield jsonschema.exceptions.ValidationError(f"{instance!r} is not one of {enums!r}")

        applicable = getattr(validator_cls, "_APPLICABLE_VALIDATORS", None)
        if applicable is None:  # 4.17 keeps no record of it (its ``extend`` loses it); drafts 3-7 ignore $ref siblings
            from jsonschema import _legacy_validators

            modern = "$dynamicRef" in validator_cls.VALIDATORS or "$recursiveRef" in validator_cls.VALIDATORS
            applicable = operator.methodcaller("items") if modern else _legacy_validators.ignore_ref_siblings
        cls = _strict_cache[validator_cls] = jsonschema.validators.create(
            meta_schema=validator_cls.META_SCHEMA, validators={**validator_cls.VALIDATORS, "enum": enum},
            type_checker=validator_cls.TYPE_CHECKER, format_checker=validator_cls.FORMAT_CHECKER,
            id_of=validator_cls.ID_OF, applicable_validators=applicable,
        )
    return cls


def _offline(validator_cls: Any, schema: Any) -> dict[str, Any]:
    """Constructor arguments that keep reference resolution offline, for this jsonschema version."""
    kind = _kwargs_cache.get(validator_cls)
    if kind is None:
        params = inspect.signature(validator_cls).parameters
        kind = _kwargs_cache[validator_cls] = "registry" if "registry" in params else "resolver"
    if kind == "registry":  # jsonschema >= 4.18: a registry without ``retrieve`` resolves nothing remote
        from referencing import Registry

        return {"registry": Registry()}
    return {"resolver": _local_only_resolver().from_schema(schema, id_of=validator_cls.ID_OF)}


_resolver_cls: list[Any] = []


def _local_only_resolver() -> Any:
    """jsonschema 4.17's RefResolver with remote resolution refused."""
    if not _resolver_cls:
        import jsonschema

        # jsonschema ships no type information (pyproject's ignore_missing_imports), so its classes are Any.
        class LocalOnly(jsonschema.RefResolver):  # type: ignore[misc]
            def resolve_remote(self, uri: str) -> Any:
                raise jsonschema.exceptions.RefResolutionError(f"remote reference {uri!r} is not followed")

        _resolver_cls.append(LocalOnly)
    return _resolver_cls[0]


def _where_key(error: Any) -> list[tuple[bool, Any]]:
    return [(isinstance(p, str), p) for p in error.absolute_path]  # indexes before names, never int < str


def needs_validator(schema: Any) -> bool:
    """Whether checking against ``schema`` imports jsonschema (anything but "no schema" does)."""
    return not (schema is None or schema is True or schema == {})


def validate(schema: Any, instance: Any) -> str | None:
    """None when ``instance`` satisfies ``schema``; otherwise a short reason naming the failing path.

    ``schema`` is any JSON Schema: ``$schema`` picks the draft, 2020-12 otherwise; ``None`` means no schema.
    """
    if not needs_validator(schema):
        return None  # accepts everything; spares the jsonschema import
    try:
        import jsonschema

        draft = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator_cls = _strict(draft)
        validator = validator_cls(schema, **_offline(validator_cls, schema))
        errors = sorted(validator.iter_errors(instance), key=_where_key)
    except Exception as exc:  # noqa: BLE001 - a broken schema or validator bug must not run the handler
        return f"the arguments could not be checked ({type(exc).__name__}: {exc})"
    if not errors:
        return None
    # Every problem at once (as FastAPI answers), so the caller can fix them all in one go; a bounded list.
    shown = [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {_message(e)}" for e in errors[:MAX_SHOWN]]
    more = f"; and {len(errors) - MAX_SHOWN} more" if len(errors) > MAX_SHOWN else ""
    return "; ".join(shown) + more


#: The most problems one reason lists.
MAX_SHOWN = 20


def _message(error: Any) -> str:
    """One problem in words: an ``anyOf``/``oneOf`` says what each choice wanted (``1.5 is not of type 'integer'
    or 'null'``) instead of jsonschema's "not valid under any of the given schemas"."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        here = [e for e in error.context if not list(e.relative_path)]
        if here and all(e.validator == "type" for e in here):
            kinds: list[str] = []
            for e in here:
                for k in e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]:
                    if repr(k) not in kinds:
                        kinds.append(repr(k))
            return f"{error.instance!r} is not of type {' or '.join(kinds)}"
        import jsonschema

        best = jsonschema.exceptions.best_match(error.context)
        if best is not None:
            inner = "/".join(str(p) for p in best.relative_path)
            return f"{inner}: {best.message}" if inner else best.message
    return str(error.message)


def checker_ready() -> bool:
    """Whether importing jsonschema now is cheap: outside the browser build, or once its zip is there (in the
    browser the first import of a lazily loaded zip would fetch it synchronously, blocking the page)."""
    if "jsonschema" in sys.modules:
        return True
    try:
        import _autopilot_stdlib  # the browser build's lazy-zip finder
    except ImportError:
        return True
    groups = set(_autopilot_stdlib.state()["groups"])
    return not (_autopilot_stdlib.groups_of("jsonschema") - groups)


async def prefetch_checker() -> None:
    """Fetch jsonschema's zip without blocking the page (nothing to do outside the browser build)."""
    try:
        import _autopilot_stdlib
    except ImportError:
        return
    await _autopilot_stdlib.prefetch(("jsonschema",))


def schema_problem(schema: Any) -> str | None:
    """None when ``schema`` is valid JSON Schema (against its draft's metaschema, 2020-12 unless ``$schema``
    says otherwise, patterns included); otherwise ``path: reason`` of the most relevant error."""
    import jsonschema

    draft = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    checker = draft(draft.META_SCHEMA, format_checker=draft.FORMAT_CHECKER, **_offline(draft, draft.META_SCHEMA))
    try:
        error = jsonschema.exceptions.best_match(checker.iter_errors(schema))
    except Exception as exc:  # noqa: BLE001 - a validator defect is reported, never a crash of the caller
        return f"(root): could not be checked ({type(exc).__name__}: {exc})"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"{where}: {error.message}"


def validate_arguments(schema: dict[str, Any] | None, args: Any) -> str | None:
    """None when ``args`` (a function call's arguments: an object) satisfies ``schema``; otherwise why not."""
    if not isinstance(args, dict):
        return f"arguments must be an object, got {type(args).__name__}"
    return validate(schema, args)
