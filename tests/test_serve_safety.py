"""``docpc serve`` as a security reviewer probes it: web pages, other loopback addresses, bounds, and the two APIs
checking alike. Each test drives the real server in a subprocess (no token, loopback, as a desktop user runs it)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_helpers import docpc_command, make_pdf, run_docpc, subprocess_env

pytest.importorskip("mcp")
pytestmark = [pytest.mark.usefixtures("fresh_chroma"), pytest.mark.slow]


@dataclass(frozen=True)
class Served:
    url: str
    root: Path
    store: Path


def _start(argv: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"ready at (http://\S+)", line)
    if not found:
        proc.kill()
        raise AssertionError(f"no readiness line: {line!r}\n{proc.stderr.read() if proc.stderr else ''}")
    return proc, found.group(1)


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("safe")
    for i, label in enumerate(["harbour budget report", "wind turbine maintenance", "lentil recipes", "tax forms"]):
        make_pdf(root / "docs" / ("a" if i % 2 else "b") / f"doc{i}.pdf", label, 1 + i % 2)
    done = run_docpc("index", root / "docs", "--store", root / "store", "--model", tiny_checkpoint)
    assert done.returncode == 0, done.describe()
    return root, root / "store"


@pytest.fixture(scope="module")
def served(store: tuple[Path, Path]) -> Iterator[Served]:
    root, path = store
    proc, url = _start(docpc_command() + ["serve", "--store", str(path), "--bind", "127.0.0.1:0"])
    try:
        yield Served(url, root, path)
    finally:
        _stop(proc)


def _mcp(url: str, name: str, arguments: dict[str, Any], **headers: str) -> httpx.Response:
    """One MCP tool call over streamable HTTP (the server is stateless: no session to open first)."""
    return httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                          "params": {"name": name, "arguments": arguments}},
                      headers={"Accept": "application/json, text/event-stream", **headers}, timeout=60)


def _tool_error(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result.get("isError"), result
    return " ".join(c.get("text", "") for c in result["content"])


def test_a_web_page_cannot_read_the_catalogue_through_a_foreign_host_or_origin(served: Served) -> None:
    """Finding 1: a foreign Host (DNS rebinding) or Origin is refused on every route; so is a cross-site 'simple'
    POST (text/plain), which browsers send without asking."""
    evil = {"Host": "evil.example", "Origin": "http://evil.example"}
    for method, path, body in [("GET", "/documents", None), ("GET", "/info", None), ("GET", "/health", None),
                               ("POST", "/search", {"query": "tax"}), ("POST", "/explain", {"query": "t", "id": "x"})]:
        r = httpx.request(method, served.url + path, json=body, headers=evil)
        assert r.status_code == 421 and "host" in r.json()["error"], (path, r.status_code, r.text)
    origin_only = httpx.get(f"{served.url}/documents", headers={"Origin": "http://evil.example"})
    assert origin_only.status_code == 403 and "evil.example" in origin_only.json()["error"]
    simple = httpx.post(f"{served.url}/search", content=json.dumps({"query": "tax"}),
                        headers={"Content-Type": "text/plain"})
    assert simple.status_code == 415 and "application/json" in simple.json()["error"]
    assert httpx.get(f"{served.url}/documents").status_code == 200  # the user's own tools still get in
    assert httpx.get(f"{served.url}/documents", headers={"Host": "localhost"}).status_code == 200


def test_another_loopback_address_is_protected_the_same_way(store: tuple[Path, Path]) -> None:
    """Finding 2: bound to 127.0.0.2 without a token, /mcp and the JSON API refuse a foreign Host too."""
    import socket

    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.2", 0))
        except OSError:
            pytest.skip("127.0.0.2 is not a loopback address on this machine (macOS has only 127.0.0.1 by default)")
    _, path = store
    proc, url = _start(docpc_command() + ["serve", "--store", str(path), "--bind", "127.0.0.2:0"])
    try:
        assert url.startswith("http://127.0.0.2:")
        assert _mcp(url, "info", {}, Host="evil.example").status_code == 421
        assert httpx.get(f"{url}/documents", headers={"Host": "evil.example"}).status_code == 421
        assert httpx.get(f"{url}/health").status_code == 200
        allowed = _mcp(url, "info", {})
        assert allowed.status_code == 200 and not allowed.json()["result"].get("isError")
    finally:
        _stop(proc)


def test_requests_past_the_limits_get_a_json_refusal_naming_the_limit(served: Served) -> None:
    """Finding 3: a 100,000-character query, a 50 MB body and '[' x 100,000 are refused, as JSON, before any work."""
    long = httpx.post(f"{served.url}/search", json={"query": "word " * 20_000})
    assert long.status_code == 413 and "1,000" in long.json()["error"]
    big = httpx.post(f"{served.url}/search", content=b'{"query": "' + b"x" * 50_000_000 + b'"}',
                     headers={"Content-Type": "application/json"}, timeout=120)
    assert big.status_code == 413 and "1,000,000 bytes" in big.json()["error"]
    deep = httpx.post(f"{served.url}/search", content=b"[" * 100_000, headers={"Content-Type": "application/json"})
    assert deep.status_code == 400 and "error" in deep.json()
    nested = httpx.post(f"{served.url}/search", json={"query": "x", "filters": json.loads("[" * 40 + "]" * 40)})
    assert nested.status_code == 400 and "32 levels" in nested.json()["error"]
    too_many = httpx.post(f"{served.url}/search", json={"query": "x", "k": 101})
    assert too_many.status_code == 400 and "from 0 to 100" in too_many.json()["error"]
    pictures = httpx.post(f"{served.url}/search", json={"query": "x", "images": 11})
    assert pictures.status_code == 400 and "from 0 to 10" in pictures.json()["error"]
    listing = httpx.get(f"{served.url}/documents", params={"limit": 1001})
    assert listing.status_code == 400 and "from 1 to 1000" in listing.json()["error"]
    paths = httpx.post(f"{served.url}/search", json={"query": "x", "under": [f"/p{i}" for i in range(101)]})
    assert paths.status_code == 400 and "at most 100" in paths.json()["error"]
    assert _tool_error(_mcp(served.url, "search", {"query": "word " * 20_000})).count("1,000") == 1
    tokens = httpx.post(f"{served.url}/search", json={"query": "zq" * 400})  # 800 characters, more tokens than 512
    assert tokens.status_code == 413 and "tokens" in tokens.json()["error"] and "512" in tokens.json()["error"]


def test_the_document_count_and_list_come_from_one_read(served: Served) -> None:
    """Finding 5: /documents' total is the number of documents it lists (read together)."""
    listed = httpx.get(f"{served.url}/documents", params={"limit": 1000}).json()
    assert listed["total"] == len(listed["documents"]) == 4
    filtered = httpx.get(f"{served.url}/documents", params={"where": json.dumps({"total_pages": 1})}).json()
    assert filtered["total"] == len(filtered["documents"]) == 2  # a filtered list says its count too


