"""Reading the log in pages for the stream (forklab.runs.streams.read_page)."""

from __future__ import annotations

import pytest

from forklab.runs.models import Event
from forklab.runs.serializers_json import event_to_json
from forklab.runs.streams import read_page
from tests.ws.conftest import World
from tests.ws.helpers import seqs

pytestmark = pytest.mark.django_db(transaction=True)


def test_pages_carry_the_event_json_shape_of_the_api_and_stop_at_the_last_seq(
        world: World) -> None:
    page = read_page(world.base.id, 3, limit=4)
    expected = Event.objects.filter(run_id=world.base.id, seq__in=[4, 5, 6, 7]).order_by("seq")
    assert page.events == [event_to_json(e) for e in expected]
    assert not page.complete and page.status == "completed"
    last = read_page(world.base.id, world.base.last_seq - 1)
    assert seqs(last.events) == [world.base.last_seq] and last.complete
