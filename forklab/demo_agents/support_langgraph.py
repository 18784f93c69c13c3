"""The support agent as a LangGraph ``StateGraph`` over langchain-openai (the ``langgraph``
extra): a model node and a tool node in a loop, written as LangGraph's docs write it. Its
model calls go through the official ``openai`` client, so they are recorded unchanged; its
nodes (``agent``, ``tools``) are the run's steps."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import tool as lc_tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import forklab
from forklab.demo_agents import support


@lc_tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    return support.lookup_order(order_id)


@lc_tool
def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an order (money leaves the company)."""
    return support.issue_refund(order_id, amount)


def compile_graph(llm: Any) -> Any:
    """The agent's graph around a LangChain chat model (any vendor's)."""
    tools = [lookup_order, issue_refund]
    bound = llm.bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def answer(graph: Any, ticket: str) -> str:
    """Run the compiled graph on a ticket; the last message's text (a vendor's content
    blocks joined)."""
    final = graph.invoke({"messages": [("system", support.SYSTEM), ("user", ticket)]})
    content = final["messages"][-1].content
    return content if isinstance(content, str) else "".join(
        part.get("text", "") for part in content if isinstance(part, dict))


@forklab.workflow("support_langgraph")
def support_langgraph(ticket: str, model: str = "gpt-4.1-mini") -> str:
    """The support agent as a LangGraph graph."""
    return answer(compile_graph(ChatOpenAI(model=model, max_retries=0)), ticket)
