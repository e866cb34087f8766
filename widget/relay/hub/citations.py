"""Citable ids, an answer's sources, and the uncited-answer rule (docs/tools.md "Answers from the documentation").

In an app with docs, every documentation section a turn's searches found gets an id ``s1, s2, ...`` (the same
section found again keeps its id) and every function or tool reply ``t1, t2, ...`` (a repeat answered from an
earlier call keeps that call's id). The model cites them inline as ``[s1]``; at the end of a round the relay turns
the ids the text cites into the message's ``sources`` (``CitedSource``), in order of first citation, dropping ids
the turn never produced. The registry is rebuilt each round from the turn's stored messages (the ``search_docs``
replies carry their ids), so it survives a resumed or retried turn and another relay process.

Pure functions and one small class, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from ... import protocol as P
from ...protocol import Role, SourceKind, ToolMessageKind
from ...protocol.messages import CitedSource
from ..tools import is_greeting

#: A word for passage matching (letters and digits, with inner apostrophes).
_WORD = re.compile(r"\w+(?:['’]\w+)*")
#: The shortest run of words shared by an answer and a section that counts as a quoted passage.
MIN_PASSAGE_WORDS = 4
#: A passage longer than this is named in its text fragment by its first and last words (``start,end``).
FRAGMENT_EDGE_WORDS = 5
#: An answer at most this long that offers an action, or that answers a greeting, may cite nothing.
EXEMPT_MAX_CHARS = 300
def search_key(arguments: Any) -> str:
    """Two ``search_docs`` calls with the same query (ignoring case and spacing) have the same key."""
    q = arguments.get("query") if isinstance(arguments, dict) else None
    return " ".join(q.split()).casefold() if isinstance(q, str) else json.dumps(arguments, sort_keys=True, default=str)


@dataclass
class Cited:
    """One citable item of a turn."""

    id: str
    kind: SourceKind
    title: str
    #: docs only: the section's URL with its anchor
    url: str | None = None
    #: docs only: the section's text as the model saw it (for the text fragment)
    text: str = ""


@dataclass
class Citations:
    """The citable ids of one turn (see the module's docstring)."""

    by_id: dict[str, Cited] = field(default_factory=dict)
    #: section URL -> its id
    doc_ids: dict[str, str] = field(default_factory=dict)
    #: function call id -> the id of its reply
    call_ids: dict[str, str] = field(default_factory=dict)
    #: ``search_key`` -> (the call id, the stored reply) of the turn's first search with that query
    searches: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    next_s: int = 1
    next_t: int = 1

    @classmethod
    def of_turn(cls, messages: list[dict[str, Any]], title_of: Callable[[str], str]) -> Citations:
        """The registry of the turn whose stored messages (after the reader's last message) are ``messages``;
        ``title_of(name)``: a tool reply's source title."""
        cites = cls()
        args = {c.get("id"): c.get("arguments") for m in messages if m.get("role") == Role.ASSISTANT
                for c in m.get("function_calls") or [] if isinstance(c, dict)}
        for m in messages:
            if m.get("role") != Role.TOOL:
                continue
            name, kind, call_id = str(m.get("name") or ""), m.get("kind"), str(m.get("function_call_id") or "")
            if name == P.RelayTool.SEARCH_DOCS and kind == ToolMessageKind.RELAY:
                reply = m.get("result")
                if m.get("status") == P.CallStatus.SUCCESS and isinstance(reply, dict):
                    cites.add_reply(reply)
                    cites.searches.setdefault(search_key(args.get(call_id)), (call_id, reply))
            elif kind in (ToolMessageKind.FUNCTION, ToolMessageKind.TOOL):
                cites.tool(call_id, title_of(name), m.get("answered_from"))
        return cites

    def add_reply(self, reply: dict[str, Any]) -> None:
        """Register the sections of a stored ``search_docs`` reply under the ids it gave them."""
        for s in reply.get("sections") or []:
            if not isinstance(s, dict) or not isinstance(s.get("id"), str):
                continue
            sid, url = s["id"], str(s.get("url") or "")
            self.doc_ids.setdefault(url, sid)
            title = " ".join(str(s.get("title") or "").split()) or "Documentation"
            self.by_id.setdefault(sid, Cited(sid, SourceKind.DOCS, title, url or None, str(s.get("text") or "")))
            if sid[1:].isdigit():
                self.next_s = max(self.next_s, int(sid[1:]) + 1)

    def doc(self, url: str) -> str:
        """The id of the section at ``url``: the one it already has in this turn, else the next ``sN``."""
        sid = self.doc_ids.get(url)
        if sid is None:
            sid = f"s{self.next_s}"
            self.next_s += 1
            self.doc_ids[url] = sid
        return sid

    def tool(self, call_id: str, title: str, answered_from: Any = None) -> str:
        """The id of a function or tool reply: its original call's when it was answered from one, else the next
        ``tN``."""
        tid = self.call_ids.get(answered_from) if isinstance(answered_from, str) else None
        if tid is None:
            tid = f"t{self.next_t}"
            self.next_t += 1
            self.by_id[tid] = Cited(tid, SourceKind.TOOL, title)
        self.call_ids[call_id] = tid
        return tid

    def sources(self, text: str) -> list[CitedSource]:
        """The ``sources`` of an answer: each id it cites that this turn produced, in order of first citation,
        numbered from 1; a docs source's URL gets a text fragment where the answer quotes the section."""
        out: list[CitedSource] = []
        seen: set[str] = set()
        for m in P.CITATION_RE.finditer(text):
            cid = m.group(1)
            item = self.by_id.get(cid)
            if item is None or cid in seen:
                continue
            seen.add(cid)
            src: CitedSource = {"id": cid, "n": len(out) + 1, "kind": item.kind, "title": item.title}
            if item.url:
                src["url"] = with_fragment(item.url, text_fragment(P.CITATION_RE.sub(" ", text), item.text))
            out.append(src)
        return out


def _words(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(0).casefold(), m.start(), m.end()) for m in _WORD.finditer(text)]


