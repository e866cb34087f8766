"""A reader's question as search terms: never parsed as search syntax.

Both engines get the same terms: the question is cut to ``MAX_QUERY_CHARS``, split into words (letters and
digits in any script; everything else, quotes, ``*``, ``-``, ``:``, parentheses included, separates words),
lower-cased, de-duplicated, and common English words are dropped unless nothing else is left. Each engine then
ORs the terms in its own quoted form, so no character of a question can raise a syntax error or change what is
searched for (``NEAR`` or ``OR`` in a question is just a word).
"""

from __future__ import annotations

import re

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
