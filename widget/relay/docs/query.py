"""A reader's question as search terms: never parsed as search syntax.

Both engines get the same terms: the question is cut to ``MAX_QUERY_CHARS``, split into words (letters and
digits in any script; everything else, quotes, ``*``, ``-``, ``:``, parentheses included, separates words),
lower-cased, de-duplicated, and common English words are dropped unless nothing else is left. Each engine then
ORs the terms in its own quoted form, so no character of a question can raise a syntax error or change what is
searched for (``NEAR`` or ``OR`` in a question is just a word).

Scopes (versions and languages): a docs site that serves ``/en/3.12/...`` beside ``/en/3.11/...`` (or ``/latest/``,
``/stable/``, ``/fr/...``) keeps its versions apart by URL path. A search's ``scope`` is a URL path prefix that ends
in ``/`` (``/en/3.11/``): only sections of pages under it. ``page_scope`` reads it off the reader's page URL: the
path's leading segments under the app's ``scope_base`` (``/`` unless configured), an optional language code
(``en``, ``pt-br``, ``zh_CN``: an ISO 639-1 code with an optional region or script) then an optional version
(``3.12``, ``v2``, ``2.x``, ``1.0rc1``, ``3``, ``latest``, ``stable``, ``dev`` …, or what the app's ``version_pattern``
matches), at least one of the two, each followed by ``/``. Only leading segments count, so an unversioned site's
``/api/v1/`` folder is no scope. ``scope_plan`` lists the scopes a search tries in turn: the version the question
names (``in 3.11``, ``version 3.11``, ``v2``) in the page's language, then the page's own scope, then the whole
documentation (``None``), so a scope that finds nothing never leaves the reader without an answer.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from .limits import MAX_QUERY_CHARS, MAX_QUERY_TERMS, MAX_TERM_CHARS

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

#: Words too common to say what a question is about (BM25 weighs them low anyway, but a question of ten of them
#: and one real term should rank by the real term).
STOP_WORDS: frozenset[str] = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
him his how i if in into is it its itself just me might more most my no nor not now of off on once only or other
our ours out over own same she should so some such than that the their theirs them then there these they this
those through to too under until up very was we were what when where which while who whom why will with would
you your yours yourself please tell show explain want need get got let lets use using used way ways s t d m ll re
ve don doesn isn aren can cant dont doesnt im ok okay hi hello thanks thank actually really also instead
possible something anything someone anyone many much one ones make makes made take takes go goes going give
gives kind sort thing things
""".split())


def terms(question: str) -> list[str]:
    """The question's search terms, in order of first appearance (empty when it has no word at all)."""
    words = [w[:MAX_TERM_CHARS] for w in _WORD.findall(question[:MAX_QUERY_CHARS].lower())]
    seen: dict[str, None] = {}
    for w in words:
        seen.setdefault(w, None)
    unique = list(seen)
    kept = [w for w in unique if w not in STOP_WORDS]
    return (kept or unique)[:MAX_QUERY_TERMS]


def fts5_match(words: list[str]) -> str:
    """An FTS5 MATCH expression ORing the terms, each a quoted string (``"colours" OR "dark"``)."""
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


def websearch_or(words: list[str]) -> str:
    """A ``websearch_to_tsquery`` text ORing the terms (terms hold only letters and digits, so no operator)."""
    return " or ".join(w for w in words if w != "or")


# -- scopes: versions and languages ----------------------------------------------------------------------------

#: The longest scope (a URL path prefix) a search takes; a longer one is refused (``ValueError``).
MAX_SCOPE_CHARS = 1_000
#: ISO 639-1 language codes: a leading URL segment that is one of them (optionally with a region or script:
#: ``pt-br``, ``zh_CN``, ``zh-hans``) is the page's language.
LANGUAGES: frozenset[str] = frozenset("""
aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el en eo
es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu ja jv ka kg
ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn
no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw ta
te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
""".split())
_LANGUAGE = re.compile(r"([a-z]{2})(?:[-_](?:[a-z]{2}|[a-z]{4}|\d{3})){0,2}", re.IGNORECASE)
#: Versions by name (a leading URL segment, or in a question next to "version", "docs", "release" …).
VERSION_NAMES: frozenset[str] = frozenset(
    "latest stable dev devel development main master next current nightly unstable edge preview trunk".split())
