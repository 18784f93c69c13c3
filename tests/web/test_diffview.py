"""The diff page's path table and strip over generated aligned paths: every step is shown
once (as a row or inside a fold), every change is shown with its context, pages tile."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine.fork.wire import AlignedStep
from forklab.web.diffview import (
    CONTEXT_STEPS,
    STEPS_PER_PAGE,
    STRIP_STEPS,
    Fold,
    PathRow,
    fold_steps,
    path_strip,
    step_counts,
)
from tests.web.conftest import step

OPS = ("same", "same", "same", "changed", "inserted", "skipped")
paths = st.lists(st.sampled_from(OPS).map(lambda op: step(op, "n")), max_size=400)


def _all_rows(aligned: list[AlignedStep]) -> list[PathRow | Fold]:
    rows: list[PathRow | Fold] = []
    start: int | None = 0
    while start is not None:
        page = fold_steps(aligned, start=start)
        rows += page.rows
        start = page.next
    return rows


@given(aligned=paths)
def test_every_step_is_shown_once_and_every_change_with_its_context(
        aligned: list[AlignedStep]) -> None:
    rows = _all_rows(aligned)
    assert sum(r.fold if isinstance(r, Fold) else 1 for r in rows) == len(aligned)
    shown = [r.index for r in rows if isinstance(r, PathRow)]
    assert shown == sorted(set(shown))
    for i, s in enumerate(aligned):
        if s.op != "same":
            near = range(max(0, i - CONTEXT_STEPS), min(len(aligned), i + CONTEXT_STEPS + 1))
            assert set(near) <= set(shown)
    if len(aligned) <= 2 * CONTEXT_STEPS + 1:  # a short path is shown whole
        assert not any(isinstance(r, Fold) for r in rows)


@given(aligned=paths, start=st.integers(min_value=0, max_value=500))
def test_a_page_holds_at_most_one_page_of_rows(aligned: list[AlignedStep], start: int) -> None:
    page = fold_steps(aligned, start=start)
    assert len(page.rows) <= STEPS_PER_PAGE
    assert page.next is None or page.next == start + STEPS_PER_PAGE < page.total_rows


@given(aligned=paths, data=st.data())
def test_the_strip_is_a_window_holding_the_divergence(aligned: list[AlignedStep],
                                                      data: st.DataObject) -> None:
    divergence = data.draw(st.none() | st.integers(0, max(0, len(aligned) - 1)))
    strip = path_strip(aligned, divergence)
    indexes = [s.index for s in strip.steps]
    assert indexes == list(range(strip.before, len(aligned) - strip.after))
    assert len(indexes) == min(STRIP_STEPS, len(aligned))
    assert divergence is None or not aligned or divergence in indexes
    assert sum(step_counts(aligned).values()) == len(aligned)
