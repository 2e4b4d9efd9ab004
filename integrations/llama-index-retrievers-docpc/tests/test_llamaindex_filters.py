"""MetadataFilters -> Chroma where: the mapping itself, and filtered retrieval against ground truth."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from docpc_retrievers import DocPCIndex
from llama_index.retrievers.docpc import DocPCRetriever, UnsupportedFilterError, metadata_filters_to_where

QUERY = "a page with a table and a figure"


def _f(key: str, value: Any, op: FilterOperator = FilterOperator.EQ) -> MetadataFilter:
    return MetadataFilter(key=key, value=value, operator=op)


# --------------------------------------------------------------------------- mapping


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        (FilterOperator.EQ, "a.pdf", {"file_name": {"$eq": "a.pdf"}}),
        (FilterOperator.NE, "a.pdf", {"file_name": {"$ne": "a.pdf"}}),
        (FilterOperator.GT, 2, {"file_name": {"$gt": 2}}),
        (FilterOperator.GTE, 2, {"file_name": {"$gte": 2}}),
        (FilterOperator.LT, 2, {"file_name": {"$lt": 2}}),
        (FilterOperator.LTE, 2.5, {"file_name": {"$lte": 2.5}}),
        (FilterOperator.IN, ["a", "b"], {"file_name": {"$in": ["a", "b"]}}),
        (FilterOperator.NIN, ["a"], {"file_name": {"$nin": ["a"]}}),
        (FilterOperator.CONTAINS, "3", {"file_name": {"$contains": "3"}}),
        (FilterOperator.ANY, ["1", "2"], {"$or": [{"file_name": {"$contains": v}} for v in ("1", "2")]}),
        (FilterOperator.ALL, ["1", "2"], {"$and": [{"file_name": {"$contains": v}} for v in ("1", "2")]}),
        (FilterOperator.ALL, ["1"], {"file_name": {"$contains": "1"}}),
    ],
)
def test_each_operator_maps_onto_chroma(op: FilterOperator, value: Any, expected: dict[str, Any]) -> None:
    assert metadata_filters_to_where(MetadataFilters(filters=[_f("file_name", value, op)])) == expected


def test_conditions_and_nesting() -> None:
    a, b, c = _f("x", 1), _f("y", 2, FilterOperator.GT), _f("z", ["p"], FilterOperator.IN)
    assert metadata_filters_to_where(MetadataFilters(filters=[a, b])) == {
        "$and": [{"x": {"$eq": 1}}, {"y": {"$gt": 2}}]
    }
    nested = MetadataFilters(
        filters=[a, MetadataFilters(filters=[b, c], condition=FilterCondition.OR)], condition=FilterCondition.AND
    )
    assert metadata_filters_to_where(nested) == {
        "$and": [{"x": {"$eq": 1}}, {"$or": [{"y": {"$gt": 2}}, {"z": {"$in": ["p"]}}]}]
    }


def test_nothing_to_filter_is_none() -> None:
    assert metadata_filters_to_where(None) is None
    assert metadata_filters_to_where(MetadataFilters(filters=[])) is None
    assert metadata_filters_to_where({}) is None


def test_a_where_dict_passes_through() -> None:
    where = {"total_pages": {"$gte": 2}}
    assert metadata_filters_to_where(where) == where


@pytest.mark.parametrize(
    "op", [FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE, FilterOperator.IS_EMPTY]
)
def test_unsupported_operators_raise_clearly(op: FilterOperator) -> None:
    with pytest.raises(UnsupportedFilterError, match=rf"{op.name}.*not supported.*supported operators: EQ"):
        metadata_filters_to_where(MetadataFilters(filters=[_f("title", "x", op)]))


def test_not_condition_raises_clearly() -> None:
    with pytest.raises(UnsupportedFilterError, match="NOT is not supported"):
        metadata_filters_to_where(MetadataFilters(filters=[_f("title", "x")], condition=FilterCondition.NOT))


def test_unsupported_filter_fails_at_construction(corpus_index: DocPCIndex) -> None:
    bad = MetadataFilters(filters=[_f("title", "x", FilterOperator.TEXT_MATCH)])
    with pytest.raises(UnsupportedFilterError):
        DocPCRetriever(corpus_index, filters=bad)
    assert issubclass(UnsupportedFilterError, ValueError)


@pytest.mark.parametrize(
    ("op", "value"), [(FilterOperator.IN, "a"), (FilterOperator.IN, []), (FilterOperator.EQ, ["a"])]
)
def test_value_shape_is_checked(op: FilterOperator, value: Any) -> None:
    with pytest.raises(ValueError, match="file_name"):
        metadata_filters_to_where(MetadataFilters(filters=[_f("file_name", value, op)]))


def test_wrong_filter_type_is_refused() -> None:
    with pytest.raises(TypeError, match="MetadataFilters"):
        metadata_filters_to_where([_f("x", 1)])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- filtered retrieval


@pytest.fixture(scope="module")
def truth(corpus_index: DocPCIndex) -> dict[str, dict[str, Any]]:
    """Every stored document's metadata by id: the ground truth filters are checked against."""
    return {r.id: r.metadata for r in corpus_index.get(corpus_index.store.ids())}


