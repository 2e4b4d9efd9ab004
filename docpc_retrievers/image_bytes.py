"""Images as bytes, made one way: PNG encoding (optionally bounded in size), base64 text, and format conversion for
consumers that take one format only. Every hit picture, explanation and report goes through here."""

from __future__ import annotations

import base64
import io

from PIL import Image

__all__ = ["MIME_TYPES", "as_png", "b64_png", "convert_image", "png_bytes"]

MIME_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
"""The formats images can be converted to, with their mime types."""


def png_bytes(image: Image.Image, max_side: int | None = None) -> bytes:
    """``image`` as PNG; with ``max_side``, scaled down (aspect kept) so its longer side is at most that."""
    if max_side is not None and max(image.size) > max_side:
        image = image.copy()
        image.thumbnail((max_side, max_side))
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def as_png(data: bytes) -> bytes:
    """Image bytes of any format PIL reads, as RGB PNG."""
    with Image.open(io.BytesIO(data)) as img:
        return png_bytes(img.convert("RGB"))


def b64_png(data: bytes | Image.Image) -> str:
    """Base64 text of image bytes (as they are), or of a PIL image encoded as PNG."""
    return base64.b64encode(png_bytes(data) if isinstance(data, Image.Image) else data).decode("ascii")


def convert_image(data: bytes, image_format: str) -> tuple[bytes, str]:
    """Image bytes in another format (``png``, ``jpeg``: quality 90, no alpha; ``webp``: lossless):
    ``(bytes, mime type)``; bytes already in that format are returned as they are."""
    with Image.open(io.BytesIO(data)) as img:
        if (img.format or "").lower() == image_format:
            return data, MIME_TYPES[image_format]
        img.load()
        buf = io.BytesIO()
        if image_format == "jpeg":
            img.convert("RGB").save(buf, format="JPEG", quality=90)
        elif image_format == "webp":
            img.save(buf, format="WEBP", lossless=True)
        else:
            img.save(buf, format="PNG")
    return buf.getvalue(), MIME_TYPES[image_format]
