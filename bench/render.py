"""Benchmark (not a test): streaming a 4,000-token Markdown answer through render_markdown, naive vs incremental.

A synthetic answer of ~16,000 characters (headings, paragraphs with links and inline code, tight and loose
lists, fenced code, a table) arrives at 200 tokens/s in ~20 chunks/s, i.e. ~10 tokens (~40 characters) per chunk.
No sleeps: the chunk sequence is replayed as fast as possible and only CPU time is measured (CPython,
``time.process_time`` per chunk, best of ``--repeat`` runs). Both paths must produce the same final HTML.

``--browser`` also runs it in Chromium: Pyodide booted from the relay with the build's bundle.zip, the answer held
in Python (as the bar holds it), one task per chunk doing Python rendering + ``sanitize.mjs`` + the DOM update
(naive: replace everything; incremental: append the newly stable blocks, replace the tail). It prints the
main-thread time per chunk task (``performance.now``, 0.1 ms resolution) and the Python share of it.

    python bench/render.py [--repeat 3] [--chars-per-token 4] [--tokens 4000] [--browser]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from results import save

from widget.core.markdown import StreamingRenderer, render_markdown

WORDS = ("the widget renders model output as markdown and keeps every link visible so readers can check where "
         "it goes before they follow it while the relay streams tokens to the page").split()


def add_stream_arguments(ap: argparse.ArgumentParser) -> None:
    """The answer's length and streaming rate, shared with bench/render_browser.py (goal 6's defaults)."""
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--chars-per-token", type=float, default=4.0)
    ap.add_argument("--tokens-per-second", type=float, default=200.0)
    ap.add_argument("--chunks-per-second", type=float, default=20.0)


def synthetic_answer(target_chars: int, seed: int = 7) -> str:
    """A Markdown answer of about ``target_chars`` characters in the shape LLM answers usually take."""
    rng = random.Random(seed)

    def sentence(n: int = 12) -> str:
        words = [rng.choice(WORDS) for _ in range(n)]
        k = rng.randrange(len(words))
        pick = rng.random()
        if pick < 0.25:
            words[k] = f"[{words[k]}](https://docs.example.com/{words[k]}/{rng.randrange(1000)})"
        elif pick < 0.45:
            words[k] = f"`{words[k]}()`"
        elif pick < 0.6:
            words[k] = f"**{words[k]}**"
        elif pick < 0.7:
            words[k] = f"https://example.org/{words[k]}?id={rng.randrange(100)}"
        return " ".join(words).capitalize() + "."

    blocks: list[str] = []
    size = 0
    section = 0
    while size < target_chars:
        section += 1
        kind = section % 6
        out = [f"## {section}. {sentence(4)[:-1]}", " ".join(sentence() for _ in range(3))]
        if kind in (1, 4):
            out.append("\n".join(f"- {sentence(8)}" for _ in range(rng.randint(3, 6))))
        if kind == 2:
            out.append("\n".join(f"{i}. {sentence(8)}" for i in range(1, rng.randint(3, 6))))
        if kind in (3, 5):
            body = "\n".join(f"    result_{i} = widget.call('{rng.choice(WORDS)}', {i})  # {sentence(5)}"
                             for i in range(rng.randint(4, 10)))
            out.append(f"```python\ndef example():\n{body}\n    return result_0\n```")
        if kind == 0:
            rows = "\n".join(f"| {rng.choice(WORDS)} | {rng.randrange(100)} | {sentence(4)} |" for _ in range(5))
            out.append(f"| name | value | note |\n|:-----|------:|------|\n{rows}")
        out.append(" ".join(sentence() for _ in range(2)))
        block = "\n\n".join(out)
        blocks.append(block)
        size += len(block) + 2
    return "\n\n".join(blocks)


def chunk_ends(text: str, chars_per_chunk: int) -> list[int]:
    """Offsets where each streamed chunk ends (chunks of about ``chars_per_chunk`` characters)."""
    ends = list(range(chars_per_chunk, len(text), chars_per_chunk))
    return ends + [len(text)]


def run(text: str, ends: list[int], render: Callable[[str], str]) -> tuple[float, float, str]:
    """Total and max per-chunk CPU seconds of ``render(text_so_far)`` over the chunks; the last HTML."""
    per: list[float] = []
    html = ""
    for end in ends:
        t0 = time.process_time()
        html = render(text[:end])
        per.append(time.process_time() - t0)
    return sum(per), max(per), html


BROWSER_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">
<title>render bench</title>
<script type="module">
import * as sanitizer from "/widget/__BUILD__/sanitize.mjs";
window.__sanitizer = sanitizer;
window.__ready = true;
</script></head><body><div id="answer"><div id="stable"></div><div id="tail"></div></div></body></html>
"""