def test_under_is_resolved_where_the_command_was_typed(served: Served) -> None:
    """Finding 6: `docpc search --server URL --under docs/a` means the caller's docs/a, not the server's."""
    done = run_docpc("search", "tax wind", "--server", served.url, "--under", "docs/a", "--json", "-k", "4",
                     cwd=served.root)
    assert done.returncode == 0, done.describe()
    sources = [r["source"] for r in json.loads(done.stdout)]
    assert sorted(sources) == ["a/doc1.pdf", "a/doc3.pdf"], sources  # shown relative to the documents' folder


def test_a_bad_image_side_fails_at_start(store: tuple[Path, Path]) -> None:
    """Finding 7: --image-side 0 is refused when the server starts, not with a 500 at each request."""
    _, path = store
    done = run_docpc("serve", "--store", path, "--bind", "127.0.0.1:0", "--image-side", "0")
    assert done.returncode == 2 and "--image-side" in done.stderr


@pytest.mark.parametrize(("args", "says"), [
    ({"query": "tax", "k": "5"}, "k must be an integer"),
    ({"query": "tax", "images": True}, "images must be an integer"),
    ({"query": "tax", "rerank": "false"}, "rerank must be true or false"),
    ({"query": 123}, "query must be a string"),
    ({"query": "tax", "filters": [1]}, "filters must be a JSON object"),
    ({"query": "tax", "top": 3}, "unknown field(s) in a search request: top"),
])
def test_the_two_apis_refuse_the_same_arguments_with_the_same_words(served: Served, args: dict[str, Any],
                                                                   says: str) -> None:
    """Finding 9: the JSON API and the MCP tool go through one check: same types, unknown fields, messages."""
    http = httpx.post(f"{served.url}/search", json=args)
    assert http.status_code == 400 and says in http.json()["error"], http.text
    assert says in _tool_error(_mcp(served.url, "search", args))