def _retrieved(index: DocPCIndex, filters: MetadataFilters | dict[str, Any]) -> set[str]:
    retriever = DocPCRetriever(index, similarity_top_k=1000, filters=filters, return_images=None)
    return {n.node.node_id for n in retriever.retrieve(QUERY)}


def _expect(truth: dict[str, dict[str, Any]], keep: Callable[[dict[str, Any]], bool]) -> set[str]:
    return {doc_id for doc_id, meta in truth.items() if keep(meta)}


def test_eq_ne_in_nin_on_file_name(corpus_index: DocPCIndex, truth: dict[str, dict[str, Any]]) -> None:
    names = sorted(m["file_name"] for m in truth.values())
    one, two = names[0], names[-1]
    cases = [
        (_f("file_name", one), lambda m: m["file_name"] == one),
        (_f("file_name", one, FilterOperator.NE), lambda m: m["file_name"] != one),
        (_f("file_name", [one, two], FilterOperator.IN), lambda m: m["file_name"] in (one, two)),
        (_f("file_name", [one, two], FilterOperator.NIN), lambda m: m["file_name"] not in (one, two)),
    ]
    for flt, keep in cases:
        expected = _expect(truth, keep)
        assert expected and expected != set(truth), flt
        assert _retrieved(corpus_index, MetadataFilters(filters=[flt])) == expected, flt


@pytest.mark.parametrize(
    ("op", "keep"),
    [
        (FilterOperator.GT, lambda pages, t: pages > t),
        (FilterOperator.GTE, lambda pages, t: pages >= t),
        (FilterOperator.LT, lambda pages, t: pages < t),
        (FilterOperator.LTE, lambda pages, t: pages <= t),
    ],
)
def test_range_operators_on_total_pages(
    corpus_index: DocPCIndex, truth: dict[str, dict[str, Any]], op: FilterOperator, keep: Callable[[int, int], bool]
) -> None:
    counts = sorted({m["total_pages"] for m in truth.values()})
    assert len(counts) >= 3, "the corpus needs documents of several lengths"
    threshold = counts[1]
    expected = _expect(truth, lambda m: keep(m["total_pages"], threshold))
    assert expected and expected != set(truth)
    assert _retrieved(corpus_index, MetadataFilters(filters=[_f("total_pages", threshold, op)])) == expected


def test_and_or_combinations(corpus_index: DocPCIndex, truth: dict[str, dict[str, Any]]) -> None:
    counts = sorted({m["total_pages"] for m in truth.values()})
    low, high = counts[0], counts[-1]
    both = MetadataFilters(
        filters=[_f("total_pages", low, FilterOperator.GT), _f("total_pages", high, FilterOperator.LT)],
        condition=FilterCondition.AND,
    )
    either = MetadataFilters(filters=[_f("total_pages", low), _f("total_pages", high)], condition=FilterCondition.OR)
    expect_both = _expect(truth, lambda m: low < m["total_pages"] < high)
    expect_either = _expect(truth, lambda m: m["total_pages"] in (low, high))
    assert expect_both and expect_either and expect_both.isdisjoint(expect_either)
    assert _retrieved(corpus_index, both) == expect_both
    assert _retrieved(corpus_index, either) == expect_either


def test_contains_any_all_on_selected_labels(corpus_index: DocPCIndex, truth: dict[str, dict[str, Any]]) -> None:
    contains_two = _expect(truth, lambda m: "2" in m["selected_labels"])
    assert contains_two and contains_two != set(truth)
    assert _retrieved(corpus_index, MetadataFilters(filters=[_f("selected_labels", "2", FilterOperator.CONTAINS)])) == (
        contains_two
    )
    any_23 = _expect(truth, lambda m: {"2", "3"} & set(m["selected_labels"]))
    all_23 = _expect(truth, lambda m: {"2", "3"} <= set(m["selected_labels"]))
    any_filter = MetadataFilters(filters=[_f("selected_labels", ["2", "3"], FilterOperator.ANY)])
    all_filter = MetadataFilters(filters=[_f("selected_labels", ["2", "3"], FilterOperator.ALL)])
    assert _retrieved(corpus_index, any_filter) == any_23
    assert _retrieved(corpus_index, all_filter) == all_23


def test_raw_where_dict_filters(corpus_index: DocPCIndex, truth: dict[str, dict[str, Any]]) -> None:
    expected = _expect(truth, lambda m: m["total_pages"] >= 2)
    assert expected and expected != set(truth)
    assert _retrieved(corpus_index, {"total_pages": {"$gte": 2}}) == expected


def test_filters_can_be_changed_between_calls(corpus_index: DocPCIndex, truth: dict[str, dict[str, Any]]) -> None:
    retriever = DocPCRetriever(corpus_index, similarity_top_k=1000, return_images=None)
    assert len(retriever.retrieve(QUERY)) == len(truth)
    retriever.filters = MetadataFilters(filters=[_f("total_pages", 1)])
    got = {n.node.node_id for n in retriever.retrieve(QUERY)}
    assert got == _expect(truth, lambda m: m["total_pages"] == 1)
    assert all(truth[i]["total_pages"] == 1 for i in got)
