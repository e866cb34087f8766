"""The demo model: offline and deterministic, with a small documented grammar (docs/demo-model.md).

It reads the last message of the request (and, in a one-shot turn of an app with docs, the sections the relay
found). After a round of tool results it summarises them, quoting the best documentation section with its
citation; on a reader's message it fails on request, asks the reader, calls the page functions the message names
(with the arguments the message gives, or says which are missing), offers the page's actions, searches the docs,
or answers in Markdown.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ... import protocol as P
from ..tools import DOCS_SECTIONS_HEAD, is_greeting, offer_names, parse_docs_reply
from .base import ASK_USER_TOOL, Chunk, ModelAdapter, ModelError, ModelRequest, TextDelta, ToolCall, Usage

#: The question "ask me" asks (a radiolist, answered in the bar).
DEMO_QUESTION: dict[str, Any] = {
    "type": P.AskUserType.RADIOLIST.value,
    "question": "Which colour do you prefer?",
    "arguments": {"options": [
        {"value": "blue", "label": "Blue"},
        {"value": "green", "label": "Green"},
        {"value": "red", "label": "Red"},
    ]},
}

#: What "suggest follow-ups" suggests (the relay's ``suggest_followups``): questions the demo model answers.
DEMO_SUGGESTIONS: tuple[str, ...] = (
    "What can you do on this page?",
    "Which functions can you call?",
    "Ask me",
)
_SUGGEST = re.compile(r"suggest\s+follow[- ]?ups?", re.IGNORECASE)
#: What the demo says when a documentation search found nothing (it cites nothing: the relay replaces it).
DEMO_NOT_FOUND = "I found nothing about that in the documentation."
#: Its answer to a greeting in an app with docs (short: a greeting's answer needs no citation).
DEMO_GREETING = "Hello! Ask me anything about this site's documentation, and I will answer with its sources."
#: Its answer to thanks in an app with docs.
DEMO_THANKS = "You are welcome! Ask me anything else about this site's documentation."
_THANKS = re.compile(r"\s*(?:thank|thx|ty\b|cheers|merci|danke|gracias|grazie)", re.IGNORECASE)
#: The longest quote from a section (whole sentences; a first sentence longer than this is cut at a word).
QUOTE_CHARS = 300
#: A tool reply's citable id, as the relay puts it before the reply (``[t1] {...}``).
_REPLY_ID = re.compile(r"^\[(t[1-9][0-9]*)\] ")

#: Openings of the Markdown answer, one per attempt (retry/regenerate), so a new answer looks new.
_OPENINGS = (
    "I am the **demo model**: offline and deterministic.",
    "Here is another take from the **demo model** (answer {n}).",
)


def _chunks(text: str, words: int = 2) -> list[str]:
    parts = re.findall(r"\s*\S+", text)
    out = ["".join(parts[i : i + words]) for i in range(0, len(parts), words)]
    tail = text[len("".join(parts)) :]
    if tail and out:
        out[-1] += tail
    return out or ([text] if text else [])


def _json_after(text: str, pos: int) -> dict[str, Any] | None:
    """A JSON object starting right after ``pos`` (skipping spaces, ``:``, ``with``), if there is one."""
    m = re.compile(r"\s*(?::|with)?\s*").match(text, pos)
    start = m.end() if m else pos
    if start < len(text) and text[start] == "{":
        try:
            value, _ = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            return None
        if isinstance(value, dict):
            return value
    return None


def _quote(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
    if len(text) > limit:
        text = text[:limit] + "…"
    return text


def _types(schema: Any) -> list[str]:
    """The JSON types a property schema allows (``anyOf`` branches included)."""
    if not isinstance(schema, dict):
        return []
    t = schema.get("type")
    out = [t] if isinstance(t, str) else [x for x in t if isinstance(x, str)] if isinstance(t, list) else []
    for branch in schema.get("anyOf") or schema.get("oneOf") or []:
        out += _types(branch)
    return out


def _coerce(raw: str, schema: Any) -> tuple[bool, Any]:
    """A ``key=value`` value read as the property's type: ``(ok, value)``."""
    kinds = [k for k in _types(schema) if k != "null"] or ["string"]
    for kind in kinds:
        if kind == "string":
            return True, raw
        if kind == "integer" and re.fullmatch(r"[+-]?\d+", raw):
            return True, int(raw)
        if kind == "number" and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", raw):
            return True, float(raw) if any(c in raw for c in ".eE") else int(raw)
        if kind == "boolean" and raw.lower() in ("true", "false", "yes", "no"):
            return True, raw.lower() in ("true", "yes")
        if kind in ("array", "object"):
            try:
                value = json.loads(raw)
            except ValueError:
                continue
            if isinstance(value, list if kind == "array" else dict):
                return True, value
    return False, None


