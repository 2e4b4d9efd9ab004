"""What every ``docpc`` command shares: exit codes, argument types, the store options, JSON output.

Exit codes: 0 success; 3 some files failed and the rest were done; 2 usage
errors; 1 fatal errors (bad store, model that cannot load, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "EXIT_FATAL",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_USAGE",
    "UsageError",
    "add_store_options",
    "emit",
    "encoder_options",
    "explain_no_match",
    "grid_shape_arg",
    "non_negative_float",
    "non_negative_int",
    "pair_arg",
    "json_object",
    "parse_where",
    "search_options",
    "positive_float",
    "positive_int",
    "require_store",
]

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3


class UsageError(Exception):
    """Bad arguments found after parsing; reported like argparse's own errors (exit 2)."""


def add_option_flags(p: argparse.ArgumentParser, names: Sequence[str], **helps: str) -> None:
    """The flags of these options (docpc_retrievers/options.py), each stored under its core name and None when not
    given (the core's default then applies); ``helps`` replaces an option's help text for this command."""
    from typing import get_args

    from docpc_retrievers.retrievers.schema import BY_NAME

    for name in names:
        option = BY_NAME[name]
        kwargs: dict[str, Any] = {"dest": name, "help": helps.get(name, option.cli_help), "default": None}
        if option.cli_kind == "count":  # the schema's lower bound: top_k takes 0 (nothing), the others 1
            kwargs["type"] = non_negative_int if (option.bounds or {}).get("ge", 1) == 0 else positive_int
        elif option.cli_kind == "flag":
            kwargs.update(action="store_true", default=False)
        elif option.cli_kind == "paths":
            kwargs.update(action="append", metavar="PATH")
        elif option.cli_kind == "json":
            kwargs["metavar"] = "JSON"
        elif option.cli_kind == "choice":
            kwargs["choices"] = get_args(option.annotation)
        p.add_argument(*option.cli, **kwargs)


