"""LangChain's standard retriever integration tests, unmodified, against DocPCRetriever on the tiny model."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from docpc_retrievers import DocPCIndex
from langchain_docpc import DocPCRetriever


class TestDocPCRetrieverStandard(RetrieversIntegrationTests):
    """Only the required properties are provided; every standard test runs as shipped."""

    _shared_index: DocPCIndex | None = None

    @pytest.fixture(autouse=True)
    def _use_shared_index(self, corpus_index: DocPCIndex) -> None:
        # Properties cannot take fixtures: hand the session's read-only corpus index to them.
        type(self)._shared_index = corpus_index

    @property
    def retriever_constructor(self) -> type[DocPCRetriever]:
        return DocPCRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        assert self._shared_index is not None and len(self._shared_index) >= 3
        return {"index": self._shared_index}

    @property
    def retriever_query_example(self) -> str:
        return "What is the total revenue in the annual report?"
