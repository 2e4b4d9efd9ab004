"""``docpc serve`` driven as clients drive it: the real server in a subprocess, over MCP (HTTP and stdio, through the
official client, LangChain's and LlamaIndex's MCP adapters) and its JSON API; answers equal DocPCIndex.search."""

from __future__ import annotations

import base64
import io
import json
import re
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_helpers import docpc_command, make_pdf, run_docpc, subprocess_env
from PIL import Image

from docpc_retrievers.index import DocPCIndex

pytest.importorskip("mcp")
pytestmark = [pytest.mark.usefixtures("fresh_chroma"), pytest.mark.slow]

TOKEN = "s3cret-token"
QUERIES = ["budget report for the harbour", "wind turbine maintenance", "a recipe with lentils", "tax forms",
           "harbour", "maintenance notes", "lentils and rice", "section 2"]


@dataclass(frozen=True)
class Served:
    url: str
    store: Path
    model: Path
    expected: dict[str, list[tuple[str, float]]]


def _pairs(results: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return [(r["id"], round(float(r["score"]), 3)) for r in results]


def _start(argv: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the readiness line, once the model is loaded
    found = re.search(r"ready at (http://\S+)", line)
    if not found:
        proc.kill()
        raise AssertionError(f"no readiness line: {line!r}\n{proc.stderr.read() if proc.stderr else ''}")
    return proc, found.group(1)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("serve")
    labels = ["harbour budget report", "wind turbine maintenance", "lentil recipes", "tax forms", "annual report"]
    for i, label in enumerate(labels):
        make_pdf(root / "docs" / ("a" if i % 2 else "b") / f"doc{i}.pdf", label, 1 + i % 3)
    store = root / "store"
    done = run_docpc("index", root / "docs", "--store", store, "--model", tiny_checkpoint)
    assert done.returncode == 0, done.describe()
    with DocPCIndex(store, model=tiny_checkpoint) as index:
        expected = {q: _pairs([r.to_dict() for r in index.search(q, 3)]) for q in QUERIES}
    proc, url = _start(docpc_command() + ["serve", "--store", str(store), "--bind", "127.0.0.1:0", "--token", TOKEN,
                                          "--full-paths"])  # answers compared with DocPCIndex's, paths and all
    try:
        yield Served(url, store, tiny_checkpoint, expected)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, f"the server did not stop cleanly on SIGTERM (exit {code}): {proc.stderr.read() if proc.stderr else ''}"


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def _png(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def test_the_json_api_answers_as_the_index_does(served: Served) -> None:
    r = httpx.post(f"{served.url}/search", json={"query": QUERIES[0], "k": 3, "images": 2}, headers=_auth(), timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert _pairs(body["results"]) == served.expected[QUERIES[0]]
    assert len(body["images"]) == 2
    assert body["images"][0]["id"] == body["results"][0]["id"]
    picture = _png(base64.b64decode(body["images"][0]["png_base64"]))
    assert picture.format == "PNG" and min(picture.size) > 50
    health = httpx.get(f"{served.url}/health", headers=_auth()).json()
    assert health["status"] == "ok" and health["documents"] == 5
    info = httpx.get(f"{served.url}/info", headers=_auth()).json()
    assert health["model"] == info["model"]  # shown the same way (this server shows full paths)
    listed = httpx.get(f"{served.url}/documents", params={"limit": 2}, headers=_auth()).json()
    assert len(listed["documents"]) == 2 and listed["total"] == 5
    one = httpx.get(f"{served.url}/documents/{listed['documents'][0]['id']}", headers=_auth()).json()
    assert one["source"] == listed["documents"][0]["source"]
    assert one["model"] == info["model"]
    assert isinstance(one["layout"], dict) and isinstance(one["token_grid"], dict)  # objects, not JSON in strings


def test_bad_requests_get_a_reason(served: Served) -> None:
    bad_k = httpx.post(f"{served.url}/search", json={"query": "x", "k": -1}, headers=_auth())
    assert bad_k.status_code == 400 and "k must be an integer from 0 to 100" in bad_k.json()["error"]
    none = httpx.post(f"{served.url}/search", json={"query": "x", "k": 0}, headers=_auth())
    assert none.status_code == 200 and none.json()["results"] == []  # top_k=0's one rule
    empty = httpx.post(f"{served.url}/search", json={"query": "  "}, headers=_auth())
    assert empty.status_code == 400 and "empty" in empty.json()["error"]
    bad_images = httpx.post(f"{served.url}/search", json={"query": "x", "images": "two"}, headers=_auth())
    assert bad_images.status_code == 400 and "images must be" in bad_images.json()["error"]
    unknown = httpx.post(f"{served.url}/search", json={"query": "x", "topk": 3}, headers=_auth())
    assert unknown.status_code == 400 and "topk" in unknown.json()["error"]
    missing = httpx.get(f"{served.url}/documents/not-an-id", headers=_auth())
    assert missing.status_code == 404


def test_requests_without_the_token_are_refused(served: Served) -> None:
    assert httpx.get(f"{served.url}/health").status_code == 401
    assert httpx.get(f"{served.url}/health", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.post(f"{served.url}/search", json={"query": "x"}).status_code == 401
    assert httpx.post(f"{served.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code == 401


def test_eight_clients_at_once_get_their_own_answers(served: Served) -> None:
    def ask(query: str) -> list[tuple[str, float]]:
        r = httpx.post(f"{served.url}/search", json={"query": query, "k": 3}, headers=_auth(), timeout=120)
        assert r.status_code == 200, r.text
        return _pairs(r.json()["results"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(ask, QUERIES))
    assert answers == [served.expected[q] for q in QUERIES]


def test_the_command_line_searches_through_the_server(served: Served) -> None:
    env = subprocess_env(DOCPC_SERVE_TOKEN=TOKEN)
    run = run_docpc("search", "--server", served.url, QUERIES[1], "-k", "3", "--json", env=env)
    assert run.returncode == 0, run.describe()
    assert _pairs(run.json()) == served.expected[QUERIES[1]]
    text = run_docpc("search", QUERIES[1], "-k", "3", env=subprocess_env(DOCPC_SERVER=served.url, DOCPC_SERVE_TOKEN=TOKEN))
    assert text.returncode == 0 and served.expected[QUERIES[1]][0][0] in text.stdout, text.describe()
    refused = run_docpc("search", "--server", served.url, "x")  # no token
    assert refused.returncode != 0 and "401" in refused.stderr
    assert "--token or $DOCPC_SERVE_TOKEN" in refused.stderr, refused.describe()
    given = run_docpc("search", "--server", served.url, "--token", TOKEN, QUERIES[1], "-k", "3")
    assert given.returncode == 0 and served.expected[QUERIES[1]][0][0] in given.stdout, given.describe()


async def test_mcp_over_http_through_the_official_client(served: Served) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async with streamablehttp_client(f"{served.url}/mcp", headers=_auth()) as (read, write, _), \
            ClientSession(read, write) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert {"search", "explain", "list", "info"} <= names
        found = await session.call_tool("search", {"query": QUERIES[2], "k": 3, "images": 1})
        assert not found.isError, found.content
        results = json.loads(found.content[0].text)["results"]
        assert _pairs(results) == served.expected[QUERIES[2]]
        images = [c for c in found.content if c.type == "image"]
        assert len(images) == 1 and _png(base64.b64decode(images[0].data)).size[0] > 50
        why = await session.call_tool("explain", {"query": QUERIES[2], "id": results[0]["id"]})
        summary = json.loads(why.content[0].text)
        assert summary["id"] == results[0]["id"] and summary["shares"]
        assert any(c.type == "image" for c in why.content)
        listed = json.loads((await session.call_tool("list", {"limit": 10})).content[0].text)
        assert listed["total"] == 5
        meta = await session.read_resource(f"docpc://documents/{results[0]['id']}")
        assert json.loads(meta.contents[0].text)["id"] == results[0]["id"]
        page = results[0]["selected_pages"][0]
        picture = await session.read_resource(f"docpc://documents/{results[0]['id']}/pages/{page}")
        assert picture.contents[0].mimeType == "image/png"
        assert _png(base64.b64decode(picture.contents[0].blob)).size[0] > 50
        bad = await session.call_tool("search", {"query": "x", "k": 1000})
        assert bad.isError and "k must be" in bad.content[0].text


async def test_mcp_over_stdio(served: Served) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command = docpc_command()
    params = StdioServerParameters(command=command[0], args=[*command[1:], "serve", "--store", str(served.store),
                                                             "--transport", "stdio"], env=subprocess_env())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        started = await session.initialize()
        from docpc_retrievers import __version__

        assert (started.serverInfo.name, started.serverInfo.version) == ("docpc", __version__)  # not the SDK's
        found = await session.call_tool("search", {"query": QUERIES[3], "k": 3, "images": 0})
        assert _pairs(json.loads(found.content[0].text)["results"]) == served.expected[QUERIES[3]]


async def test_langchain_loads_the_tools_through_its_mcp_adapters(served: Served) -> None:
    from langchain_mcp_adapters.client import MultiServerMCPClient

    client = MultiServerMCPClient({"docpc": {"transport": "streamable_http", "url": f"{served.url}/mcp",
                                             "headers": _auth()}})
    tools = {t.name: t for t in await client.get_tools()}
    assert {"search", "explain", "list", "info"} <= set(tools)
    out = await tools["search"].ainvoke({"query": QUERIES[4], "k": 3, "images": 0})
    text = out if isinstance(out, str) else next(b["text"] for b in out if b.get("type") == "text")
    assert _pairs(json.loads(text)["results"]) == served.expected[QUERIES[4]]


async def test_llamaindex_loads_the_tools_through_its_mcp_client(served: Served) -> None:
    from llama_index.tools.mcp import BasicMCPClient, McpToolSpec

    client = BasicMCPClient(f"{served.url}/mcp", headers=_auth())
    tools = {t.metadata.name: t for t in await McpToolSpec(client=client).to_tool_list_async()}
    assert {"search", "explain", "list", "info"} <= set(tools)
    out = await tools["search"].acall(query=QUERIES[5], k=3, images=0)
    result = out.raw_output
    text = result.content[0].text
    assert _pairs(json.loads(text)["results"]) == served.expected[QUERIES[5]]


def test_an_address_other_machines_reach_needs_a_token(served: Served) -> None:
    run = run_docpc("serve", "--store", served.store, "--bind", "0.0.0.0:0")
    assert run.returncode == 2 and "--token" in run.stderr, run.describe()


def test_documents_indexed_while_it_runs_are_served(served: Served, tmp_path: Path) -> None:
    """The server holds no writer lock: a `docpc index` run beside it commits, and the server follows (last in this
    file: it adds a sixth document)."""
    import time

    before = httpx.get(f"{served.url}/health", headers=_auth()).json()["documents"]
    new = make_pdf(tmp_path / "late.pdf", "a late addition about glaciers", 2)
    done = run_docpc("index", new, "--store", served.store)
    assert done.returncode == 0, done.describe()
    deadline = time.monotonic() + 60
    while httpx.get(f"{served.url}/health", headers=_auth()).json()["documents"] != before + 1:
        assert time.monotonic() < deadline, "the server never saw the new document"
        time.sleep(0.5)
    found = httpx.post(f"{served.url}/search", json={"query": "glaciers", "k": before + 1}, headers=_auth()).json()
    assert str(new) in {r["source"] for r in found["results"]}