_PAIR = r"(?<![\w-]){name}\s*[=:]\s*(\"[^\"]*\"|'[^']*'|\[[^\]]*\]|\{{[^}}]*\}}|[^\s,;]+)"


@dataclass
class Filled:
    """Arguments read from the message for one function or action, and what is still missing."""

    arguments: dict[str, Any]
    missing: list[str]
    wrong: list[str]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.wrong


def fill(parameters: Any, text: str, explicit: dict[str, Any] | None) -> Filled:
    """Arguments for a schema: the JSON object written after the name, else ``key=value`` pairs of the
    message for the schema's properties; a required property the schema does not let be null and the
    message does not give is missing."""
    schema = parameters if isinstance(parameters, dict) else {}
    raw_props = schema.get("properties")
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
    args: dict[str, Any] = dict(explicit) if explicit is not None else {}
    wrong: list[str] = []
    if explicit is None:
        for name, prop in props.items():
            m = re.search(_PAIR.format(name=re.escape(name)), text)
            if not m:
                continue
            raw = m.group(1)
            if raw[:1] in "\"'" and raw[-1:] == raw[:1] and len(raw) >= 2:
                raw = raw[1:-1]
            ok, value = _coerce(raw, prop)
            if ok:
                args[name] = value
            else:
                wrong.append(f"`{name}` ({'/'.join(_types(prop)) or 'value'})")
    missing = []
    for name in schema.get("required") or []:
        if name in args:
            continue
        prop = props.get(name)
        if "null" in _types(prop):
            continue  # a strict schema's optional property: absent means null
        kinds = "/".join(k for k in _types(prop) if k != "null")
        missing.append(f"`{name}`" + (f" ({kinds})" if kinds else ""))
    return Filled(args, missing, wrong)


def _needs(name: str, filled: Filled) -> str:
    parts = []
    if filled.missing:
        parts.append("the missing " + ", ".join(filled.missing))
    if filled.wrong:
        parts.append("a valid " + ", ".join(filled.wrong))
    return (f"To call `{name}` I need {' and '.join(parts)}: write `{name} {{...}}` with JSON arguments, or "
            "`name=value`.")


