"""``docpc serve``: keep a store and its model loaded and answer over MCP (stdio or HTTP) and an HTTP JSON API."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from docpc_retrievers.cli.common import (
    EXIT_OK, UsageError, add_store_options, encoder_options, positive_int, require_store, store_kwargs,
)
from docpc_retrievers.serve.client import TOKEN_ENV

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``serve``."""
    p = sub.add_parser(
        "serve", help="answer searches over MCP and HTTP with the store and model loaded once",
        description="Serve a store to agents and programs: MCP tools (search, explain, list, info) over stdio or "
        "streamable HTTP (/mcp), and a JSON API (/search, /explain, /documents, /info, /health) on the same port. "
        "Indexing stays a separate command. Binds to loopback unless told otherwise; any other address needs a "
        f"token (--token or ${TOKEN_ENV}), checked on every request.",
    )
    add_store_options(p, store_required=True)
    p.add_argument("--transport", choices=("http", "stdio"), default="http",
                   help="http (default): MCP at /mcp plus the JSON API; stdio: MCP on standard input and output")
    p.add_argument("--bind", default="127.0.0.1:8765", metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1:8765; port 0 picks a free one). --host and --port "
                   "stay the Chroma server's, as in every docpc command")
    p.add_argument("--token", help=f"bearer token every request must carry (default: ${TOKEN_ENV})")
    p.add_argument("--image-side", type=int, default=1024,
                   help="longest side of returned page images (pixels, 32 to 8192; default 1024)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="another name this server answers to in the Host header (repeatable); on loopback only the "
                   "bound address (and localhost for 127.0.0.1 and ::1) is accepted, so a web page cannot reach it "
                   "through DNS rebinding")
    p.add_argument("--full-paths", action="store_true",
                   help="name sources, the store and the model by their full paths on this machine (default: sources "
                   "relative to the folder they share, no store or model folders)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="a web page origin (scheme://host[:port]) allowed to call the server (repeatable); requests "
                   "carrying any other Origin are refused")
    _searcher_options(p)
    p.set_defaults(func=run)
    m = sub.add_parser(
        "mcp", help="answer MCP on standard input and output (what desktop clients and the MCP Inspector start)",
        description="Serve a store over MCP on standard input and output, as `docpc serve --transport stdio` does, "
        "with no option whose name clashes with the launchers' own (the MCP Inspector takes --transport itself): "
        "`npx @modelcontextprotocol/inspector docpc mcp --store PATH`.",
    )
    add_store_options(m, store_required=True)
    m.add_argument("--image-side", type=int, default=1024,
                   help="longest side of returned page images (pixels, 32 to 8192; default 1024)")
    m.add_argument("--full-paths", action="store_true", help="name sources, the store and the model by their full paths")
    _searcher_options(m)
    m.set_defaults(func=run, transport="stdio", bind="127.0.0.1:0", token=None, allow_host=[], allow_origin=[])
    s = sub.add_parser(
        "serve-shard", help="hold one shard of a sharded store warm and answer readers' searches (no model)",
        description="One shard searcher of a store made with --shards: it holds its shard's summaries and vectors "
        "warm, follows the other writers' changes through the shard's feed, and answers a reader's encoded query "
        "with the shard's exact top k (JSON at /search, /vectors, /health). Readers given every shard's searcher "
        "(DocPCIndex(path, searchers=[...]) or docpc search --searcher URL ...) merge the answers and hold nothing.",
    )
    add_store_options(s, model=False, store_required=True)
    s.add_argument("--shard", type=int, required=True, help="which shard to hold (0 to the store's count - 1)")
    s.add_argument("--bind", default="127.0.0.1:0", metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1 and a free port, named in the readiness line)")
    s.add_argument("--token", help=f"bearer token every request must carry (default: ${TOKEN_ENV})")
    s.add_argument("--from", dest="source", metavar="URL",
                   help="start as a new replica from the snapshot another searcher of the same shard publishes at "
                   "URL (its cache, then the change feed replayed from there): no document's vectors are pulled "
                   "one by one; --store must be new")
    s.add_argument("--threads", type=positive_int, metavar="N",
                   help="threads it searches with (default: every core it may run on). Several searchers on one "
                   "machine: give each its share of the cores (or pin each with taskset), or their threads spin "
                   "against each other")
    s.set_defaults(func=run_shard)


def _searcher_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--searcher", action="append", metavar="URL",
                   help="a sharded store's shard searcher (`docpc serve-shard`), one per shard in shard order "
                   "(repeat): searches are answered by them and merged here, and this server holds no shard's vectors")
    p.add_argument("--searcher-token", metavar="TOKEN",
                   help=f"the searchers' bearer token (default: this server's own, --token or ${TOKEN_ENV})")