def test_explain_and_every_route_answer_json_and_the_bearer_scheme_is_case_insensitive(
    served: Served, store: tuple[Path, Path]
) -> None:
    """Finding 9, the rest: /explain refuses unknown fields; unknown routes and methods answer JSON; 'bearer' in
    lower case is the same scheme (RFC 7235)."""
    extra = httpx.post(f"{served.url}/explain", json={"query": "tax", "id": "x", "extra": 1})
    assert extra.status_code == 400 and "extra" in extra.json()["error"]
    assert "extra" in _tool_error(_mcp(served.url, "explain", {"query": "tax", "id": "x", "extra": 1}))
    nowhere = httpx.get(f"{served.url}/nowhere")
    assert nowhere.status_code == 404 and "routes" in nowhere.json()["error"]
    wrong = httpx.get(f"{served.url}/search")
    assert wrong.status_code == 405 and "POST" in wrong.json()["error"] and wrong.headers["allow"] == "POST"
    _, path = store
    proc, url = _start(docpc_command() + ["serve", "--store", str(path), "--bind", "127.0.0.1:0", "--token", "t0k"])
    try:
        assert httpx.get(f"{url}/health", headers={"Authorization": "bearer t0k"}).status_code == 200
        assert httpx.get(f"{url}/health", headers={"Authorization": "BEARER t0k"}).status_code == 200
        refused = httpx.get(f"{url}/health", headers={"Authorization": "Basic t0k"})
        assert refused.status_code == 401 and refused.json()["error"]
    finally:
        _stop(proc)


