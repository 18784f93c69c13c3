"""Small workflows for the tests (allowed under ``tests.sdk.`` by the tests' environment)."""

from __future__ import annotations

import json
import random
from typing import Any

import openai

import forklab

EDITION = {"prompt": "Be brief."}
"""What the code asks with: a test edits it between recording and forking (changed code)."""


@forklab.workflow("two_step")
def two_step(question: str) -> dict[str, Any]:
    client = openai.OpenAI()
    with forklab.step("draft"):
        draft = client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "system", "content": EDITION["prompt"]},
                                            {"role": "user", "content": question}])
    with forklab.step("review"):
        review = client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": "Check: "
                                             + (draft.choices[0].message.content or "")}])
    return {"draft": draft.choices[0].message.content,
            "review": review.choices[0].message.content}


@forklab.workflow("dice")
def dice(question: str) -> str:
    client = openai.OpenAI()
    reply = client.chat.completions.create(
        model="gpt-4.1-mini",
        messages=[{"role": "user", "content": f"{question} (roll {random.random()})"}])
    return reply.choices[0].message.content or ""


@forklab.workflow("broken")
def broken(question: str) -> str:
    client = openai.OpenAI()
    client.chat.completions.create(model="gpt-4.1-mini",
                                   messages=[{"role": "user", "content": question}])
    raise KeyError("the code's own bug")


@forklab.workflow("responses")
def responses(question: str) -> str:
    client = openai.OpenAI()
    reply = client.responses.create(model="gpt-4.1-mini", instructions="Be brief.",
                                    input=question)
    return reply.output_text


def undecorated(question: str) -> str:
    return question


@forklab.workflow("responses_tools")
def responses_tools(ticket: str) -> str:
    """The support loop over the Responses API, feeding the output items back."""
    from forklab.demo_agents.support import DESCRIPTIONS, PARAMETERS, TOOLS

    client = openai.OpenAI()
    tools: Any = [{"type": "function", "name": n, "description": DESCRIPTIONS[n],
                   "parameters": p} for n, p in PARAMETERS.items()]
    items: list[Any] = [{"role": "user", "content": ticket}]
    for _ in range(4):
        reply = client.responses.create(model="gpt-4.1-mini", input=items, tools=tools)
        calls = [o for o in reply.output if o.type == "function_call"]
        if not calls:
            return reply.output_text
        items += [o.model_dump(exclude_none=True) for o in reply.output]
        for call in calls:
            result = TOOLS[call.name](**json.loads(call.arguments))
            items.append({"type": "function_call_output", "call_id": call.call_id,
                          "output": json.dumps(result)})
    return "gave up"


@forklab.workflow("responses_stream")
def responses_stream(question: str) -> str:
    client = openai.OpenAI()
    text = ""
    for event in client.responses.create(model="gpt-4.1-mini", input=question, stream=True):
        if event.type == "response.completed":
            text = event.response.output_text
    return text


@forklab.workflow("crash")
def crash(question: str) -> str:
    return str(len(question) / 0)


@forklab.tool
def echo(value: Any) -> Any:
    return value


@forklab.workflow("odd_tool")
def odd_tool(question: str) -> str:
    try:
        echo(object())  # not JSON: the node fails, whatever the code catches
    except Exception:
        return "swallowed"
    return "unreachable"


@forklab.workflow("careful_refund")
def careful_refund(order_id: str, amount: float) -> str:
    from forklab.demo_agents.support import issue_refund

    try:
        return str(issue_refund(order_id, amount)["status"])
    except Exception as exc:  # code that catches everything must not swallow the guard
        return f"caught {type(exc).__name__}"


@forklab.workflow("claude_async")
async def claude_async(question: str) -> list[str]:
    import anthropic

    client = anthropic.AsyncAnthropic()
    plain = await client.messages.create(model="claude-sonnet-4-5", max_tokens=100,
                                         messages=[{"role": "user", "content": question}])
    async with client.messages.stream(model="claude-sonnet-4-5", max_tokens=100, messages=[
            {"role": "user", "content": question + "?"}]) as stream:
        streamed = [text async for text in stream.text_stream]
    return ["".join(b.text for b in plain.content if b.type == "text"), "".join(streamed)]


@forklab.workflow("gather_two")
async def gather_two(question: str) -> list[str]:
    import asyncio

    client = openai.AsyncOpenAI()

    async def ask(text: str) -> str:
        reply = await client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": text}])
        return reply.choices[0].message.content or ""

    return list(await asyncio.gather(*(ask(f"{question} {i}") for i in range(4))))


@forklab.workflow("responses_helper")
def responses_helper(question: str) -> str:
    client = openai.OpenAI()
    with client.responses.stream(model="gpt-4.1-mini", input=question) as stream:
        return stream.get_final_response().output_text


@forklab.tool
async def summarize(text: str) -> str:
    client = openai.AsyncOpenAI()
    reply = await client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": f"Summarize: {text}"}])
    return reply.choices[0].message.content or ""


@forklab.workflow("nested_async")
async def nested_async(question: str) -> str:
    return str(await summarize(question))


@forklab.workflow("echo_then_ask")
def echo_then_ask(question: str) -> str:
    """A tool call, then a model call: a test edits ``EDITION["order"]`` (changed code)."""
    order = echo({"order": EDITION.get("order", "A-1001")})
    client = openai.OpenAI()
    reply = client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": f"{question} {order}"}])
    return reply.choices[0].message.content or ""


@forklab.workflow("dice_twice")
def dice_twice(question: str) -> str:
    """A call asking something random, then a fixed one (a point stands between them)."""
    client = openai.OpenAI()
    client.chat.completions.create(
        model="gpt-4.1-mini",
        messages=[{"role": "user", "content": f"{question} (roll {random.random()})"}])
    reply = client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": question}])
    return reply.choices[0].message.content or ""


@forklab.workflow("careful_openai")
def careful_openai(question: str, stream: bool = False) -> str:
    """Code that handles the vendor's errors itself, as it would without forklab."""
    client = openai.OpenAI(max_retries=2)
    messages: Any = [{"role": "user", "content": question}]
    try:
        if stream:
            chunks = client.chat.completions.create(model="gpt-4.1-mini", messages=messages,
                                                    stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        reply = client.chat.completions.create(model="gpt-4.1-mini", messages=messages)
    except openai.APIStatusError as exc:
        return f"{type(exc).__name__} {exc.status_code}: {exc.message}"
    return reply.choices[0].message.content or ""


@forklab.workflow("careful_claude")
async def careful_claude(question: str) -> str:
    import anthropic

    client = anthropic.AsyncAnthropic(max_retries=1)
    try:
        reply = await client.messages.create(model="claude-sonnet-4-5", max_tokens=100,
                                             messages=[{"role": "user", "content": question}])
    except anthropic.APIStatusError as exc:
        return f"{type(exc).__name__} {exc.status_code}: {exc.message}"
    return "".join(b.text for b in reply.content if b.type == "text")
