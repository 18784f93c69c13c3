"""The scripted provider's structured output: a JSON document valid against the request's
``response_format`` schema, a pure function of the request.

Supported JSON Schema: ``type`` (one or a list; ``null`` chosen only when it is the only
one), ``properties`` / ``required`` (every declared property is written), ``items`` with
``minItems`` / ``maxItems``, ``enum`` and ``const``, ``anyOf`` / ``oneOf`` (the first
branch), ``minimum`` / ``maximum`` (and the exclusive forms), ``minLength`` /
``maxLength``, string ``format`` ``date`` / ``date-time`` / ``email`` / ``uri``, local
``$ref`` to ``#/$defs/…`` or ``#/definitions/…``. A property the conversation holds a
value for (found as tool arguments are — ``scripted_tools.find_value``) takes that value
when it fits; everything else is drawn from the request's seeded stream: enums pick
deterministically, strings are topic words of the conversation.
"""

from __future__ import annotations

from typing import Any

from forklab.engine.providers.base import Message
from forklab.engine.providers.scripted_text import Stream, topic_words
from forklab.engine.providers.scripted_tools import MISSING, find_value

_FORMATS = {"date": "2026-01-15", "date-time": "2026-01-15T09:30:00Z",
            "email": "support@example.com", "uri": "https://example.com/"}


def document(schema: dict[str, Any], messages: tuple[Message, ...], system_prompt: str,
             stream: Stream) -> Any:
    """A value valid against ``schema`` (see the module docstring)."""
    users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    words = topic_words(users[-1] if users else "", system_prompt)
    return _Filler(schema, messages, words, stream).value(schema, depth=0)


class _Filler:
    def __init__(self, root: dict[str, Any], messages: tuple[Message, ...], words: list[str],
                 stream: Stream) -> None:
        self.root, self.messages, self.words, self.s = root, messages, words, stream

    def resolve(self, schema: Any) -> dict[str, Any]:
        for _ in range(16):
            if not isinstance(schema, dict):
                return {}
            ref = schema.get("$ref")
            if not isinstance(ref, str) or not ref.startswith("#/"):
                break
            target: Any = self.root
            for part in ref[2:].split("/"):
                target = target.get(part, {}) if isinstance(target, dict) else {}
            schema = target
        if isinstance(schema, dict):
            for key in ("anyOf", "oneOf"):
                if isinstance(schema.get(key), list) and schema[key]:
                    return self.resolve({**schema[key][0], **{
                        k: v for k, v in schema.items() if k not in (key, "$ref")}})
            return schema
        return {}

    def value(self, schema: Any, depth: int) -> Any:
        schema = self.resolve(schema)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][self.s.number(len(schema["enum"]))]
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object" or (kind is None and "properties" in schema):
            return self.obj(schema, depth)
        if kind == "array":
            return self.array(schema, depth)
        return self.scalar(kind, schema)

    def obj(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        for name, prop in properties.items():
            if depth > 6 and name not in required:
                continue
            found = find_value(name, self.resolve(prop), self.messages)
            out[name] = found if found is not MISSING else self.value(prop, depth + 1)
        return out

    def array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        low = int(schema.get("minItems", 1 if depth < 4 else 0))
        high = max(low, int(schema.get("maxItems", low + 2)))
        count = low + self.s.number(high - low + 1)
        return [self.value(schema.get("items") or {"type": "string"}, depth + 1)
                for _ in range(count)]

    def scalar(self, kind: Any, schema: dict[str, Any]) -> Any:
        if kind == "boolean":
            return self.s.number(2) == 1
        if kind in ("integer", "number"):
            return self.number(kind, schema)
        if kind == "null":
            return None
        text = _FORMATS.get(str(schema.get("format")), self.s.pick(self.words))
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        text = text.ljust(low, "x")
        return text[:int(high)] if isinstance(high, int) else text

    def number(self, kind: str, schema: dict[str, Any]) -> int | float:
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        high = schema.get("maximum", schema.get("exclusiveMaximum", low + 100))
        low, high = float(low), float(high)
        if "exclusiveMinimum" in schema and "minimum" not in schema:
            low += 1 if kind == "integer" else 0.01
        if "exclusiveMaximum" in schema and "maximum" not in schema:
            high -= 1 if kind == "integer" else 0.01
        if kind == "integer":
            lo, hi = int(-(-low // 1)), int(high // 1)
            return lo + self.s.number(max(1, hi - lo + 1)) if hi >= lo else lo
        return round(low + (high - low) * self.s.number(1001) / 1000, 2)
