"""A deterministic, DocViRe-style synthetic benchmark corpus of multi-page PDFs (BEIR layout).

Why: the evaluation harness needs a labelled corpus that anyone can rebuild
offline, byte for byte, to check that the harness and labels are right (BM25
must score clearly above a random ranking) and to run benchmarks at scale.

What it draws (PyMuPDF, vector only, base-14 fonts): seven domains (biology,
education, finance, government, industrial, legal, research); documents of 4
to 30 pages with a title page, a contents page, running headers and page
labels (i, ii, 1, 2, ...), sections with headings and paragraphs, ruled
tables, figures drawn with vector graphics (bar and line charts, flow
diagrams) and small-print pages. Each domain has *topics* (an aspect of a
subject, e.g. "thermal fatigue in gas turbine blades"); every topic is
discussed in two or more documents, so each query has several positives
(grade 2 where the topic is the document's main one, else 1). Query text
reuses the topic's words as they appear in the text layer, so lexical
retrieval is clearly better than chance. About half of the topic placements
in documents longer than five pages put all their evidence beyond page 4
(generic title and headings, evidence deep in the body), so first-K page
selection can miss it; some documents are long (up to 30 pages).

Sizes: ``tiny`` (24 documents, 2 topics per domain, seconds) and ``small``
(280 documents, 16 topics per domain, mean about 10 pages like DocViRe).
Output (see ``docs/evaluation.md``)::

    OUT/corpus.jsonl  OUT/queries.jsonl  OUT/qrels/test.tsv  OUT/qrels/train.tsv
    OUT/pdfs/<domain>/<doc-id>.pdf  OUT/manifest.json

``train`` queries are paraphrases of the same topics as ``test`` (handy for
exercising training code; not a leak-free split). The same size and seed
give the same bytes.

Command line: ``python -m docpc_retrievers.eval.synthetic OUT --size tiny [--seed 0]``.

Its parts: :mod:`.planning` (sizes, vocabularies, topics, page plans), :mod:`.drawing`
(text measuring, canvas, text boxes), :mod:`.pages` (page templates, one document's
PDF) and :mod:`.writing` (the corpus files and the command line).
"""

from docpc_retrievers.eval.synthetic.planning import (
    DOMAINS,
    GENERATOR_VERSION,
    SIZES,
    SizeSpec,
)
from docpc_retrievers.eval.synthetic.writing import (
    SyntheticSummary,
    generate_corpus,
    main,
)

__all__ = ["DOMAINS", "GENERATOR_VERSION", "SIZES", "SizeSpec", "SyntheticSummary", "generate_corpus", "main"]
