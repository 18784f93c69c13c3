"""Server-sent events, as the vendors stream them: read a whole stream, write one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def events(raw: bytes) -> Iterator[tuple[str | None, Any]]:
    """``(event name, decoded data)`` of each event in ``raw`` (``[DONE]`` left out)."""
    for block in raw.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        text = "\n".join(data)
        if not text or text == "[DONE]":
            continue
        try:
            yield name, json.loads(text)
        except ValueError:
            continue


def encode(items: list[tuple[str | None, Any]], done: bool = False) -> bytes:
    """A stream of ``(event name, data)``; ``done``: end with ``data: [DONE]`` (OpenAI)."""
    out = []
    for name, data in items:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(data)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


__all__ = ["encode", "events"]
