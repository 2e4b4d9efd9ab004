"""Planning the corpus: sizes, domain vocabularies, topics, and which document discusses what on which page."""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

logger = logging.getLogger(__name__)

GENERATOR_VERSION = 1

#: The seven DocViRe domains.
DOMAINS: tuple[str, ...] = ("biology", "education", "finance", "government", "industrial", "legal", "research")

_A4 = (595.0, 842.0)
_LETTER = (612.0, 792.0)
_MARGIN = 56.0
_FIXED_DATE = "D:20240101000000Z"


@dataclass(frozen=True)
class SizeSpec:
    """How big a generated corpus is: documents and topics per domain, page-count mixture."""

    docs_per_domain: tuple[int, ...]
    topics_per_domain: int
    max_positives: int
    #: (weight, min pages, max pages) mixture for page counts.
    page_mixture: tuple[tuple[float, int, int], ...]
    #: documents forced to be long: (domain index, document index in domain).
    long_docs: tuple[tuple[int, int], ...] = ()


SIZES: dict[str, SizeSpec] = {
    "tiny": SizeSpec(
        docs_per_domain=(4, 3, 4, 3, 4, 3, 3),
        topics_per_domain=2,
        max_positives=3,
        page_mixture=((1.0, 4, 10),),
        long_docs=((4, 0), (5, 1)),
    ),
    "small": SizeSpec(
        docs_per_domain=(40,) * 7,
        topics_per_domain=16,
        max_positives=5,
        page_mixture=((0.55, 4, 8), (0.30, 9, 16), (0.15, 17, 30)),
    ),
}


# ------------------------------------------------------------------------------------ vocabulary


@dataclass(frozen=True)
class _Vocab:
    connector: str
    organisations: tuple[str, ...]
    kinds: tuple[str, ...]
    subjects: tuple[str, ...]
    aspects: tuple[str, ...]
    measures: tuple[str, ...]
    units: tuple[str, ...]
    headings: tuple[str, ...]
    filler: tuple[str, ...]
    colour: tuple[float, float, float]
    font: str = "helv"


def _load_vocabulary() -> dict[str, Any]:
    """The generator's word lists (package data, ``vocabulary.json``): domains, filler, evidence, query templates."""
    text = resources.files("docpc_retrievers.eval").joinpath("vocabulary.json").read_text(encoding="utf-8")
    return json.loads(text)


_DATA = _load_vocabulary()
_VOCAB: dict[str, _Vocab] = {
    name: _Vocab(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
    for name, fields in _DATA["domains"].items()
}
_GENERIC_FILLER: tuple[str, ...] = tuple(_DATA["generic_filler"])
_SMALL_PRINT: tuple[str, ...] = tuple(_DATA["small_print"])
_EVIDENCE: tuple[str, ...] = tuple(_DATA["evidence"])
_QUERY_TEMPLATES: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in _DATA["query_templates"].items()}


# ------------------------------------------------------------------------------------ planning


@dataclass(frozen=True)
class _Topic:
    topic_id: str
    domain: str
    aspect: str
    subject: str
    measure: str

    @property
    def phrase(self) -> str:
        return f"{self.aspect} {_VOCAB[self.domain].connector} {self.subject}"

    def fill(self, template: str, rng: random.Random) -> str:
        v1 = round(rng.uniform(10, 900), 1)
        v2 = round(v1 * rng.uniform(0.6, 1.6), 1)
        values = {
            "P": self.phrase,
            "P_cap": _cap(self.phrase),
            "A": self.aspect,
            "A_cap": _cap(self.aspect),
            "S": self.subject,
            "C": _VOCAB[self.domain].connector,
            "M": self.measure,
            "n": rng.randint(3, 60),
            "v1": v1,
            "v2": v2,
            "pct": abs(round((v2 - v1) / v1 * 100, 1)),
        }
        return template.format(**values)


@dataclass
class _PagePlan:
    kind: str  # title, contents, text, table, figure, smallprint
    heading: str | None = None
    evidence: list[_Topic] = field(default_factory=list)
    topic: _Topic | None = None  # table/figure about this topic


@dataclass
class _DocPlan:
    doc_id: str
    domain: str
    index: int
    n_pages: int
    topics: dict[str, int] = field(default_factory=dict)  # topic id -> grade
    deep: list[str] = field(default_factory=list)
    title: str = ""
    organisation: str = ""
    kind: str = ""
    year: int = 2020
    size: tuple[float, float] = _A4
    pages: list[_PagePlan] = field(default_factory=list)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _pick_pages(rng: random.Random, spec: SizeSpec) -> int:
    roll = rng.random() * sum(w for w, _, _ in spec.page_mixture)
    for weight, low, high in spec.page_mixture:
        if roll < weight:
            return rng.randint(low, high)
        roll -= weight
    _, low, high = spec.page_mixture[-1]
    return rng.randint(low, high)


