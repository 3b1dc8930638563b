"""Strata for agents that already exist: an MCP server and the hooks of coding agents.

A shell, like :mod:`strata.cli`: it reads the environment and the agents'
configuration files, and calls the public :class:`strata.Repository` API.

- :mod:`strata.integrations.mcp_server`: ``strata mcp``, the Model Context
  Protocol server (stdio, or streamable HTTP on 127.0.0.1 behind a token).
- :mod:`strata.integrations.hooks`: what Claude Code, Codex CLI and Aider send
  their hooks, turned into a snapshot (``strata hook claude-code|codex|aider``).
- :mod:`strata.integrations.install`: ``strata hook install``, which writes each
  agent's configuration, idempotently, showing the diff.
- :mod:`strata.integrations.fasthook`: the start of ``strata hook`` that hands the
  snapshot to the workspace's watcher (standard library only).
- :mod:`strata.integrations.langgraph`: ``StrataSaver``, a LangGraph checkpointer
  that keeps each checkpoint beside a snapshot of the workspace (the ``langgraph``
  extra).
- :mod:`strata.integrations.openai_agents`: ``StrataHooks``, run hooks of the OpenAI
  Agents SDK that snapshot the workspace after every tool call (the
  ``openai-agents`` extra).

This package's ``__init__`` imports nothing: ``fasthook`` runs before the rest of Strata.
"""