def quoted_passage(answer: str, section: str) -> str | None:
    """The longest run of at least ``MIN_PASSAGE_WORDS`` words that the answer shares with the section, as the
    section writes it (its own punctuation and case), or None."""
    a, s = _words(answer), _words(section)
    n = MIN_PASSAGE_WORDS
    if len(a) < n or len(s) < n:
        return None
    starts: dict[tuple[str, ...], list[int]] = {}
    for j in range(len(s) - n + 1):
        starts.setdefault(tuple(w for w, _, _ in s[j:j + n]), []).append(j)
    best = (0, 0, 0)  # (length, start in s, end in s)
    for i in range(len(a) - n + 1):
        for j in starts.get(tuple(w for w, _, _ in a[i:i + n]), ()):
            k = n
            while i + k < len(a) and j + k < len(s) and a[i + k][0] == s[j + k][0]:
                k += 1
            if k > best[0]:
                best = (k, j, j + k)
    if not best[0]:
        return None
    _, j0, j1 = best
    return section[s[j0][1]:s[j1 - 1][2]]


def text_fragment(answer: str, section: str) -> str | None:
    """The text directive (``text=start`` or ``text=start,end``, percent-encoded) of the passage the answer quotes
    from the section, or None."""
    passage = quoted_passage(answer, section)
    if passage is None:
        return None
    words = passage.split()
    if len(words) > 2 * FRAGMENT_EDGE_WORDS:
        start, end = " ".join(words[:FRAGMENT_EDGE_WORDS]), " ".join(words[-FRAGMENT_EDGE_WORDS:])
        return f"text={_enc(start)},{_enc(end)}"
    return f"text={_enc(' '.join(words))}"


def _enc(text: str) -> str:
    # '-' and ',' separate a text directive's parts and '&' separates directives: all three are encoded.
    return quote(text, safe="").replace("-", "%2D")


def with_fragment(url: str, directive: str | None) -> str:
    """``url`` with a text fragment (``#anchor:~:text=...``; ``#:~:text=...`` when it has no anchor)."""
    if directive is None:
        return url
    return f"{url}:~:{directive}" if "#" in url else f"{url}#:~:{directive}"


def exempt_reason(question: str, answer: str, offered: bool, after_prompt: bool = False) -> str | None:
    """Why an uncited final answer is kept (``greeting``, ``offer``, ``reader_answer``), or None (withdrawn): a
    short answer to a greeting, thanks or goodbye, a short answer whose round shows an offered action, or a short
    answer to what the reader just answered to the model's own question (``ask_user``): none makes a claim that a
    source could back."""
    short = len(answer.strip()) <= EXEMPT_MAX_CHARS
    if short and offered:
        return "offer"
    if short and after_prompt:
        return "reader_answer"
    if short and is_greeting(question):
        return "greeting"
    return None