class DemoModel(ModelAdapter):
    """Deterministic and offline; its grammar is docs/demo-model.md."""

    name = "demo"

    def __init__(self, chunk_delay_ms: float = 15.0) -> None:
        self.delay = max(0.0, chunk_delay_ms) / 1000.0

    async def _text(self, text: str) -> AsyncIterator[Chunk]:
        for i, piece in enumerate(_chunks(text)):
            if i and self.delay:
                await asyncio.sleep(self.delay)
            yield TextDelta(piece)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        """The answer (see the module doc), then its :class:`Usage`: estimated, a token per four characters of
        the request (messages and tools) and of the answer, as the demo has no tokenizer."""
        out = 0
        async for chunk in self._respond(request):
            if isinstance(chunk, TextDelta):
                out += len(chunk.text)
            elif isinstance(chunk, ToolCall):
                out += len(json.dumps(chunk.arguments, ensure_ascii=False)) + len(chunk.name)
            yield chunk
        seen = len(json.dumps(request.messages, ensure_ascii=False))
        seen += len(json.dumps(request.tools, ensure_ascii=False))
        yield Usage(input_tokens=-(-seen // 4), output_tokens=-(-out // 4))

    async def _respond(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        msgs = request.messages
        tools = {t["name"]: t for t in request.tools}
        last = msgs[-1] if msgs else {"role": "user", "content": ""}
        if last["role"] == "tool":
            async for c in self._text(self._results(msgs)):
                yield c
            return
        text = str(last.get("content") or "")
        lower = text.lower()
        if "simulate model error" in lower and (request.attempt == 0 or "simulate model error always" in lower):
            raise ModelError(P.TurnErrorCode.MODEL_ERROR,
                             "The demo model was asked to fail (\"simulate model error\").", retryable=True)
        if "ask me" in lower and ASK_USER_TOOL in tools:
            async for c in self._text("Let me ask you first."):
                yield c
            yield ToolCall(ASK_USER_TOOL, DEMO_QUESTION)
            return
        names = [n for n in tools if n not in set(P.RelayTool)]
        calls, call_notes = self._calls(text, names, tools)
        actions = offer_names(tools[P.RelayTool.OFFER_ACTIONS]) if P.RelayTool.OFFER_ACTIONS in tools else []
        offers, offered, offer_notes = self._offers(text, actions, tools.get(P.RelayTool.OFFER_ACTIONS))
        notes = call_notes + offer_notes
        if calls or offers:
            lines = []
            if calls:
                lines.append(f"Calling {', '.join(f'`{c.name}`' for c in calls)} on the page.")
            if offered:
                lines.append(f"You can do that from here: I offered {', '.join(f'`{n}`' for n in offered)} below.")
            async for c in self._text(" ".join(lines + notes)):
                yield c
            for c in calls:
                yield c
            if offers:
                yield ToolCall(P.RelayTool.OFFER_ACTIONS, {"actions": offers})
            return
        if notes:
            async for c in self._text(" ".join(notes)):
                yield c
            return
        suggest = P.RelayTool.SUGGEST_FOLLOWUPS in tools
        if not (suggest and _SUGGEST.search(text)):
            if is_greeting(text) and (P.RelayTool.SEARCH_DOCS in tools or _one_shot_sections(msgs) is not None):
                async for c in self._text(DEMO_THANKS if _THANKS.match(text) else DEMO_GREETING):
                    yield c
                return
            if P.RelayTool.SEARCH_DOCS in tools:  # a question for the docs: search them with the reader's words
                yield ToolCall(P.RelayTool.SEARCH_DOCS, {"query": text})
                return
            found = _one_shot_sections(msgs)
            if found is not None:  # a one-shot turn: the relay searched already
                async for c in self._text(_from_docs(found, text)):
                    yield c
                return
        async for c in self._text(self._answer(text, names, ASK_USER_TOOL in tools, actions, request.attempt, suggest)):
            yield c
        if suggest and _SUGGEST.search(text):
            yield ToolCall(P.RelayTool.SUGGEST_FOLLOWUPS, {"suggestions": list(DEMO_SUGGESTIONS)})

    @staticmethod
    def _calls(text: str, names: list[str], tools: dict[str, Any]) -> tuple[list[ToolCall], list[str]]:
        """The calls a message asks for, in order, and a note for each it cannot make."""
        if not names:
            return [], []
        calls, notes = [], []
        pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n)
                                                       for n in sorted(names, key=len, reverse=True)) + r")(?![\w-])")
        for m in pattern.finditer(text):
            name = m.group(1)
            filled = fill(tools[name].get("parameters"), text, _json_after(text, m.end()))
            if filled.ok:
                calls.append(ToolCall(name, filled.arguments))
            else:
                notes.append(_needs(name, filled))
        return calls, notes

    @staticmethod
    def _offers(text: str, actions: list[str], spec: Any) -> tuple[list[dict[str, Any]], list[str], list[str]]:
        """``(offers sent, names announced, notes)``. Every "offer X" goes to the relay (which checks and
        may drop it); the text announces only the offers that carry what their action requires."""
        if not actions:
            return [], [], []
        schemas = _action_schemas(spec)
        offers, announced, notes = [], [], []
        pattern = re.compile(r"(?<![\w-])(?i:offer)\s+(" + "|".join(re.escape(n)
                                                                    for n in sorted(actions, key=len, reverse=True))
                                                                    + r")(?![\w-])")
        for m in pattern.finditer(text):
            name = m.group(1)
            explicit = _json_after(text, m.end())
            filled = fill(schemas.get(name), text, explicit)
            offers.append({"name": name, "arguments": filled.arguments})
            if not filled.ok:
                notes.append(_needs(name, filled).replace("To call", "To offer"))
                continue
            problem = _invalid(schemas.get(name), filled.arguments)
            if problem:
                notes.append(f"I could not offer `{name}`: {problem}.")
            elif name not in announced:
                announced.append(name)
        return offers, announced, notes

    @staticmethod
    def _answer(text: str, names: list[str], ask: bool, actions: list[str], attempt: int, suggest: bool = False) -> str:
        quoted = " ".join(text.split())[:200] or "(nothing)"
        heading = "### Demo answer" if attempt == 0 else f"### Demo answer {attempt + 1}"
        lines = [heading, "", f"You wrote: *{quoted}*", "", "- " + _OPENINGS[min(attempt, 1)].format(n=attempt + 1)]
        if names:
            lines.append("- Name one of the page's functions and I will call it: " + ", ".join(f"`{n}`" for n in names)
                         + ".")  # every one: MCP tools come after the page's
        else:
            lines.append("- The page has registered no functions yet.")
        if actions:
            lines.append('- Say "offer <action>" and I will offer one of the page\'s actions: '
                         + ", ".join(f"`{n}`" for n in actions) + ".")
        if ask:
            lines.append('- Say "ask me" and I will ask you a question.')
        if suggest:
            lines.append('- Say "suggest follow-ups" and I will suggest questions to ask next.')
        return "\n".join(lines)

    @staticmethod
    def _results(msgs: list[dict[str, Any]]) -> str:
        results = []
        for m in reversed(msgs):
            if m["role"] != "tool":
                break
            results.append(m)
        results.reverse()
        names = {}
        for m in msgs:
            for tc in m.get("tool_calls") or []:
                names[tc["id"]] = tc["function"]["name"]
        docs = [r for r in results if names.get(r.get("tool_call_id")) == P.RelayTool.SEARCH_DOCS]
        rest = [r for r in results if r not in docs]
        question = next((str(m.get("content") or "") for m in reversed(msgs) if m["role"] == "user"), "")
        parts = [_from_docs(parse_docs_reply(str(docs[0].get("content") or "")), question), ""] if docs else []
        if rest or not parts:
            parts += ["### Result", ""]
        for r in rest:
            name = names.get(r.get("tool_call_id"), "function")
            content = r.get("content") or ""
            m = _REPLY_ID.match(content)
            cite = f" [{m.group(1)}]" if m else ""
            content = content[m.end():] if m else content
            try:
                shown = _quote(json.loads(content))
            except ValueError:
                shown = _quote(content)
            if name == ASK_USER_TOOL:
                parts += [f"You answered: **{shown}**.", ""]
            else:
                parts += [f"`{name}` returned{cite}:", "", "```json", shown, "```", ""]
        return "\n".join(parts).rstrip()