def _plan_topics(rng: random.Random, domain: str, spec: SizeSpec, domain_index: int) -> list[_Topic]:
    vocab = _VOCAB[domain]
    pairs = [(a, s) for a in vocab.aspects for s in vocab.subjects]
    chosen = rng.sample(pairs, spec.topics_per_domain)
    return [
        _Topic(f"{domain}-t{i:02d}", domain, a, s, rng.choice(vocab.measures)) for i, (a, s) in enumerate(chosen)
    ]


def _plan_documents(seed: int, spec: SizeSpec) -> tuple[list[_DocPlan], list[_Topic]]:
    """Decide every document's topics, page count and page kinds (no drawing yet)."""
    docs: list[_DocPlan] = []
    topics: list[_Topic] = []
    for d_index, domain in enumerate(DOMAINS):
        rng = random.Random(f"docpc-synthetic:{seed}:{domain}")
        n_docs = spec.docs_per_domain[d_index]
        domain_topics = _plan_topics(rng, domain, spec, d_index)
        topics.extend(domain_topics)
        plans = [_DocPlan(f"{domain}-{i:03d}", domain, i, _pick_pages(rng, spec)) for i in range(n_docs)]
        for d_i, i in spec.long_docs:
            if d_i == d_index and i < n_docs:
                plans[i].n_pages = rng.randint(22, 30)
        members: dict[str, list[int]] = {}
        for topic in domain_topics:
            m = rng.randint(2, min(spec.max_positives, n_docs))
            members[topic.topic_id] = rng.sample(range(n_docs), m)
        for i in range(n_docs):
            if not any(i in ids for ids in members.values()):
                members[rng.choice(domain_topics).topic_id].append(i)
        by_id = {t.topic_id: t for t in domain_topics}
        for topic_id in sorted(members):
            for i in members[topic_id]:
                plans[i].topics[topic_id] = 1
        for plan in plans:
            main_topic = rng.choice(sorted(plan.topics))
            plan.topics[main_topic] = 2
            _plan_pages(rng, plan, [by_id[t] for t in sorted(plan.topics)], main_topic)
        docs.extend(plans)
    return docs, topics


def _plan_pages(rng: random.Random, plan: _DocPlan, topics: list[_Topic], main_topic: str) -> None:
    vocab = _VOCAB[plan.domain]
    plan.organisation = rng.choice(vocab.organisations)
    plan.kind = rng.choice(vocab.kinds)
    plan.year = rng.randint(2015, 2024)
    plan.size = _LETTER if rng.random() < 0.3 else _A4
    pages = [_PagePlan("title"), _PagePlan("contents")]
    for i in range(2, plan.n_pages):
        if i == 2:
            kind = "text"
        elif i == plan.n_pages - 1 and plan.n_pages >= 6 and rng.random() < 0.6:
            kind = "smallprint"
        else:
            kind = rng.choices(("text", "table", "figure", "smallprint"), (0.55, 0.17, 0.18, 0.10))[0]
        pages.append(_PagePlan(kind))
    # Section headings: a new section starts on every text page with probability 0.6 (always on page 3).
    headings = list(vocab.headings)
    rng.shuffle(headings)
    h = 0
    for i, page in enumerate(pages[2:], 2):
        if page.kind == "text" and (i == 2 or rng.random() < 0.6):
            page.heading = headings[h % len(headings)] + ("" if h < len(headings) else f" ({h // len(headings) + 1})")
            h += 1
    # Evidence: each topic gets one text or small-print page (deep ones beyond page 4) and maybe a table/figure.
    main = next(t for t in topics if t.topic_id == main_topic)
    deep_ids: set[str] = set()
    for topic in topics:
        eligible = [i for i, p in enumerate(pages) if p.kind in ("text", "smallprint") and len(p.evidence) < 2]
        deep_pages = [i for i in eligible if i >= 4]
        if deep_pages and plan.n_pages >= 6 and rng.random() < 0.5:
            target = rng.choice(deep_pages)
            deep_ids.add(topic.topic_id)
        else:
            target = rng.choice(eligible or [2])
        pages[target].evidence.append(topic)
        visuals = [i for i, p in enumerate(pages) if p.kind in ("table", "figure") and p.topic is None]
        if topic.topic_id in deep_ids:
            visuals = [i for i in visuals if i >= 4]
        if visuals and rng.random() < 0.7:
            pages[rng.choice(visuals)].topic = topic
        if topic.topic_id not in deep_ids and pages[target].heading is not None and rng.random() < 0.5:
            pages[target].heading = _cap(topic.phrase)
    plan.deep = sorted(deep_ids)
    if main.topic_id not in deep_ids and rng.random() < 0.5:
        plan.title = f"{plan.kind}: {_cap(main.phrase)}"
    else:
        plan.title = f"{plan.organisation} {plan.kind} {plan.year}"
    plan.pages = pages
