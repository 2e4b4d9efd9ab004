"""``docpc serve-shard``: one shard of a sharded store held warm, answering readers' searches with its exact top k.

A shard searcher needs no model: a reader encodes the query, sends it to every shard's searcher and merges their
answers by exact score (store/shards.py). The searcher follows the other writers' changes through its shard's feed
on every search, as any reader does, and fetches its shard's vectors in the background from the start, so its
first answers do not wait on Chroma. Routes: ``GET /health``, ``POST /search``, ``POST /vectors``
(store/shard_wire.py says what each carries) and ``GET /snapshot`` (its cache as a tar archive, which a new replica
of the shard starts from: ``docpc serve-shard --from URL``), behind the same gate as ``docpc serve`` (host, origin,
size, token).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from docpc_retrievers.store.multivector import MultiVectorStore
from docpc_retrievers.store.shard_wire import SEARCH_OPTIONS, array_from, array_to, hits_to

__all__ = ["ShardSearcher", "serve_shard"]


class ShardSearcher:
    """What a shard searcher answers, without the transport: its health, a search, the vectors of some hits."""

    def __init__(self, store: MultiVectorStore, shard: int, shards: int) -> None:
        self.store, self.shard, self.shards = store, shard, shards

    def health(self) -> dict[str, Any]:
        """Its shard, documents, whether it is still fetching its vectors, and its thread limit (None: all cores)."""
        from docpc_retrievers.store.shortlist_threads import search_thread_limit

        return {"status": "ok", "shard": self.shard, "shards": self.shards, "documents": self.store.count(),
                "prefetching": self.store.reader.prefetching, "threads": search_thread_limit()}

    def search(self, body: dict[str, Any]) -> dict[str, Any]:
        """Each query's exact top k in this shard (the body as :func:`shard_wire.search_request` writes it)."""
        queries = [array_from(q) for q in body["queries"]]
        options = {k: body[k] for k in SEARCH_OPTIONS if k in body}
        answers = self.store.search_batch(queries, int(body["top_k"]), **options)
        return {"shard": self.shard, "hits": [hits_to(hits) for hits in answers]}

    def snapshot(self) -> Path:
        """This searcher's cache as a tar archive in a temporary file (the caller deletes it): what a new replica of
        this shard starts from."""
        fd, name = tempfile.mkstemp(prefix=f"docpc-shard{self.shard}-", suffix=".tar")
        with os.fdopen(fd, "wb") as out:
            self.store.export_cache(out)
        return Path(name)

    def vectors(self, body: dict[str, Any]) -> dict[str, Any]:
        """The stored vectors (float32, as a local search reads them) and anchors of the documents asked for."""
        out: dict[str, Any] = {}
        for doc_id in body["ids"]:
            vectors, anchors = self.store.vectors_with_anchors(doc_id)
            out[doc_id] = {"vectors": array_to(vectors), "anchors": None if anchors is None else array_to(anchors)}
        return {"shard": self.shard, "documents": out}


def serve_shard(searcher: ShardSearcher, host: str, port: int, *, token: str | None, out: TextIO = sys.stdout) -> None:
    """Serve ``searcher`` on ``host:port`` until SIGINT or SIGTERM; the readiness line (with the bound port) goes to
    ``out`` once the socket listens."""
    import anyio.to_thread
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from docpc_retrievers.serve.server import is_loopback, listening_socket, run_until_stopped
    from docpc_retrievers.serve.web_safety import WebSafety, allowed_hosts

    async def health(request: Request) -> JSONResponse:
        try:
            return JSONResponse(await anyio.to_thread.run_sync(searcher.health))
        except Exception as exc:  # Chroma unreachable: the reader names this shard and the reason
            return JSONResponse({"status": "unhealthy", "shard": searcher.shard, "reason": str(exc)}, status_code=503)

    def answering(method: Any) -> Any:
        async def handler(request: Request) -> JSONResponse:
            try:
                body = json.loads(await request.body())
                return JSONResponse(await anyio.to_thread.run_sync(method, body))
            except (KeyError, TypeError, ValueError) as exc:
                return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=400)
            except Exception as exc:
                return JSONResponse({"error": f"shard {searcher.shard}: {type(exc).__name__}: {exc}"}, status_code=500)
        return handler

    async def snapshot(request: Request) -> Any:
        from starlette.background import BackgroundTask
        from starlette.responses import FileResponse

        path = await anyio.to_thread.run_sync(searcher.snapshot)
        return FileResponse(path, media_type="application/x-tar", background=BackgroundTask(path.unlink))

    routes = {"/health": ["GET"], "/search": ["POST"], "/vectors": ["POST"], "/snapshot": ["GET"]}
    app = Starlette(routes=[Route("/health", health, methods=["GET"]),
                            Route("/snapshot", snapshot, methods=["GET"]),
                            Route("/search", answering(searcher.search), methods=["POST"]),
                            Route("/vectors", answering(searcher.vectors), methods=["POST"])])
    sock, bound = listening_socket(host, port)
    gated = WebSafety(app, routes=routes, token=token, hosts=allowed_hosts(host, bound, is_loopback(host)))
    server = uvicorn.Server(uvicorn.Config(gated, log_level="warning", access_log=False, lifespan="off"))
    shown = f"[{host}]" if ":" in host else host
    print(f"docpc serve-shard: shard {searcher.shard} of {searcher.shards} ready at http://{shown}:{bound} "
          f"({searcher.store.count()} documents)", file=out, flush=True)
    run_until_stopped(server, sock)