def _one_shot_sections(msgs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The sections the relay put in a one-shot request (a system message), or None."""
    for m in msgs:
        content = m.get("content")
        if m.get("role") == "system" and isinstance(content, str) and content.startswith(DOCS_SECTIONS_HEAD):
            return parse_docs_reply(content)
    return None


def _first_sentences(text: str) -> str:
    """The section's first sentence(s), at most ``QUOTE_CHARS`` characters (whole sentences; a longer first
    sentence is cut at a word, with "…")."""
    words = " ".join(text.split())
    sentences = re.split(r"(?<=[.!?])\s+", words)
    out = ""
    for sentence in sentences:
        if out and len(out) + 1 + len(sentence) > QUOTE_CHARS:
            break
        out = f"{out} {sentence}".strip()
    if len(out) > QUOTE_CHARS:
        out = out[:QUOTE_CHARS].rsplit(" ", 1)[0] + "…"
    return out


#: Words of a question that say nothing about its subject (the demo's relevance check ignores them).
_FILLER = frozenset(
    "a an and are can could do does for from how i in is it me my of on or please the their there this to what "
    "when where which who why will with would you your".split()
)
#: How much of a question's subject a section must cover for the demo to quote it.
MIN_COVERAGE = 2 / 3


def _stem(word: str) -> str:
    """A crude stem: one common ending off, then the first five letters ("closing", "closes", "close" -> "clos")."""
    for ending in ("ing", "ed", "es", "s", "e"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            word = word[: -len(ending)]
            break
    return word[:5]


def _terms(text: str) -> set[str]:
    """A text's subject words, lowercased and stemmed (``colours`` and ``colour`` are one word to the demo)."""
    return {_stem(w) for w in re.findall(r"[^\W\d_]+", text.lower()) if w not in _FILLER and len(w) > 1}


