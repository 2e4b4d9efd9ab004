"""Running ``docpc serve``: the address and token rules, the readiness line, and a clean stop on SIGINT/SIGTERM.

Over HTTP one uvicorn server answers both the MCP endpoint (``/mcp``, streamable HTTP) and the JSON API; over stdio
the process speaks MCP on its standard streams (for desktop clients that start it themselves).
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any, TextIO

from docpc_retrievers.serve.service import StoreService

__all__ = ["is_loopback", "listening_socket", "parse_bind", "run_until_stopped", "serve_http", "serve_stdio"]

DEFAULT_PORT = 8765


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST`` or ``:PORT`` (IPv6 in brackets) -> (host, port); ValueError naming the form."""
    host, port = text, DEFAULT_PORT
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[1:end], text[end + 1 :]
        if rest:
            port = int(rest.removeprefix(":"))
    elif text.count(":") == 1:
        host, _, tail = text.partition(":")
        port = int(tail)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range")
    return host or "127.0.0.1", port


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listening_socket(host: str, port: int) -> tuple[socket.socket, int]:
    """A socket bound to ``host:port`` and listening (port 0: a free one), and the port it got."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock, sock.getsockname()[1]


def run_until_stopped(server: Any, sock: socket.socket) -> None:
    """Run a uvicorn ``server`` on ``sock`` until SIGINT or SIGTERM, then close the socket.

    uvicorn stops on SIGINT and SIGTERM, finishing requests in flight, then raises the signal again for the handler
    it found: ours turns SIGTERM into KeyboardInterrupt too, so both end here."""
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()


def serve_http(service: StoreService, host: str, port: int, *, token: str | None, out: TextIO = sys.stdout,
               allow_hosts: Sequence[str] = (), allow_origins: Sequence[str] = ()) -> None:
    """Serve MCP (``/mcp``) and the JSON API on ``host:port`` until SIGINT or SIGTERM; the readiness line goes to
    ``out`` once the model is loaded and the socket listens (port 0: a free port, named in that line). Every request
    passes :class:`~docpc_retrievers.serve.web_safety.WebSafety` first (``allow_hosts``: more names for this server
    in the Host header; ``allow_origins``: web pages allowed to call it)."""
    import uvicorn

    from docpc_retrievers.serve.http_api import json_routes
    from docpc_retrievers.serve.mcp_tools import build_mcp
    from docpc_retrievers.serve.web_safety import WebSafety, allowed_hosts

    model = service.ready()
    sock, bound = listening_socket(host, port)
    mcp = build_mcp(service, host=host, port=bound)
    routes: dict[str, list[str]] = {"/mcp": ["GET", "POST", "DELETE"]}
    for path, methods, handler in json_routes(service, model):
        mcp.custom_route(path, methods)(handler)
        routes[path] = methods
    asgi = WebSafety(mcp.streamable_http_app(), routes=routes, token=token, origins=allow_origins,
                     hosts=allowed_hosts(host, bound, is_loopback(host), allow_hosts))
    server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning", access_log=False, lifespan="on"))
    shown = f"[{host}]" if ":" in host else host
    print(f"docpc serve: ready at http://{shown}:{bound} (model {model}; MCP at /mcp; JSON at /search, /explain, "
          f"/documents, /info, /health{'; token required' if token else ''})", file=out, flush=True)
    run_until_stopped(server, sock)  # the caller then closes the store
    print("docpc serve: stopped", file=sys.stderr, flush=True)


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def serve_stdio(service: StoreService) -> None:
    """Speak MCP on stdin/stdout until the client closes them (or SIGTERM); the readiness line goes to stderr,
    since stdout carries the protocol."""
    import anyio

    from docpc_retrievers.serve.mcp_tools import build_mcp

    model = service.ready()
    mcp = build_mcp(service)
    signal.signal(signal.SIGTERM, _stop)
    print(f"docpc serve: ready on stdio (model {model})", file=sys.stderr, flush=True)
    try:
        anyio.run(mcp.run_stdio_async)
    except KeyboardInterrupt:
        pass
    print("docpc serve: stopped", file=sys.stderr, flush=True)
