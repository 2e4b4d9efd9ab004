"""Pictures of an explanation, drawn with Pillow alone: a heat overlay, page outlines with labels, crops.

The heat of a patch is the sum of the (positive) MaxSim terms of the
included query tokens it won, scaled to the hottest patch; it is painted as
translucent red over the image, so the page underneath stays readable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from PIL import Image, ImageDraw, ImageFont

from docpc_retrievers.documents.composition import GridLayout
from docpc_retrievers.explain.contributions import Box, TokenContribution

__all__ = ["heat_overlay", "hot_region", "outline_pages"]

_HEAT = (230, 20, 20)
_OUTLINE = (20, 90, 220)


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: a fixed bitmap font
        return ImageFont.load_default()


def patch_heat(contributions: Iterable[TokenContribution]) -> dict[Box, float]:
    """Summed positive terms of included tokens per winning patch box."""
    heat: dict[Box, float] = {}
    for c in contributions:
        if c.included and c.box is not None and c.value > 0:
            heat[c.box] = heat.get(c.box, 0.0) + c.value
    return heat


def heat_overlay(image: Image.Image, contributions: Sequence[TokenContribution], *, max_alpha: int = 170) -> Image.Image:
    """``image`` (RGB) with each winning patch painted red, opacity proportional to its heat."""
    base = image.convert("RGBA")
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    heat = patch_heat(contributions)
    top = max(heat.values(), default=0.0)
    for box, value in sorted(heat.items(), key=lambda kv: kv[1]):
        alpha = int(round(max_alpha * (0.25 + 0.75 * value / top))) if top > 0 else 0
        draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=(*_HEAT, alpha), outline=(*_HEAT, 255))
    return Image.alpha_composite(base, layer).convert("RGB")


def outline_pages(image: Image.Image, layout: GridLayout, shares: Mapping[int, float], labels: Mapping[int, str]) -> Image.Image:
    """Each selected page's cell outlined and labelled ``p<number> (<PDF label>) <share>`` (1-based page numbers)."""
    out = image.copy()
    draw = ImageDraw.Draw(out)
    font = _font(max(14, layout.height // 40))
    for cell in layout.cells:
        if cell.page_index is None or cell.page_box is None:
            continue
        page = cell.page_index + 1
        x0, y0, x1, y1 = cell.page_box
        draw.rectangle((x0, y0, x1 - 1, y1 - 1), outline=_OUTLINE, width=max(2, layout.width // 300))
        label = labels.get(page)
        name = f"p{page}" if label in (None, str(page)) else f"p{page} ({label})"
        text = f"{name}  {shares.get(page, 0.0):.0%}"
        tb = draw.textbbox((x0 + 6, y0 + 6), text, font=font)
        draw.rectangle((tb[0] - 4, tb[1] - 3, tb[2] + 4, tb[3] + 3), fill=_OUTLINE)
        draw.text((x0 + 6, y0 + 6), text, fill=(255, 255, 255), font=font)
    return out


def hot_region(contributions: Sequence[TokenContribution], page: int, frame: Box, *, keep: float = 0.5) -> tuple[float, float, float, float]:
    """The part of a page its hottest patches cover, as fractions ``(x0, y0, x1, y1)`` of ``frame`` (the page's pixels).

    Patches holding at least ``keep`` of the page's hottest patch's heat are
    boxed together, one patch taller above and below, and as wide as the page:
    a crop cut at the box's sides would cut the lines of text mid-word. No heat
    gives the whole page.
    """
    heat = {b: v for b, v in patch_heat(c for c in contributions if c.page == page).items()}
    if not heat:
        return (0.0, 0.0, 1.0, 1.0)
    top = max(heat.values())
    boxes = [b for b, v in heat.items() if v >= keep * top]
    ph = max(b[3] - b[1] for b in boxes)
    y0, y1 = min(b[1] for b in boxes) - ph, max(b[3] for b in boxes) + ph
    _, fy0, _, fy1 = frame
    h = max(fy1 - fy0, 1)
    return (0.0, min(1.0, max(0.0, (y0 - fy0) / h)), 1.0, min(1.0, max(0.0, (y1 - fy0) / h)))


def crop_fraction(image: Image.Image, region: tuple[float, float, float, float]) -> Image.Image:
    """Cut ``region`` (fractions of the width and height) out of ``image``; at least 1x1 pixel."""
    w, h = image.size
    x0, y0 = int(region[0] * w), int(region[1] * h)
    x1, y1 = max(x0 + 1, int(round(region[2] * w))), max(y0 + 1, int(round(region[3] * h)))
    return image.crop((x0, y0, min(x1, w), min(y1, h)))


#: The shortest side a crop is shown at: a region of a tiny page is rendered larger, else scaled up.
MIN_CROP_SIDE = 256


def enlarge(image: Image.Image, min_side: int = MIN_CROP_SIDE) -> Image.Image:
    """``image`` scaled up (Lanczos) so its shorter side is at least ``min_side``; larger images unchanged."""
    short = min(image.size)
    if short >= min_side:
        return image
    factor = min_side / max(short, 1)
    return image.resize((max(1, round(image.width * factor)), max(1, round(image.height * factor))), Image.LANCZOS)