def test_searches_with_pictures_while_documents_are_replaced_never_fail_duplicate_or_miss(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """Finding 4: four clients search with pictures while `docpc index` replaces changed PDFs: every answer is a
    200 that lists each file exactly once (a file's old and new versions are both stored for a moment)."""
    import threading

    docs = tmp_path / "docs"
    labels = ["harbour budget", "wind turbines", "lentil recipes", "tax forms", "annual report", "bridge survey"]
    for i, label in enumerate(labels):
        make_pdf(docs / f"doc{i}.pdf", label, 1 + i % 2)
    done = run_docpc("index", docs, "--store", tmp_path / "store", "--model", tiny_checkpoint)
    assert done.returncode == 0, done.describe()
    proc, url = _start(docpc_command() + ["serve", "--store", str(tmp_path / "store"), "--bind", "127.0.0.1:0"])
    stop = threading.Event()
    problems: list[str] = []
    answers: list[int] = []

    def client(n: int) -> None:
        i = 0
        while not stop.is_set():
            r = httpx.post(f"{url}/search", json={"query": labels[(n + i) % 6], "k": 6, "images": 3}, timeout=120)
            i += 1
            if r.status_code != 200:
                problems.append(f"{r.status_code}: {r.text[:300]}")
                continue
            sources = [h["source"] for h in r.json()["results"]]
            answers.append(len(sources))
            if len(sources) != len(set(sources)) or len(set(sources)) != 6:
                problems.append(f"{len(sources)} results, {len(set(sources))} files: {sources}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    try:
        for t in threads:
            t.start()
        for round_ in range(3):
            for i in range(0, 6, 2):  # half the files change each round
                make_pdf(docs / f"doc{i}.pdf", f"{labels[i]} revised {round_}", 1 + (i + round_) % 2)
            done = run_docpc("index", docs, "--store", tmp_path / "store", "--model", tiny_checkpoint)
            assert done.returncode == 0, done.describe()
            assert "3 replaced" in done.stdout + done.stderr or "replaced" in done.stdout + done.stderr
    finally:
        stop.set()
        for t in threads:
            t.join()
        _stop(proc)
    assert len(answers) >= 8, "the clients hardly searched while the store changed"
    assert problems == []


async def test_docpc_mcp_speaks_mcp_on_stdio_with_no_flag_a_launcher_would_swallow(store: tuple[Path, Path]) -> None:
    """Finding 11: `docpc mcp --store PATH` is the desktop and Inspector entry point (no --transport to clash)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    _, path = store
    command = docpc_command()
    params = StdioServerParameters(command=command[0], args=[*command[1:], "mcp", "--store", str(path)],
                                   env=subprocess_env())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"search", "explain", "list", "info"} <= tools
        found = await session.call_tool("search", {"query": "tax forms", "k": 2, "images": 0})
        assert len(json.loads(found.content[0].text)["results"]) == 2
        refused = await session.call_tool("search", {"query": "tax", "k": "2"})
        assert refused.isError and "k must be an integer" in refused.content[0].text


def test_paths_are_shown_relative_to_the_documents_folder_and_resources_list_names_documents(served: Served) -> None:
    """Finding 10: hits, listings and /info do not give this machine's absolute paths (the store's, the model's,
    the sources'); a shown path works as `under`; MCP resources/list names the documents, not only templates."""
    info = httpx.get(f"{served.url}/info").json()
    assert "path" not in info and "model_path" not in info and not str(info["model"]).startswith("/")
    hits = httpx.post(f"{served.url}/search", json={"query": "tax", "k": 4}).json()["results"]
    sources = [h["source"] for h in hits]
    assert sorted(sources) == ["a/doc1.pdf", "a/doc3.pdf", "b/doc0.pdf", "b/doc2.pdf"]
    assert all(h["metadata"].get("source", h["source"]) == h["source"] for h in hits)
    listed = httpx.get(f"{served.url}/documents").json()["documents"]
    assert {d["source"] for d in listed} == set(sources)
    under = httpx.post(f"{served.url}/search", json={"query": "tax", "k": 4, "under": "a"}).json()["results"]
    assert sorted(h["source"] for h in under) == ["a/doc1.pdf", "a/doc3.pdf"]
    r = httpx.post(f"{served.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {}},
                   headers={"Accept": "application/json, text/event-stream"})
    uris = {res["uri"] for res in r.json()["result"]["resources"]}
    assert len(uris) == 4 and all(u.startswith("docpc://documents/") for u in uris)


def test_a_served_store_deleted_and_rebuilt_is_reported_then_served_again_without_a_restart(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """Finding 8: deleting the served store's folder makes /health say why (JSON, 503) and searches refuse with the
    reason; the server writes nothing into the path meanwhile, so the rebuild succeeds; then every route answers
    from the new store, without a restart."""
    import shutil

    docs, store = tmp_path / "docs", tmp_path / "store"
    for i, label in enumerate(["harbour budget", "wind turbines", "lentil recipes"]):
        make_pdf(docs / f"doc{i}.pdf", label, 1)
    assert run_docpc("index", docs, "--store", store, "--model", tiny_checkpoint).returncode == 0
    proc, url = _start(docpc_command() + ["serve", "--store", str(store), "--bind", "127.0.0.1:0"])
    try:
        first = httpx.post(f"{url}/search", json={"query": "wind", "k": 3, "images": 2})
        assert first.status_code == 200 and len(first.json()["results"]) == 3
        shutil.rmtree(store)
        health = httpx.get(f"{url}/health")
        assert health.status_code == 503 and health.json()["status"] == "unhealthy"
        assert "gone" in health.json()["reason"]
        gone = httpx.post(f"{url}/search", json={"query": "wind", "k": 3, "images": 2})
        assert gone.status_code == 503 and "gone" in gone.json()["error"]
        assert not store.exists()  # nothing written into the path while the store is away
        make_pdf(docs / "doc3.pdf", "tax forms", 1)
        rebuilt = run_docpc("index", docs, "--store", store, "--model", tiny_checkpoint)
        assert rebuilt.returncode == 0, rebuilt.describe()
        assert httpx.get(f"{url}/health").json() == {"status": "ok", "model": tiny_checkpoint.name, "documents": 4}
        again = httpx.post(f"{url}/search", json={"query": "wind", "k": 4, "images": 2})
        assert again.status_code == 200 and len(again.json()["results"]) == 4
        assert httpx.get(f"{url}/documents").json()["total"] == 4
    finally:
        _stop(proc)


def test_names_and_origins_the_operator_allows_get_in_and_no_others(store: tuple[Path, Path]) -> None:
    """--allow-host adds a name the Host header may carry (a proxy's); --allow-origin lets one web page call."""
    _, path = store
    proc, url = _start(docpc_command() + ["serve", "--store", str(path), "--bind", "127.0.0.1:0",
                                          "--allow-host", "docs.example", "--allow-origin", "http://app.example"])
    try:
        assert httpx.get(f"{url}/health", headers={"Host": "docs.example"}).status_code == 200
        assert httpx.get(f"{url}/health", headers={"Host": "other.example"}).status_code == 421
        assert httpx.get(f"{url}/health", headers={"Origin": "http://app.example"}).status_code == 200
        assert httpx.get(f"{url}/health", headers={"Origin": "http://app.example.evil"}).status_code == 403
    finally:
        _stop(proc)
