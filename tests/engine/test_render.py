"""A node's prompt (``nodes.render``): every ``{key}`` placeholder filled from the read slice
— a string as it is, anything else as canonical JSON, an absent key as nothing — and every
other character kept, for any template (what the substitution it replaced wrote)."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine.canonical import canonical_json
from forklab.engine.nodes import render

_KEYS = st.sampled_from(["a", "b", "w0", "_x", "long_key_9"])
_PIECES = st.lists(
    st.one_of(_KEYS.map(lambda k: "{" + k + "}"),
              st.sampled_from(["{", "}", "{{a}}", "{1x}", "{ a}", "\n", "{a", "b}", "{}"]),
              st.text(max_size=6)),
    max_size=12)
_VALUES = st.one_of(st.text(max_size=5), st.integers(), st.none(), st.booleans(),
                    st.lists(st.integers(), max_size=2),
                    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


def _reference(template: str, reads: dict[str, Any]) -> str:
    def value(match: re.Match[str]) -> str:
        v = reads.get(match.group(1), "")
        return v if isinstance(v, str) else canonical_json(v)

    return re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", value, template)


@given(_PIECES, st.dictionaries(_KEYS, _VALUES, max_size=5))
def test_render_fills_each_placeholder_and_keeps_the_rest(pieces: list[str],
                                                          reads: dict[str, Any]) -> None:
    template = "".join(pieces)
    if template:
        assert render(template, reads) == _reference(template, reads)
        assert render(template, reads) == _reference(template, reads)  # the split, kept


def test_an_empty_template_is_the_read_slice_as_canonical_json() -> None:
    assert render("", {"b": 1, "a": None}) == canonical_json({"b": 1, "a": None})


def test_a_join_of_a_thousand_branches_lists_each_answer_in_its_place() -> None:
    template = "\n".join("{w" + str(i) + "}" for i in range(1000))
    reads = {f"w{i}": f"answer {i}" for i in range(1000)}
    assert render(template, reads).split("\n") == [f"answer {i}" for i in range(1000)]
