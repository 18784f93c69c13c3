"""Outside a workflow the recorded clients behave exactly as before; instrument() is
idempotent; a client's other endpoints pass through unrecorded."""

from __future__ import annotations

import openai

import forklab
from forklab.engine.workflow_node import current_scope
from tests.vendor_stub import VendorStub


def test_instrument_twice_wraps_a_clients_send_once_and_outside_a_run_nothing_changes(
        stub: VendorStub) -> None:
    forklab.instrument()
    forklab.instrument()
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-x", max_retries=0)
    send = client._client.send
    forklab.instrument()
    assert openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-x")._client.send is not send
    assert client._client.send is send  # not wrapped again
    assert current_scope() is None
    reply = client.chat.completions.create(model="gpt-4.1-mini",
                                           messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "You said: hi"
    assert reply.id == "chatcmpl-stub"  # the vendor's own answer, untouched
    client.close()
