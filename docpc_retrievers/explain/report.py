"""One self-contained HTML page of explained hits: images as data URIs, inline CSS, no script, no network.

What ``docpc show --out`` writes; it opens from disk in any browser and can be
mailed or attached to a bug report as it is.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime, timezone

from docpc_retrievers.explain.explanation import Explanation

__all__ = ["report_html"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 980px; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-bottom: .2rem; }
.hit { border-top: 1px solid #ccc; padding: 1rem 0; }
.meta, .note, .excluded { color: #555; font-size: .9rem; }
.shares { display: flex; gap: 1rem; list-style: none; padding: 0; font-size: .9rem; }
figure { display: inline-block; margin: .5rem 1rem .5rem 0; vertical-align: top; }
figcaption { font-size: .8rem; color: #555; }
img { border: 1px solid #ddd; height: auto; }
"""


def report_html(query: str, explanations: Sequence[Explanation], *, store: str = "", model: str = "") -> str:
    """The report for ``query``: a heading, then each explanation's section in rank order."""
    e = html.escape
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    header = (
        f"<h1>Why these documents matched &ldquo;{e(query)}&rdquo;</h1>"
        f'<p class="meta"><span id="hit-count">{len(explanations)}</span> hit(s) &middot; store <code>{e(store)}</code>'
        f" &middot; model <code>{e(model)}</code> &middot; {e(when)}</p>"
        '<p class="note">Red: the image patches that won the query\'s tokens (MaxSim), darker for larger terms; '
        "blue: each selected page's cell, with its share of the score. Crops show the hottest region of the top "
        "pages at full resolution.</p>"
    )
    body = "\n".join(x.to_html(rank=i) for i, x in enumerate(explanations, 1)) or "<p>No results.</p>"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>docpc show: {e(query)}</title><style>{_STYLE}</style></head>"
        f"<body>{header}\n{body}\n</body></html>\n"
    )
