"""URL templates of declarative tool runs: ``/api/plans/{plan}`` (RFC 6570 level 1, simple names only).

Rules:
- A placeholder is ``{name}``, ``name`` of letters, digits and ``_``; any other use of ``{`` or ``}``
  (operators, modifiers, unbalanced braces) is refused when the tool is declared.
- A placeholder may stand in the path or the query, never in the scheme, the host (authority) or the
  fragment: the model controls neither where a request goes nor what it looks like to the host.
- Each value is percent-encoded as a whole (everything but RFC 3986 unreserved characters), so it cannot add a
  path segment, a query parameter or a fragment.
- A value that would make a ``.`` or ``..`` path segment — also spelt ``%2e``, with full-width or other
  Unicode dots that servers normalise (NFKC) — fails the call before anything is sent.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any
from urllib.parse import quote, unquote

from ..errors import ConfigError, WidgetError

_TOKEN = re.compile(r"\{([^{}]*)\}")
#: Literal template characters kept as they are (RFC 3986 reserved + unreserved + '%'); others are encoded.
_LITERAL_SAFE = ":/?#[]@!$&'()*+,;=-._~%"
_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class TemplateError(WidgetError, ValueError):
    """A call's arguments cannot be put into the template safely; nothing is sent."""

    code = "template_error"


def _split(template: str) -> tuple[str, str, str]:
    """(origin part, path+query part, fragment) of a template, without looking inside placeholders."""
    frag = ""
    if "#" in template:
        template, frag = template.split("#", 1)
        frag = "#" + frag
    if template.startswith("/") and not template.startswith("//"):
        return "", template, frag
    first = re.search(r"[/?]", template)
    head = template[: first.start()] if first else template
    if template.startswith("//") or ":" in head:
        # An absolute URL (or a scheme-relative one): everything up to the end of the authority is the
        # origin. An opaque scheme (mailto:, javascript:, data:) is all origin: the scheme decides what runs.
        m = re.match(r"^[^/?#]*//[^/?#]*", template)
        if m:
            return m.group(0), template[m.end():], frag
        return template, "", frag
    return "", template, frag


def placeholders(template: str) -> list[str]:
    """The placeholder names of ``template``; ConfigError when it breaks a rule above."""
    if not isinstance(template, str) or not template:
        raise ConfigError("A run template must be a non-empty string.")
    names: list[str] = []
    rest = _TOKEN.sub(lambda m: "", template)
    if "{" in rest or "}" in rest:
        raise ConfigError(f"Template {template!r} has an unbalanced brace.")
    for m in _TOKEN.finditer(template):
        name = m.group(1)
        if not _NAME.match(name):
            raise ConfigError(
                f"Template {template!r}: {{{name}}} is not a placeholder; use {{name}} with letters, digits and _ only."
            )
        names.append(name)
    origin, _path, frag = _split(template)
    if "{" in origin:
        raise ConfigError(
            f"Template {template!r} puts a placeholder in the scheme or host; placeholders go in the path or query."
        )
    if "{" in frag:
        raise ConfigError(f"Template {template!r} puts a placeholder in the fragment; use the path or query.")
    return names


def _pieces(text: str) -> list[str]:
    """``text`` split into literal runs and ``{name}`` tokens, in order."""
    out, pos = [], 0
    for m in _TOKEN.finditer(text):
        if m.start() > pos:
            out.append(text[pos : m.start()])
        out.append(m.group(0))
        pos = m.end()
    if pos < len(text):
        out.append(text[pos:])
    return out


def _as_text(value: Any, name: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TemplateError(f"Argument {name!r} must be a string, number or boolean to go into a URL.")


def _is_dot_segment(segment: str) -> bool:
    text = segment
    # Decode repeatedly: %252e decodes to %2e on a server that decodes twice.
    for _ in range(3):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    text = unicodedata.normalize("NFKC", text)
    return text.strip() in (".", "..")


def expand(template: str, args: dict[str, Any]) -> str:
    """Fill ``template`` with URL-encoded ``args``; TemplateError when a value is missing or unsafe."""
    names = placeholders(template)
    missing = [n for n in names if args.get(n) is None]
    if missing:
        raise TemplateError(f"Missing value for {', '.join(repr(n) for n in missing)} in the URL.")
    origin, rest, frag = _split(template)
    path, sep, query = rest.partition("?")

    def fill(part: str, in_path: bool) -> str:
        out = []
        for segment in part.split("/") if in_path else [part]:
            has_value = bool(_TOKEN.search(segment))
            filled = "".join(
                quote(_as_text(args[piece[1:-1]], piece[1:-1]), safe="")
                if _TOKEN.fullmatch(piece)
                else quote(piece, safe=_LITERAL_SAFE)
                for piece in _pieces(segment)
            )
            if in_path and has_value and _is_dot_segment(filled):
                raise TemplateError("An argument would make a '.' or '..' path segment; the call was not sent.")
            out.append(filled)
        return "/".join(out) if in_path else out[0]

    return quote(origin, safe=_LITERAL_SAFE) + fill(path, True) + (sep + fill(query, False) if sep else "") + frag
