"""Every retriever option is defined once (docpc_retrievers/retrievers/schema.py): the core's options, both frameworks'
fields and attributes, LangChain's search_kwargs spellings and the saved options all follow the schema."""

from __future__ import annotations

import dataclasses

import pytest

from docpc_retrievers.retrievers import RetrieverOptions
from docpc_retrievers.retrievers import OPTIONS, framework_names, search_aliases


def test_the_core_options_are_the_schemas_in_its_order_with_its_defaults() -> None:
    fields = [f for f in dataclasses.fields(RetrieverOptions) if f.name != "password"]
    assert [(f.name, f.default) for f in fields] == [(o.name, o.default) for o in OPTIONS]
    assert set(RetrieverOptions().to_dict()) == {"format", *(o.name for o in OPTIONS)}


def test_the_langchain_retriever_has_one_field_per_option_with_its_description_and_bounds() -> None:
    from langchain_docpc.retrievers import DocPCRetriever

    fields = DocPCRetriever.model_fields
    for option in OPTIONS:
        field = fields[option.langchain]
        assert field.default == option.default and field.description == option.doc, option.name
        for bound, value in (option.bounds or {}).items():
            assert any(getattr(m, bound, None) == value for m in field.metadata), (option.name, bound)
    assert framework_names("langchain")["k"] == "top_k" and search_aliases() == {"top_k": "k", "filters": "filter"}


def test_the_llamaindex_retriever_takes_every_option_under_its_name(tiny_encoder) -> None:  # type: ignore[no-untyped-def]
    """Each schema option is an attribute of a built retriever with the schema's default, and a value given under
    its LlamaIndex name reaches the search options under the core's name."""
    import inspect

    from llama_index.retrievers.docpc import DocPCRetriever

    from docpc_retrievers import DocPCIndex

    names = framework_names("llamaindex")
    with DocPCIndex(None, encoder=tiny_encoder) as index:
        retriever = DocPCRetriever(index)
        for name, core in names.items():
            if name in ("filters", "similarity_top_k"):
                continue
            option = next(o for o in OPTIONS if o.name == core)
            assert getattr(retriever, name) == option.default, name
        changed = DocPCRetriever(index, similarity_top_k=3, rerank_top_n=7, candidates=99)
        options = changed.options()
        assert (options.top_k, options.rerank_top_n, options.candidates) == (3, 7, 99)
        with pytest.raises(TypeError, match="rerank_topn"):
            DocPCRetriever(index, rerank_topn=7)
    assert "similarity_top_k" in inspect.signature(DocPCRetriever.__init__).parameters


@pytest.mark.parametrize(("option", "bad", "says"), [
    ("min_score_ratio", 2, "min_score_ratio must be in (0, 1]"),
    ("return_images", "thumbnail", "return_images must be 'grid', 'pages', 'evidence' or None"),
    ("rerank", "false", "rerank must be True or False"),
    ("aggregate", "median", "aggregate must be one of max, mean, sum"),
])
def test_each_option_is_checked_once_with_the_message_users_see(option: str, bad: object, says: str) -> None:
    with pytest.raises(ValueError, match=r"^" + says.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        RetrieverOptions(**{option: bad})


def test_the_commands_search_flags_come_from_the_schema_and_are_left_out_when_not_given() -> None:
    from docpc_retrievers.cli.app import build_parser
    from docpc_retrievers.cli.common import option_values
    from docpc_retrievers.cli.search import SEARCH_OPTIONS
    from docpc_retrievers.cli.show import SHOW_OPTIONS
    from docpc_retrievers.retrievers import BY_NAME

    parser = build_parser()
    search = parser.parse_args(["search", "q", "--store", "s"])
    for name in (*SEARCH_OPTIONS, *SHOW_OPTIONS):
        assert BY_NAME[name].cli, name  # every flag the commands offer is an option of the schema
    flags = {s for a in search.commands["search"]._actions for s in a.option_strings}
    assert {f for n in SEARCH_OPTIONS for f in BY_NAME[n].cli} <= flags
    assert option_values(search, SEARCH_OPTIONS) == {}  # nothing given: the core's defaults apply
    given = parser.parse_args(["search", "q", "--store", "s", "-k", "3", "--where", '{"year": 2024}', "--under",
                               "a", "--under", "b", "--rerank", "--rerank-top-n", "7", "--candidates", "99"])
    assert option_values(given, SEARCH_OPTIONS) == {"top_k": 3, "filters": {"year": 2024}, "under": ["a", "b"],
                                                    "rerank": True, "rerank_top_n": 7, "candidates": 99}
    shown = parser.parse_args(["show", "q", "--store", "s", "--under", "x", "-k", "2"])
    assert option_values(shown, SHOW_OPTIONS) == {"top_k": 2, "under": ["x"]}


def test_a_search_option_added_to_the_schema_reaches_every_front_end_and_the_store(
    tiny_encoder, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    """``exhaustive`` was added as one schema entry and its use in search.py: the index's keywords, both retrievers,
    the command line's flag, what ``--server`` refuses and what the server's requests take all follow."""
    import inspect

    from e2e_helpers import make_pdf
    from langchain_docpc import DocPCRetriever as LangChainRetriever
    from llama_index.retrievers.docpc import DocPCRetriever as LlamaIndexRetriever

    from docpc_retrievers import DocPCIndex
    from docpc_retrievers.cli.app import main
    from docpc_retrievers.serve.requests import RequestError, check_search

    assert "exhaustive" in inspect.signature(DocPCIndex.search).parameters
    for i in range(3):
        make_pdf(tmp_path / "docs" / f"e{i}.pdf", f"exhaustive option {i}", 1)
    with DocPCIndex.from_pdfs([tmp_path / "docs"], tmp_path / "store", encoder=tiny_encoder, workers=0) as index:
        asked: list[bool] = []
        search_batch = index.store.search_batch

        def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
            asked.append(kwargs["exhaustive"])
            return search_batch(*args, **kwargs)

        monkeypatch.setattr(index.store, "search_batch", recording)
        exact = index.search("exhaustive option", top_k=3, exhaustive=True)
        assert asked == [True] and [r.id for r in exact] == [r.id for r in index.search("exhaustive option", top_k=3)]
        assert LangChainRetriever(index=index, exhaustive=True).invoke("exhaustive option") and asked[-1] is True
        assert LlamaIndexRetriever(index, exhaustive=True).retrieve("exhaustive option") and asked[-1] is True
        with pytest.raises(ValueError, match="exhaustive must be True or False"):
            index.search("x", exhaustive="yes")  # type: ignore[arg-type]
    with pytest.raises(SystemExit):
        main(["search", "x", "--server", "http://127.0.0.1:9", "--exhaustive"])
    assert "--exhaustive cannot be sent to a server" in capsys.readouterr().err
    with pytest.raises(RequestError, match="unknown field.*exhaustive"):
        check_search({"query": "x", "exhaustive": True})