BROWSER_BOOT = """async (root) => {
  const mod = await import(root + "pyodide/pyodide.mjs");
  const pyodide = await mod.loadPyodide({indexURL: root + "pyodide/", fullStdLib: false});
  const bundle = new Uint8Array(await (await fetch(root + "bundle.zip")).arrayBuffer());
  pyodide.FS.mkdirTree("/lib/autopilot");
  pyodide.FS.writeFile("/lib/autopilot/bundle.zip", bundle);
  pyodide.runPython("import sys\\nsys.path.insert(0, '/lib/autopilot/bundle.zip')");
  window.__pyodide = pyodide;
  window.__longtasks = [];
  new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__longtasks.push(e.duration); })
    .observe({type: "longtask", buffered: false});
}"""

BROWSER_PY = """
import time
from widget.core.markdown import StreamingRenderer, render_markdown
render_markdown("warm *up*")
_bench = {"text": BENCH_TEXT, "py": 0.0, "r": None}

def bench_reset():
    _bench["r"] = StreamingRenderer()
    _bench["py"] = 0.0

def bench_step(end, incremental):
    t0 = time.perf_counter()
    text = _bench["text"][:end]
    if incremental:
        r = _bench["r"]
        r.feed(text)
        out = r.appended + "\\x00" + r.tail
    else:
        out = render_markdown(text)
    _bench["py"] += time.perf_counter() - t0
    return out

def bench_py_ms():
    return _bench["py"] * 1000
"""

BROWSER_RUN = """async ([ends, incremental]) => {
  const py = window.__pyodide, S = window.__sanitizer;
  const step = py.globals.get("bench_step"), reset = py.globals.get("bench_reset");
  const pyMs = py.globals.get("bench_py_ms");
  const stable = document.getElementById("stable"), tail = document.getElementById("tail");
  stable.replaceChildren(); tail.replaceChildren();
  reset();
  window.__longtasks.length = 0;
  const per = [];
  for (const end of ends) {
    await new Promise((resolve) => setTimeout(resolve, 0));  // one task per chunk, as a socket message would be
    const t0 = performance.now();
    const out = step(end, incremental);
    if (incremental) {
      const cut = out.indexOf("\\x00");
      const appended = out.slice(0, cut);
      if (appended) S.appendSafeHTML(stable, appended);
      S.setSafeHTML(tail, out.slice(cut + 1));
    } else {
      S.setSafeHTML(tail, out);
    }
    per.push(performance.now() - t0);
  }
  await new Promise((resolve) => setTimeout(resolve, 50));
  const result = {per, pyMs: pyMs(), longtasks: window.__longtasks.slice(),
                  html: (stable.innerHTML + tail.innerHTML).replace(/>\\s+</g, "><")};
  step.destroy(); reset.destroy(); pyMs.destroy();
  return result;
}"""