#: A numbered version in a URL segment: dotted (``3.12``, ``1.0.x``, ``2.1.0rc1``), ``v``-prefixed (``v2``,
#: ``v1.29``), ``N.x``, or a number of one or two digits (``/3/``, docs.python.org's current 3.x); a longer bare
#: number (``/2024/``) is not one (a blog's year).
_VERSION = re.compile(r"(?:v\d+(?:\.\d+){0,3}|\d+(?:\.\d+){1,3})(?:\.x)?(?:[-.]?(?:dev|rc|a|b|alpha|beta|pre|post)\d*)?"
                      r"|\d+\.x|\d{1,2}", re.IGNORECASE)
#: A version a question names: after "version" or as ``vN``, a dotted number not followed by a unit (``1.5 s``,
#: ``2.0 GB``, ``10.5 %`` are amounts), or a name next to "version", "docs", "release" ….
_NAMED = re.compile(
    r"\bversion\s+(?P<after>v?\d+(?:\.\d+){0,3}(?:\.x)?|" + "|".join(sorted(VERSION_NAMES)) + r")\b"
    r"|(?<![\w.])(?P<v>v\d+(?:\.\d+){0,3}(?:\.x)?)(?![\w.]*\w)"
    r"|(?<![\w.])(?P<dotted>\d+\.(?:\d+|x)(?:\.\d+)?)(?![\w%]|\.\d)"  # not an IP address's four numbers
    r"(?!\s*(?:%|percent|ms|s|secs?|seconds?|min|minutes?|h|hours?|days?|[kmgt]i?b|bytes?|px|r?em|x|times|[kmc]?m|kg|"
    r"lbs?)\b)"
    r"|\b(?P<named>" + "|".join(sorted(VERSION_NAMES)) + r")\s+(?:version|release|docs|documentation|branch|build)s?\b",
    re.IGNORECASE)


class Scope(NamedTuple):
    """Where a page sits in a versioned or translated docs site."""

    #: The URL path prefix of its language and version (``/en/3.11/``): what ``DocsIndex.search`` filters by.
    prefix: str
    #: The path above the scope's segments (the app's ``scope_base``, ``/`` by default).
    base: str
    language: str | None
    version: str | None


def url_path(url: str) -> str:
    """A URL's path (``https://docs.example.com/en/3.11/x/#a`` and ``/en/3.11/x/`` give ``/en/3.11/x/``)."""
    try:
        path = urlsplit(url).path
    except ValueError:
        path = url.split("#", 1)[0].split("?", 1)[0]
    return path if path.startswith("/") else "/" + path


def check_scope(scope: str | None) -> str | None:
    """A search's ``scope`` as the engines filter by it: a URL path prefix ending in ``/`` (one is added), None for
    none (``None``, ``""`` or ``"/"``); ``ValueError`` for one that is not a path (no leading ``/``) or too long."""
    if scope is None or scope in ("", "/"):
        return None
    if not isinstance(scope, str) or not scope.startswith("/") or len(scope) > MAX_SCOPE_CHARS:
        raise ValueError(f"a docs search's scope must be a URL path that starts with '/' (like /en/3.11/), of at "
                         f"most {MAX_SCOPE_CHARS} characters; got {str(scope)[:80]!r}")
    return scope if scope.endswith("/") else scope + "/"


