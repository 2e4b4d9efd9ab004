"""One LangChain ``invoke`` checks each thing once: the filter, the query and the options, where the search starts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from docpc_retrievers import DocPCIndex, filters, search
from docpc_retrievers.retrievers import options as retriever_options

from langchain_docpc import DocPCRetriever


def _counted(calls: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)

    return wrapper


def test_one_invoke_checks_the_filter_the_query_and_the_options_once_each(
    corpus_index: DocPCIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    retriever = DocPCRetriever(index=corpus_index, k=2, rerank=False)
    calls: Counter[str] = Counter()
    monkeypatch.setattr(filters, "_validated", _counted(calls, "check_where", filters._validated))
    monkeypatch.setattr(search, "check_query", _counted(calls, "check_query", search.check_query))
    behaviour = retriever_options._SearchBehaviour
    monkeypatch.setattr(behaviour, "__post_init__", _counted(calls, "options built", behaviour.__post_init__))

    hits = retriever.invoke("a query about pages", filter={"total_pages": {"$gte": 1}}, candidates=50)

    assert hits and len(hits) <= 2
    assert calls == Counter({"check_where": 1, "check_query": 1, "options built": 1}), calls
    calls.clear()
    retriever.invoke("another query")  # no filter: nothing to check there
    assert calls == Counter({"check_query": 1, "options built": 1}), calls