def browser_bench(text: str, ends: list[int], repeat: int, figures: dict[str, object]) -> int:
    """Run both paths in Chromium (Pyodide + sanitize.mjs + DOM); print main-thread time per chunk task (and put it
    in ``figures["browser"]``)."""
    import json
    import tempfile

    from playwright.sync_api import sync_playwright

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "tests"))
    sys.path.insert(0, str(root))
    from support import CHROMIUM, CHROMIUM_ARGS, DIST, start_relay

    from build import build

    build(quiet=True)
    bid = json.loads((DIST / "manifest.json").read_text())["build_id"]
    relay = start_relay(Path(tempfile.mkdtemp(prefix="bench-render-")))
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            url = relay.url + "/__bench__/render.html"
            page.route(url, lambda route: route.fulfill(status=200, content_type="text/html; charset=utf-8",
                                                        body=BROWSER_PAGE.replace("__BUILD__", bid)))
            page.goto(url)
            page.wait_for_function("window.__ready === true", timeout=15_000)
            page.evaluate(BROWSER_BOOT, f"{relay.url}/widget/{bid}/")
            page.evaluate("""([code, text]) => { const py = window.__pyodide;
                py.globals.set("BENCH_TEXT", text); py.runPython(code); }""", [BROWSER_PY, text])
            version = page.evaluate("() => window.__pyodide.runPython('import sys; sys.version.split()[0]')")
            results: dict[str, dict] = {}
            for name, incremental in (("naive + sanitize + DOM", False), ("incremental + sanitize + DOM", True)):
                runs = [page.evaluate(BROWSER_RUN, [ends, incremental]) for _ in range(repeat)]
                results[name] = min(runs, key=lambda r: sum(r["per"]))
            browser.close()
    finally:
        relay.stop()
    naive, inc = results["naive + sanitize + DOM"], results["incremental + sanitize + DOM"]
    same = naive["html"] == inc["html"]
    print(f"\nChromium + Pyodide (Python {version}); same chunks; one task per chunk; best of {repeat}")
    print(f"{'':34} {'main thread':>11} {'longest task':>12} {'mean task':>10} {'Python':>9} {'long tasks':>10}")
    for name, r in results.items():
        per = r["per"]
        print(f"{name:34} {sum(per):9.1f}ms {max(per):10.1f}ms {sum(per) / len(per):8.2f}ms "
              f"{r['pyMs']:7.1f}ms {len(r['longtasks']):10d}")
    print(f"speed-up {sum(naive['per']) / sum(inc['per']):.1f}x main-thread time; "
          f"final DOM {'identical' if same else 'DIFFERENT'}")
    figures["browser"] = {"python": version, "same_dom": same, "paths": {
        name: {"main_thread_ms": sum(r["per"]), "longest_task_ms": max(r["per"]),
               "mean_task_ms": sum(r["per"]) / len(r["per"]), "python_ms": r["pyMs"], "long_tasks": len(r["longtasks"])}
        for name, r in results.items()}}
    return 0 if same else 1


def main() -> int:
    """Print the comparison table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_stream_arguments(ap)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--browser", action="store_true", help="also run in Chromium with Pyodide (needs the build)")
    args = ap.parse_args()

    text = synthetic_answer(int(args.tokens * args.chars_per_token))
    tokens_per_chunk = args.tokens_per_second / args.chunks_per_second
    chars_per_chunk = max(1, round(tokens_per_chunk * args.chars_per_token))
    ends = chunk_ends(text, chars_per_chunk)
    render_markdown("warm *up*")  # build the cached Markdown instance outside the measurement

    def incremental() -> Callable[[str], str]:
        r = StreamingRenderer()

        def feed(t: str) -> str:
            r.feed(t)
            return r.html

        return feed

    results = {}
    for name, make in (("naive render_markdown per chunk", lambda: render_markdown),
                       ("StreamingRenderer", incremental)):
        runs = [run(text, ends, make()) for _ in range(args.repeat)]
        best = min(runs, key=lambda x: x[0])
        results[name] = best
    naive, inc = results["naive render_markdown per chunk"], results["StreamingRenderer"]
    if naive[2] != inc[2] or inc[2] != render_markdown(text):
        print("MISMATCH: the incremental HTML differs from render_markdown(text)", file=sys.stderr)
        return 1

    r = StreamingRenderer()
    tails = []
    for end in ends:
        r.feed(text[:end])
        tails.append(end - len(r._stable_text))
    print(f"CPython {sys.version.split()[0]}; answer {len(text):,} chars (~{args.tokens:,} tokens), "
          f"{len(ends)} chunks of ~{chars_per_chunk} chars ({tokens_per_chunk:g} tokens) "
          f"= {args.tokens_per_second:g} tokens/s at {args.chunks_per_second:g} chunks/s; best of {args.repeat}")
    print(f"{'':34} {'total CPU':>10} {'max chunk':>10} {'mean chunk':>11}")
    for name, (total, worst, _html) in results.items():
        print(f"{name:34} {total * 1000:8.1f}ms {worst * 1000:8.2f}ms {total / len(ends) * 1000:9.3f}ms")
    print(f"speed-up {naive[0] / inc[0]:.1f}x total; re-rendered tail per chunk: median "
          f"{statistics.median(tails):.0f} chars, max {max(tails)} chars; final HTML identical")
    figures: dict[str, object] = {
        "chars": len(text), "chunks": len(ends), "chars_per_chunk": chars_per_chunk, "repeat": args.repeat,
        "tokens_per_second": args.tokens_per_second, "chunks_per_second": args.chunks_per_second,
        "cpython": {name: {"total_ms": total * 1000, "max_chunk_ms": worst * 1000,
                           "mean_chunk_ms": total / len(ends) * 1000}
                    for name, (total, worst, _html) in results.items()},
        "tail_chars": {"median": statistics.median(tails), "max": max(tails)}}
    rc = browser_bench(text, ends, args.repeat, figures) if args.browser else 0
    save("render", figures)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
