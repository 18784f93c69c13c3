"""The support agent written with agent frameworks, unchanged but for the decorator: the
OpenAI Agents SDK (Responses API over AsyncOpenAI), PydanticAI (Chat Completions over
AsyncOpenAI) and LangGraph over langchain-anthropic (the Messages API over the official
``anthropic`` client). Each reaches the vendor through an official client, so each is
recorded."""

from __future__ import annotations

from typing import Any

import forklab
from forklab.demo_agents import support


@forklab.workflow("support_agents_sdk")
def support_agents_sdk(ticket: str) -> str:
    from agents import Agent, Runner, function_tool

    @function_tool
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order by its id."""
        return support.lookup_order(order_id)

    @function_tool
    def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund an order (money leaves the company)."""
        return support.issue_refund(order_id, amount)

    agent = Agent(name="support", instructions=support.SYSTEM, model="gpt-4.1-mini",
                  tools=[lookup_order, issue_refund])
    return str(Runner.run_sync(agent, ticket).final_output)


@forklab.workflow("support_pydantic_ai")
def support_pydantic_ai(ticket: str) -> str:
    from pydantic_ai import Agent

    agent = Agent("openai:gpt-4.1-mini", instructions=support.SYSTEM)

    @agent.tool_plain
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order by its id."""
        return support.lookup_order(order_id)

    @agent.tool_plain
    def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund an order (money leaves the company)."""
        return support.issue_refund(order_id, amount)

    return str(agent.run_sync(ticket).output)


@forklab.workflow("support_langgraph_anthropic")
def support_langgraph_anthropic(ticket: str) -> str:
    """forklab.demo_agents.support_langgraph's graph, its model ChatAnthropic."""
    from langchain_anthropic import ChatAnthropic

    from forklab.demo_agents.support_langgraph import answer, compile_graph

    llm = ChatAnthropic(model_name="claude-sonnet-4-5", max_retries=0, timeout=30,
                        stop=None)  # stop, timeout: required by its typing
    return answer(compile_graph(llm), ticket)