def compile_version_pattern(pattern: str | None) -> re.Pattern[str] | None:
    """An app's ``version_pattern`` compiled (``ValueError`` saying why when it is not a regular expression)."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"is not a regular expression: {exc}") from None


def is_language(segment: str) -> bool:
    """Whether a URL segment is a language code (``en``, ``pt-br``, ``zh_CN``)."""
    m = _LANGUAGE.fullmatch(segment)
    return m is not None and m.group(1).lower() in LANGUAGES


def is_version(segment: str, pattern: re.Pattern[str] | None = None) -> bool:
    """Whether a URL segment is a version: what the app's ``version_pattern`` matches in full, else the built-in
    forms (``3.12``, ``v2``, ``2.x``, ``latest`` …)."""
    if pattern is not None:
        return pattern.fullmatch(segment) is not None
    return segment.lower() in VERSION_NAMES or _VERSION.fullmatch(segment) is not None


def page_scope(url: str, *, base: str = "/", version_pattern: re.Pattern[str] | None = None) -> Scope | None:
    """The scope of a page at ``url`` (see the module's docstring), or None when its path has none."""
    path = url_path(url)
    base = base if base.endswith("/") else base + "/"
    if not path.startswith(base):
        return None
    parts = path[len(base):].split("/")[:-1]  # folders only: the last part is the page's own name
    language = version = None
    at = 0
    if at < len(parts) and is_language(parts[at]):
        language, at = parts[at], at + 1
    if at < len(parts) and is_version(parts[at], version_pattern):
        version, at = parts[at], at + 1
    if not at:
        return None
    return Scope(prefix=base + "/".join(parts[:at]) + "/", base=base, language=language, version=version)


def named_versions(text: str, version_pattern: re.Pattern[str] | None = None) -> list[str]:
    """The versions a question names, in order, once each (``in 3.11``, ``version 3.11``, ``v2``, ``the latest
    docs``); with a ``version_pattern``, its words that the pattern matches in full."""
    text = text[:MAX_QUERY_CHARS]
    found: dict[str, None] = {}
    if version_pattern is not None:
        for word in re.split(r"[\s,;:!?()\[\]{}\"'`]+", text):
            word = word.rstrip(".")
            if word and version_pattern.fullmatch(word):
                found.setdefault(word, None)
        return list(found)
    for m in _NAMED.finditer(text):
        after, v, dotted, named = m.group("after", "v", "dotted", "named")
        found.setdefault((after or v or dotted or named).lower(), None)
    return list(found)


def _as_page_writes(version: str, page: Scope | None) -> str:
    """A named version spelt as the site spells its versions (``v3.11`` on a site whose pages say ``v3.12``)."""
    if page is None or page.version is None:
        return version
    wants_v = page.version[:1] in "vV" and page.version[1:2].isdigit()
    has_v = version[:1] == "v" and version[1:2].isdigit()
    if wants_v and not has_v and version[:1].isdigit():
        return page.version[0] + version
    if has_v and not wants_v and page.version[:1].isdigit():
        return version[1:]
    return version


def scope_plan(page_url: str | None, texts: list[str], *, base: str = "/",
               version_pattern: re.Pattern[str] | None = None) -> list[str | None]:
    """The scopes a search tries in turn until one finds something, the last always ``None`` (the whole
    documentation): the version ``texts`` name (the search's query, then the reader's question) in the page's
    language, or the page's language alone when they name several; then the page's own scope."""
    page = page_scope(page_url, base=base, version_pattern=version_pattern) if page_url else None
    named: dict[str, None] = {}
    for text in texts:
        for v in named_versions(text, version_pattern):
            named.setdefault(_as_page_writes(v, page), None)
    plan: list[str | None] = []
    if page is not None and page.version is not None and page.version.lower() in named:
        named.pop(page.version.lower(), None)
        named.pop(page.version, None)
        if named:  # the page's version and another: both, so the language's whole documentation
            plan.append(page.base + page.language + "/" if page.language else None)
    elif len(named) == 1:
        (version,) = named
        lang = page.language + "/" if page is not None and page.language else ""
        plan.append((page.base if page is not None else base if base.endswith("/") else base + "/")
                    + lang + version + "/")
    elif len(named) > 1 and page is not None and page.language:
        plan.append(page.base + page.language + "/")
    # Also after a named version the index may not have ("the main docs say …"), unless a wider scope came first.
    if page is not None and not any(p is None or page.prefix.startswith(p) for p in plan):
        plan.append(page.prefix)
    plan.append(None)
    return [p for p in dict.fromkeys(plan) if p is None or len(p) <= MAX_SCOPE_CHARS]


def context_page_url(context: Any) -> str | None:
    """The page's URL in a conversation's page context: ``page.url`` (what the MkDocs plugin and the Sphinx
    extension set), ``url``, or ``page`` itself when it is a path or an http(s) URL; None otherwise."""
    if not isinstance(context, dict):
        return None
    page = context.get("page")
    for value in (page.get("url") if isinstance(page, dict) else None, context.get("url"), page):
        if isinstance(value, str) and (value.startswith("/") or value.startswith(("http://", "https://"))):
            return value[:MAX_SCOPE_CHARS * 2]
    return None
