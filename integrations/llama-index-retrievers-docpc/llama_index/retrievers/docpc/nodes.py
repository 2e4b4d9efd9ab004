"""DocPC hits as LlamaIndex nodes: one ``ImageNode`` per document, or one per rendered page."""

from __future__ import annotations

from typing import Any

from docpc_retrievers.adapters import b64_png
from docpc_retrievers.results import Hit
from llama_index.core.schema import ImageNode, NodeRelationship, NodeWithScore, RelatedNodeInfo

from ._common import EXCLUDED_EMBED_METADATA_KEYS, EXCLUDED_LLM_METADATA_KEYS

__all__ = ["hit_to_nodes"]


def _node(node_id: str, text: str, image: bytes | None, mime: str | None, metadata: dict[str, Any], doc_id: str) -> ImageNode:
    return ImageNode(
        id_=node_id, text=text, image=b64_png(image) if image is not None else None,
        image_mimetype=mime if image is not None else None, metadata=metadata,
        excluded_llm_metadata_keys=list(EXCLUDED_LLM_METADATA_KEYS),
        excluded_embed_metadata_keys=list(EXCLUDED_EMBED_METADATA_KEYS),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
    )


def hit_to_nodes(hit: Hit) -> list[NodeWithScore]:
    """One node per hit, or one per rendered page when page images were asked for."""
    if not hit.pages:
        return [NodeWithScore(node=_node(hit.id, hit.text, hit.image, hit.image_mime_type, hit.metadata, hit.id), score=hit.score)]
    labels = list(hit.metadata.get("selected_labels") or [])
    out = []
    for position, (number, png, text) in enumerate(hit.pages):
        meta = {**hit.metadata, "page_number": number, **({"page_label": labels[position]} if position < len(labels) else {})}
        out.append(NodeWithScore(node=_node(f"{hit.id}#page={number}", text.strip(), png, hit.image_mime_type, meta, hit.id), score=hit.score))
    return out