def option_values(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The options given on the command line, by core name (a ``--where`` parsed as JSON; its check is the search
    options'); those not given are left out, so the core's defaults apply."""
    values = {name: getattr(args, name) for name in names  # an unset flag is False; 0 is a value (top_k)
              if getattr(args, name) is not None and getattr(args, name) is not False}
    if "filters" in values:
        values["filters"] = json_object(values["filters"])
    return values


def search_options(args: argparse.Namespace, values: dict[str, Any]) -> Any:
    """The command's one checked :class:`~docpc_retrievers.retrievers.options.SearchOptions`, built before any
    model loads; a bad value is a usage error naming its flag."""
    from docpc_retrievers.errors import InvalidFilterError
    from docpc_retrievers.retrievers.options import SearchOptions
    from docpc_retrievers.retrievers.schema import BY_NAME

    try:
        return SearchOptions.build(password=getattr(args, "password", None), **values)
    except (TypeError, ValueError) as exc:
        named = "filters" if isinstance(exc, InvalidFilterError) else next((n for n in values if n in str(exc)), "")
        flag = BY_NAME[named].cli[-1] if named and BY_NAME[named].cli else "search options"
        raise UsageError(f"{flag}: {exc}") from None


def query_text(text: str) -> str:
    """A query argument, checked as every query is (:func:`docpc_retrievers.queries.check_query`)."""
    from docpc_retrievers.queries import check_query

    try:
        return check_query(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    """An argument that must be an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argument that must be an integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argument that must be a finite number > 0."""
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argument that must be a finite number >= 0."""
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def pair_arg(text: str, what: str = "ROWSxCOLS such as 2x2") -> tuple[int, int]:
    """``AxB`` as two integers >= 1 (grid shapes, cell sizes)."""
    try:
        a, b = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if a < 1 or b < 1:
        raise argparse.ArgumentTypeError(f"both numbers of {what} must be >= 1")
    return a, b


def grid_shape_arg(text: str) -> tuple[int, int]:
    """A grid shape ``ROWSxCOLS``."""
    return pair_arg(text, "ROWSxCOLS such as 2x2")


def add_store_options(p: argparse.ArgumentParser, *, model: bool = True, store_required: bool = True) -> None:
    """``--store`` and the Chroma server options (plus the model options when the command encodes)."""
    p.add_argument("--store", required=store_required, type=Path, help="store directory")
    p.add_argument("--host", help="Chroma server host (the index lives on the server; --store is only a local cache)")
    p.add_argument("--port", type=int, default=8000, help="Chroma server port (default 8000)")
    p.add_argument("--collection", default="docpc", help="Chroma collection name (default docpc)")
    if model:
        p.add_argument("--model", help="checkpoint id or local path (default: the store's model)")
        p.add_argument("--device", help="cuda, mps or cpu (default: best available)")
        p.add_argument("--batch-size", type=positive_int, default=None,
                       help="images per encoder batch (default 4 on a CPU, 8 on a GPU)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")


def store_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for ``DocPCIndex`` from the store options."""
    return {"host": args.host, "port": args.port, "collection": args.collection}


def encoder_options(args: argparse.Namespace) -> dict[str, Any]:
    """Encoder options given on the command line (only those that were set)."""
    names = {"device": "device", "batch_size": "batch_size", "max_visual_tokens": "max_num_visual_tokens"}
    return {key: getattr(args, arg) for arg, key in names.items() if getattr(args, arg, None)}


def emit(data: Any) -> None:
    """Print JSON to stdout."""
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def json_object(text: str | None, option: str = "--where") -> dict[str, Any] | None:
    """A ``--where`` JSON object, parsed (not yet checked as a filter), or a usage error naming what is wrong."""
    if not text:
        return None
    try:
        where = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option} is not valid JSON: {exc}") from None
    if not isinstance(where, dict):
        raise UsageError(f"{option} must be a JSON object")
    return where


def parse_where(text: str | None, option: str = "--where") -> dict[str, Any] | None:
    """A ``--where`` JSON object checked as a Chroma metadata filter (list, delete), or a usage error naming what
    is wrong."""
    where = json_object(text, option)
    if where is None:
        return None
    from docpc_retrievers.errors import InvalidFilterError
    from docpc_retrievers.filters import check_where

    try:
        return check_where(where)
    except InvalidFilterError as exc:
        raise UsageError(f"{option}: {exc}") from None


def require_store(args: argparse.Namespace) -> None:
    """Fail before opening anything when ``--store`` is not a docpc store (commands other than index never create one)."""
    from docpc_retrievers.errors import StoreError
    from docpc_retrievers.store.layout import StoreLayout

    if getattr(args, "host", None):
        return  # the server says whether the collection exists
    if not StoreLayout.at(args.store).exists():
        raise StoreError(f"no docpc store at {args.store}; index some documents into it first (docpc index)")


@contextmanager
def counting_bar(desc: str, enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A ``(done, total)`` progress callback drawing a documents bar on stderr (only when enabled and a terminal)."""
    bar: Any = None
    if enabled and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(desc=desc, unit="doc", file=sys.stderr)

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            bar.refresh()

    try:
        yield progress
    finally:
        if bar is not None:
            bar.close()


def warm_store(store: Any, show_progress: bool) -> dict[str, Any]:
    """``MultiVectorStore.warm`` with a bar for the vectors fetched."""
    with counting_bar("fetching vectors", show_progress) as fetched:
        return dict(store.warm(fetched))


def explain_no_match(store: Any, where: dict[str, Any] | None, under: Sequence[Any] | None = None) -> None:
    """After a search or listing found nothing: why, on stderr (``--under`` paths no document lies under and where
    the documents are; ``--where`` keys no document has and the values the others take)."""
    from docpc_retrievers.catalog import no_match_reason, under_reason

    reason = under_reason(store, under) if under else None
    if reason is not None:
        print(f"docpc: {reason}", file=sys.stderr)
    elif where is not None:
        print(f"docpc: {no_match_reason(store, where)}", file=sys.stderr)
