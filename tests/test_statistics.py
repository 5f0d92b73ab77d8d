"""The statistics table: each column declared once, everything else derived from it."""

import inspect
import pickle

import numpy as np
import pytest

import attnviz
from attnviz.analysis.corpus import STATISTICS, CorpusStatistics
from attnviz.analysis.heads import HeadTable, sort_rows
from attnviz.analysis.products import HeadStatisticsProduct
from attnviz.head_columns import (
    CORPUS,
    DETECTORS,
    EFFECTS,
    SUMMED,
    Detector,
    HeadColumn,
    Needs,
    RankBy,
)


def test_the_options_choices_are_the_tables_columns():
    assert [by.value for by in RankBy] == [column.value for column in (*SUMMED, *EFFECTS)]
    assert [detector.value for detector in Detector] == [column.value for column in DETECTORS]
    assert tuple(column.value for column in CORPUS) == STATISTICS
    assert {column.value for column in CORPUS} >= {column.value for column in SUMMED}


@pytest.mark.parametrize("choice", [RankBy.INDUCTION, Detector.INDUCTION, HeadColumn.SPAN])
def test_derived_choices_survive_pickling_for_worker_processes(choice):
    assert pickle.loads(pickle.dumps(choice)) is choice


def test_every_summed_statistic_is_summed_by_name_in_the_product():
    """A row added to the table without its arithmetic would be NaN or 0 forever."""
    source = inspect.getsource(HeadStatisticsProduct)  # add and the helpers it calls
    for column in SUMMED:
        assert f'SLOT["{column.value}"]' in source, column


def test_every_summed_statistic_has_a_value_where_it_applies():
    """On a self-attention text with a span and repeats, every statistic applies."""
    maps = attnviz.extract("the cat sat on the mat the cat sat", span=[1, 2])
    probe_rows = (
        attnviz.load().head_statistics(attnviz.load().detection_probe(), attnviz.Request()).rows
    )
    for row in maps.head_statistics():
        for column in SUMMED:
            if not column.detector:
                assert row[column] is not None and np.isfinite(row[column]), column
    for row in probe_rows:
        for column in DETECTORS:
            assert row[column] is not None, column


def test_the_sort_direction_is_the_declarations():
    rows = attnviz.extract("a b c d e").head_statistics()
    for column in HeadColumn:
        if column.needs in (
            Needs.SPAN,
            Needs.ANSWER,
            Needs.CORRUPT,
            Needs.KINDS,
        ):  # none in the stack
            continue
        values = [row[column] for row in sort_rows(rows, column)]
        assert values == sorted(values, reverse=not column.ascending), column


def test_what_needs_one_sequence_is_none_in_cross_attention():
    maps = attnviz.extract("the cat sat", mode="cross", target="le chat")
    for row in maps.head_statistics():
        for column in SUMMED:
            if column.one_sequence_only or column.needs is Needs.SPAN:
                assert row[column] is None, column


def test_the_corpus_sums_every_corpus_column():
    corpus = CorpusStatistics().add_all([HeadTable.of(attnviz.extract("a b a b", span=[0]))])
    answered = (Needs.ANSWER, Needs.CORRUPT)
    summed = [column.value for column in CORPUS if column.needs not in answered]
    assert corpus.statistics() == summed  # a span, repeats; no answer
