"""What LlamaIndex nodes and documents of DocPC share: the image MIME type and the metadata keys LLMs skip."""

from __future__ import annotations

from docpc_retrievers.retrievers import IMAGE_MIME_TYPE

__all__ = ["EXCLUDED_EMBED_METADATA_KEYS", "EXCLUDED_LLM_METADATA_KEYS", "IMAGE_MIMETYPE"]


#: LlamaIndex's own spelling (ImageNode.image_mimetype).
IMAGE_MIMETYPE = IMAGE_MIME_TYPE

#: Keys an LLM gains nothing from (pixel layout JSON, file stats, model path, scores).
EXCLUDED_LLM_METADATA_KEYS: tuple[str, ...] = (
    "layout",
    "model",
    "indexed_at",
    "file_bytes",
    "file_mtime",
    "score",
    "rank",
    "k",
    "mode",
    "strategy",
    "selected_pages",
    "evidence_pages",
    "grid_score",
    "reranked",
    "page_images_base64",
    "page_numbers",
    "image_page",
)
#: The same for text embedding, plus the source path (a local path is noise to an embedder).
EXCLUDED_EMBED_METADATA_KEYS: tuple[str, ...] = (*EXCLUDED_LLM_METADATA_KEYS, "source")