#: What `docpc serve` and `docpc mcp` import, with the extra that installs them.
SERVE_MODULES = ("mcp", "uvicorn", "starlette", "httpx")


def missing_serve_modules() -> list[str]:
    """The modules of the ``[serve]`` extra that this environment lacks."""
    from importlib.util import find_spec

    return [name for name in SERVE_MODULES if find_spec(name) is None]


def _address(args: argparse.Namespace, modules: Sequence[str], *, over_http: bool) -> tuple[str, int, str | None]:
    """Where to listen and the token, checked before anything loads: the serve extra's ``modules`` present, the
    ``--bind`` address read, and a token for any address other machines reach (``over_http``)."""
    missing = [name for name in missing_serve_modules() if name in modules]
    if missing:  # before the model loads: a missing extra is said at once, not as a stack trace a minute later
        raise UsageError(f"serving needs the [serve] extra ({', '.join(missing)} not installed): "
                         "pip install 'docpc-retrievers[serve]'")
    from docpc_retrievers.serve.server import is_loopback, parse_bind

    try:
        host, port = parse_bind(args.bind)
    except ValueError as exc:
        raise UsageError(f"--bind {args.bind}: {exc} (give HOST:PORT)") from None
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if over_http and not is_loopback(host) and not token:
        raise UsageError(f"--bind {host} is reachable from other machines: give --token (or ${TOKEN_ENV})")
    return host, port, token


def run(args: argparse.Namespace) -> int:
    """Load the store and model, then serve until stopped (SIGINT or SIGTERM)."""
    host, port, token = _address(args, SERVE_MODULES, over_http=args.transport == "http")
    from docpc_retrievers.serve.server import serve_http, serve_stdio
    from docpc_retrievers.index import DocPCIndex
    from docpc_retrievers.serve.service import StoreService

    if not 32 <= args.image_side <= 8192:
        raise UsageError(f"--image-side {args.image_side}: give a number of pixels from 32 to 8192")
    require_store(args)
    kwargs = store_kwargs(args)
    if args.searcher:
        kwargs.update(searchers=args.searcher, searcher_token=args.searcher_token or token)
    index = DocPCIndex(args.store, model=args.model, encoder_kwargs=encoder_options(args), **kwargs)
    index.store.prefetch()  # a long-lived reader: every document's vectors come into the cache in the background

    def reopen(encoder: Any) -> DocPCIndex:  # the folder was rebuilt: the same store, the model already loaded
        again = DocPCIndex(args.store, encoder=encoder, **kwargs)
        again.store.prefetch()
        return again

    service = StoreService(index, image_side=args.image_side, full_paths=args.full_paths,
                           reopen=None if kwargs.get("host") else reopen)
    try:
        if args.transport == "stdio":
            serve_stdio(service)
        else:
            serve_http(service, host, port, token=token, allow_hosts=args.allow_host, allow_origins=args.allow_origin)
    finally:
        service.close()
    return EXIT_OK


def run_shard(args: argparse.Namespace) -> int:
    """Open one shard of a sharded store, fetch its vectors in the background, and serve it until stopped."""
    host, port, token = _address(args, ("uvicorn", "starlette"), over_http=True)
    from docpc_retrievers.serve.shard_searcher import ShardSearcher, serve_shard
    from docpc_retrievers.store.shards import open_shard

    if args.threads:
        from docpc_retrievers.store.shortlist_threads import limit_search_threads

        limit_search_threads(args.threads)
    if args.source:
        start_from_snapshot(args.source, args.store, args.shard, token)
    store, shards = open_shard(args.store, args.shard, **store_kwargs(args))
    store.prefetch()
    try:
        serve_shard(ShardSearcher(store, args.shard, shards), host, port, token=token)
    finally:
        store.close()
    return EXIT_OK


def start_from_snapshot(url: str, store: Any, shard: int, token: str | None) -> None:
    """Fetch the snapshot another searcher of ``shard`` publishes at ``url`` into this replica's new cache folder."""
    import tempfile

    import httpx

    from docpc_retrievers.store.cache_transfer import read_cache_archive
    from docpc_retrievers.store.layout import StoreLayout

    target = StoreLayout.at(StoreLayout.at(store).shards / str(shard)).cache
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with tempfile.TemporaryFile() as spool:
        try:
            with httpx.stream("GET", url.rstrip("/") + "/snapshot", headers=headers, timeout=600.0) as response:
                if response.status_code != 200:
                    raise UsageError(f"--from {url}: the searcher answered {response.status_code}")
                for chunk in response.iter_bytes(1 << 20):
                    spool.write(chunk)
        except httpx.HTTPError as exc:
            raise UsageError(f"--from {url}: no snapshot: {exc}") from None
        spool.seek(0)
        read_cache_archive(target, spool)