def coverage(question: str, section: dict[str, Any]) -> float:
    """The share of the question's subject words that a section's title and text contain (1.0 for no such words)."""
    asked = _terms(question)
    if not asked:
        return 1.0
    return len(asked & _terms(f"{section.get('title') or ''} {section.get('text') or ''}")) / len(asked)


def is_about(question: str, section: dict[str, Any]) -> bool:
    """Whether the demo takes a section to answer the question: it covers ``MIN_COVERAGE`` of the question's subject
    words, or half of them with one in its title ("change the colours?" and a section titled Colours)."""
    share = coverage(question, section)
    titled = bool(_terms(question) & _terms(str(section.get("title") or "")))
    return share >= MIN_COVERAGE or (share >= 0.5 and titled)


def _from_docs(reply: dict[str, Any] | None, question: str) -> str:
    """The answer from a search's sections: the first section that covers the question's subject (``MIN_COVERAGE``),
    its first sentence(s) quoted with its citation; ``DEMO_NOT_FOUND`` when no section does (a real model reads
    the sections; the demo only checks that they are about the words asked)."""
    sections = [s for s in (reply or {}).get("sections") or [] if isinstance(s, dict) and s.get("text")]
    relevant = [s for s in sections if is_about(question, s)]
    if not relevant:
        return DEMO_NOT_FOUND
    best = relevant[0]
    where = " ".join(str(best.get("title") or "").split()) or "the documentation"
    quote = _first_sentences(str(best["text"]).strip("…"))
    return f"From the documentation ({where}):\n\n> {quote} [{best['id']}]"


def _invalid(schema: Any, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit an action's (strict) arguments schema, or None. Absent optional
    properties count as null, as the relay reads them."""
    if not isinstance(schema, dict):
        return None
    import jsonschema  # the relay's dependency; the demo model never ships to the browser

    raw_props = schema.get("properties")
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
    candidate = {**{k: None for k, v in props.items() if "null" in _types(v)}, **arguments}
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(candidate))
    if error is None:
        return None
    where = ".".join(str(x) for x in error.absolute_path)
    return f"{where + ' ' if where else ''}{error.message}"


def _action_schemas(spec: Any) -> dict[str, Any]:
    """Each offerable action's arguments schema, from the ``offer_actions`` tool spec."""
    out: dict[str, Any] = {}
    try:
        items = spec["parameters"]["properties"]["actions"]["items"]
        for option in items.get("anyOf", [items]):
            out[option["properties"]["name"]["enum"][0]] = option["properties"].get("arguments")
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return out
