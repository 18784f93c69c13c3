"""bench/instructions.py counts what runs inside its toggle, and only that.

The tool's figures are only worth reading if callgrind's collection really is off outside
``functools.reduce`` and on inside it — a Python build that renamed the C function would
silently count nothing. So this runs valgrind for real, on a bare interpreter (a few
seconds), with the same work inside and then outside the toggle. Skipped where valgrind is
not installed.
"""

from __future__ import annotations

import shutil
import sys

import pytest

from bench import instructions

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None,
                                reason="valgrind is not installed")

WORK = "sum(range(200_000))"


def _python(code: str) -> list[str]:
    return [sys.executable, "-S", "-c", f"import functools\n{code}"]


def test_only_the_work_inside_the_toggle_is_counted() -> None:
    inside = instructions.count_instructions(
        _python(f"functools.reduce(lambda _, __: {WORK}, [None], None)"))
    outside = instructions.count_instructions(
        _python(f"{WORK}\nfunctools.reduce(lambda _, __: None, [None], None)"))
    # 200,000 additions cost well over 10 instructions each; the empty reduce a few thousand
    assert inside > 2_000_000
    assert outside < inside // 100


def test_a_failing_child_is_reported_not_counted() -> None:
    with pytest.raises(SystemExit, match="the measured child failed"):
        instructions.count_instructions(_python("raise SystemExit(3)"))


def test_the_child_records_once_in_process() -> None:
    calls: list[None] = []
    instructions._counted(lambda: calls.append(None))
    assert calls == [None]
    instructions.main(["--child", "record", "chain", "3"])  # what valgrind would run


def test_options_are_read_and_bad_ones_refused() -> None:
    assert instructions._options(["DIR", "last", "--runs", "3"]) == (
        ["DIR", "last"], {"--warm": 0, "--runs": 3})
    with pytest.raises(SystemExit):
        instructions._options(["DIR", "--fast"])
    with pytest.raises(SystemExit):
        instructions.main(["fork", "DIR", "sideways"])
