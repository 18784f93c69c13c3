"""The Run model's choices are the engine's words (one set from the fold to the API)."""

from forklab.engine.status import RunKind, RunStatus
from forklab.runs.models import Run


def test_run_choices_are_the_engine_words():
    status = Run._meta.get_field("status")
    kind = Run._meta.get_field("run_kind")
    assert [value for value, _ in status.choices] == RunStatus.values()
    assert [value for value, _ in kind.choices] == RunKind.values()
    assert status.default == "queued" and kind.default == "primary"
    assert dict(status.choices)["cancelled"] == "Cancelled"  # Django's label, unchanged
