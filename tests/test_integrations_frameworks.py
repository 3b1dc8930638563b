"""Python agent frameworks without glue: LangGraph's checkpointer and the OpenAI Agents SDK's hooks.

Both run for real: a LangGraph graph whose nodes edit files, checkpointed by
``StrataSaver``, travelling back through its history; an Agents SDK agent
whose model is the scripted endpoint of ``wire_server`` on 127.0.0.1, its
function tools writing files, recorded by ``StrataHooks``.
"""

from __future__ import annotations

import asyncio
import json
import operator
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict, TypeVar

import httpx
import pytest
from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from openai import AsyncOpenAI

from strata import Repository, UsageError
from strata.integrations.langgraph import StrataSaver, operation_of
from strata.integrations.openai_agents import StrataHooks
from strata.ledger.events import Event
from wire_server import WireServer, text, tools

SYNC = {"durability": "sync"}
T = TypeVar("T")


def files(root: Path) -> dict[str, str]:
    """Every file of the workspace (but the repository's) and its text."""
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".strata" not in p.relative_to(root).parts
    }


# -- LangGraph ---------------------------------------------------------------------------


class Story(TypedDict, total=False):
    n: int
    seen: Annotated[list[tuple[str, dict[str, str]]], operator.add]
    """each node's name and the files it found when it started"""
    big: str


def story_graph(ws: Path) -> StateGraph[Story]:
    """draft -> review -> publish, each editing files and noting the files it found."""

    def draft(state: Story) -> Story:
        seen = files(ws)
        (ws / "story.md").write_text(f"draft {state['n']}\n")
        return {"n": state["n"] + 1, "seen": [("draft", seen)]}

    def review(state: Story) -> Story:
        seen = files(ws)
        with open(ws / "story.md", "a") as f:
            f.write(f"reviewed at {state['n']}\n")
        (ws / "notes.txt").write_text("looks fine\n")
        return {"n": state["n"] * 10, "seen": [("review", seen)]}

    def publish(state: Story) -> Story:
        seen = files(ws)
        (ws / "notes.txt").unlink()
        (ws / "out").mkdir(exist_ok=True)
        (ws / "out" / "final.md").write_text((ws / "story.md").read_text() + f"n={state['n']}\n")
        return {"n": state["n"] + 5, "seen": [("publish", seen)]}

    builder: StateGraph[Story] = StateGraph(Story)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_node("publish", publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder


AFTER_DRAFT = {"README.md": "hello\n", "story.md": "draft 1\n"}
FINAL = {
    "README.md": "hello\n",
    "out/final.md": "draft 1\nreviewed at 2\nn=20\n",
    "story.md": "draft 1\nreviewed at 2\n",
}


@pytest.fixture
def saver(repo: Repository) -> Iterator[StrataSaver]:
    (repo.root / "README.md").write_text("hello\n")
    with StrataSaver(repo, author="story-graph") as made:
        yield made


def test_time_travel_brings_the_files_back_with_the_state(
    repo: Repository, saver: StrataSaver
) -> None:
    ws = repo.root
    graph = story_graph(ws).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "t1"}}
    out = graph.invoke({"n": 1, "seen": []}, config, **SYNC)
    assert out["n"] == 25 and files(ws) == FINAL
    # the person's README was recorded as theirs before the graph's first node ran
    first = repo.history()[-1]
    assert (first.author.name, first.author.kind, first.files) == (
        "tester",
        "human",
        ("README.md",),
    )

    history = list(graph.get_state_history(config))
    assert [h.next for h in history] == [(), ("publish",), ("review",), ("draft",), ("__start__",)]
    before_review = history[2]
    assert before_review.values["n"] == 2

    # resume from the checkpoint before 'review': its files are back before review runs
    resumed = graph.invoke(None, before_review.config, **SYNC)
    assert resumed["seen"][-2] == ("review", AFTER_DRAFT)
    assert resumed["n"] == 25 and files(ws) == FINAL

    # fork it: update_state puts its files back at once, the new state goes on from there
    (ws / "story.md").write_text("edited by hand\n")  # unrecorded: auto-saved by the rewind
    forked = graph.update_state(before_review.config, {"n": 7})
    assert files(ws) == AFTER_DRAFT
    assert graph.get_state(forked).values["n"] == 7
    out = graph.invoke(None, forked, **SYNC)
    assert out["seen"][-2] == ("review", AFTER_DRAFT)
    assert out["n"] == 75
    assert files(ws)["out/final.md"] == "draft 1\nreviewed at 7\nn=70\n"

    # nothing was lost: the hand edit and the first run's end are both in history
    saved = [e for e in repo.history(action="auto_save") if "story.md" in e.files]
    assert repo.show(saved[0].id, "story.md") == b"edited by hand\n"
    graph_events = repo.history(operation=operation_of("t1"), action="snapshot")
    assert {e.author.name for e in graph_events} == {"story-graph"}
    assert {e.author.kind for e in graph_events} == {"agent"}
    assert graph_events[-1].rationale == "LangGraph step 1: draft (thread t1)"  # the oldest
    finals = [e for e in graph_events if "out/final.md" in e.files]
    assert len(finals) == 3  # the first run, the resume, the fork
    assert repo.show(finals[-1].id, "out/final.md") == FINAL["out/final.md"].encode()


def test_undo_after_a_graph_run_reverses_its_last_step(
    repo: Repository, saver: StrataSaver
) -> None:
    ws = repo.root
    graph = story_graph(ws).compile(checkpointer=saver)
    graph.invoke({"n": 1, "seen": []}, {"configurable": {"thread_id": "u"}}, **SYNC)
    (ws / "README.md").write_text("mine\n")  # unrecorded: undo leaves it alone
    repo.undo()  # steps over the checkpoint records: the publish step goes back
    assert files(ws) == {
        "README.md": "mine\n",
        "notes.txt": "looks fine\n",
        "story.md": "draft 1\nreviewed at 2\n",
    }


def test_a_copy_made_by_update_state_holds_the_files_as_they_are(
    repo: Repository, saver: StrataSaver
) -> None:
    ws = repo.root
    graph = story_graph(ws).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "copy"}}
    graph.invoke({"n": 1, "seen": []}, config, **SYNC)
    graph.invoke(None, config, **SYNC)  # a run that goes on from the newest: nothing to do
    (ws / "README.md").write_text("edited after the runs\n")
    copy = graph.update_state(config, None, as_node="__copy__")
    graph.invoke({"n": 1, "seen": []}, config, **SYNC)  # the thread moves on
    assert files(ws)["README.md"] == "edited after the runs\n"
    (ws / "README.md").write_text("edited again\n")
    # going on from the copy (no longer the newest) puts back the files it was made with
    graph.update_state(copy, {"n": 0})
    assert files(ws) == {**FINAL, "README.md": "edited after the runs\n"}


def test_async_graphs_travel_too(repo: Repository, saver: StrataSaver) -> None:
    ws = repo.root
    graph = story_graph(ws).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "async"}}

    async def travel() -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
        await graph.ainvoke({"n": 1, "seen": []}, config, **SYNC)
        history = [h async for h in graph.aget_state_history(config)]
        before_review = next(h for h in history if h.next == ("review",))
        forked = await graph.aupdate_state(before_review.config, {"n": 3})
        at_fork = files(ws)
        return forked, at_fork, await graph.ainvoke(None, forked, **SYNC)

    forked, at_fork, out = asyncio.run(travel())
    assert at_fork == AFTER_DRAFT
    assert out["seen"][-2] == ("review", AFTER_DRAFT)
    assert files(ws)["out/final.md"] == "draft 1\nreviewed at 3\nn=30\n"
    assert graph.get_state(forked).values["n"] == 3


def test_a_graph_run_with_async_durability_is_refused_before_it_starts(
    repo: Repository, saver: StrataSaver
) -> None:
    ws = repo.root
    graph = story_graph(ws).compile(checkpointer=saver)
    with pytest.raises(UsageError, match="durability='sync'"):
        graph.invoke({"n": 1, "seen": []}, {"configurable": {"thread_id": "t"}})
    assert files(ws) == {"README.md": "hello\n"}  # no node ran
    assert repo.history() == []


def test_checkpoints_live_in_the_repository_and_survive_gc(repo: Repository, ws: Path) -> None:
    (ws / "README.md").write_text("hello\n")
    big = "x" * 20_000  # stored once as an object, however many checkpoints hold it
    config: Any = {"configurable": {"thread_id": "kept"}}
    with StrataSaver(ws) as first:
        graph = story_graph(ws).compile(checkpointer=first)
        graph.invoke({"n": 1, "seen": [], "big": big}, config, **SYNC)
    checkpoints = [e for e in repo.history(operation=operation_of("kept")) if e.data.get("label")]
    assert len(checkpoints) == 5
    # the big value is one object of the store, named by every checkpoint that holds it
    refs = [e.data["langgraph"]["values"].get("big") for e in checkpoints]
    objects = {r["object"] for r in refs if r is not None}
    assert len(objects) == 1 and len([r for r in refs if r is not None]) == 4
    (big_object,) = objects
    assert repo.objects.get(big_object).count(b"x") == 20_000
    assert all(big_object in e.artifacts for e, r in zip(checkpoints, refs, strict=True) if r)
    assert "base64" in checkpoints[0].data["langgraph"]["values"]["n"]  # small: in the event

    repo.gc(grace_s=0)
    with StrataSaver(ws) as second:  # another saver, another Repository: all from disk
        graph = story_graph(ws).compile(checkpointer=second)
        state = graph.get_state(config)
        assert state.values["n"] == 25 and state.values["big"] == big
        assert [n for n, _ in state.values["seen"]] == ["draft", "review", "publish"]
        history = list(graph.get_state_history(config))
        assert len(history) == 5
        out = graph.invoke(None, history[2].config, **SYNC)
        assert out["seen"][-2] == ("review", AFTER_DRAFT) and out["big"] == big


def test_an_interrupt_is_answered_from_another_process(repo: Repository, ws: Path) -> None:
    def ask(state: Story) -> Story:
        answer = interrupt("publish?")
        (ws / "answer.txt").write_text(f"{answer}\n")
        return {"n": state["n"] + 1}

    builder: StateGraph[Story] = StateGraph(Story)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    config: Any = {"configurable": {"thread_id": "ask"}}
    with StrataSaver(ws) as first:
        out = builder.compile(checkpointer=first).invoke({"n": 1}, config, **SYNC)
    assert out["__interrupt__"][0].value == "publish?"
    assert not (ws / "answer.txt").exists()
    with StrataSaver(ws) as second:  # the interrupt's write is read back from the ledger
        graph = builder.compile(checkpointer=second)
        out = graph.invoke(Command(resume="yes"), config, **SYNC)
    assert out["n"] == 2 and (ws / "answer.txt").read_text() == "yes\n"
    events = repo.history(operation=operation_of("ask"), action="snapshot")
    assert [(e.author.kind, e.files) for e in events] == [("agent", ("answer.txt",))]


def test_a_failed_step_keeps_the_writes_of_the_nodes_that_succeeded(
    repo: Repository, ws: Path
) -> None:
    """Going on after a failure runs only the node that failed: the others' writes are kept."""
    fail = [True]

    def steady(state: Story) -> Story:
        with open(ws / "steady.log", "a") as f:
            f.write("ran\n")
        return {"seen": [("steady", {})]}

    def flaky(state: Story) -> Story:
        if fail[0]:
            raise RuntimeError("flaky failed")
        (ws / "flaky.txt").write_text("done\n")
        return {"seen": [("flaky", {})]}

    builder: StateGraph[Story] = StateGraph(Story)
    builder.add_node("steady", steady)
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "steady")
    builder.add_edge(START, "flaky")
    config: Any = {"configurable": {"thread_id": "retry"}}
    with StrataSaver(ws) as first, pytest.raises(RuntimeError, match="flaky failed"):
        builder.compile(checkpointer=first).invoke({"n": 1, "seen": []}, config, **SYNC)
    fail[0] = False
    with StrataSaver(ws) as second:  # the steady node's writes come back from the ledger
        out = builder.compile(checkpointer=second).invoke(None, config, **SYNC)
    assert sorted(name for name, _ in out["seen"]) == ["flaky", "steady"]
    assert (ws / "steady.log").read_text() == "ran\n"  # not run again
    assert (ws / "flaky.txt").read_text() == "done\n"


def test_the_persons_edits_between_runs_are_theirs(repo: Repository, saver: StrataSaver) -> None:
    ws = repo.root
    graph = story_graph(ws).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"n": 1, "seen": []}, config, **SYNC)
    (ws / "README.md").write_text("hello, edited\n")
    graph.invoke({"n": 2, "seen": []}, config, **SYNC)  # new input: the files stay
    newest = repo.history(limit=30)
    mine = [e for e in newest if e.author.kind == "human" and e.is_state]
    assert [e.files for e in mine[:1]] == [("README.md",)]
    assert mine[0].rationale == "changes made outside the agent"
    draft = next(e for e in newest if e.rationale.startswith("LangGraph step 1: draft"))
    assert draft.files == ("story.md",)
    assert files(ws)["README.md"] == "hello, edited\n"


# -- the OpenAI Agents SDK ---------------------------------------------------------------


@pytest.fixture
def endpoint() -> Iterator[WireServer]:
    """The scripted model endpoint on 127.0.0.1."""
    set_tracing_disabled(True)
    with WireServer() as wire:
        yield wire


def run_agent(wire: WireServer, main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main`` with ``wire`` as the Agents SDK's default client (closed at the end)."""

    async def go() -> T:
        async with AsyncOpenAI(base_url=wire.openai_url, api_key="sk-test", max_retries=0) as c:
            set_default_openai_client(c, use_for_tracing=False)
            return await main()

    return asyncio.run(go())


def writer(ws: Path) -> Agent[Any]:
    @function_tool
    def write_file(path: str, text: str) -> str:
        """Write ``text`` into the file ``path`` of the workspace."""
        (ws / path).write_text(text)
        return f"wrote {path}"

    return Agent(name="Scribe", instructions="Write files.", tools=[write_file], model="gpt-test")


def calls(*specs: tuple[str, str], prefix: str) -> Any:
    return tools(*(("write_file", {"path": p, "text": t}) for p, t in specs), call_prefix=prefix)


def agent_events(repo: Repository) -> list[Event]:
    return [e for e in reversed(repo.history()) if e.author.kind == "agent"]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_every_tool_call_is_an_event_of_the_agent(
    repo: Repository, endpoint: WireServer, streamed: bool
) -> None:
    ws = repo.root
    (ws / "README.md").write_text("by hand\n")  # the person's, before the agent's first call
    endpoint.queue(
        calls(("a.txt", "A"), prefix="first"),
        calls(("b.txt", "B"), ("c.txt", "C"), prefix="second"),  # two calls in one answer
        text("done"),
    )
    agent = writer(ws)

    async def run() -> Any:
        if not streamed:
            return (await Runner.run(agent, "write", hooks=StrataHooks(repo))).final_output
        result = Runner.run_streamed(agent, "write", hooks=StrataHooks(repo))
        async for _ in result.stream_events():
            pass
        return result.final_output

    assert run_agent(endpoint, run) == "done"
    assert {r.body.get("stream") is True for r in endpoint.requests} == {streamed}
    events = agent_events(repo)
    assert [(e.author.name, e.files) for e in events] == [
        ("Scribe", ("a.txt",)),
        ("Scribe", ("b.txt",)),
        ("Scribe", ("c.txt",)),
    ]
    assert events[0].rationale == 'write_file {"path": "a.txt", "text": "A"}'
    assert [e.data["tool_call_id"] for e in events] == ["first_1", "second_1", "second_2"]
    person = [e for e in repo.history() if e.author.kind == "human"]
    assert [(e.files, e.rationale) for e in person] == [
        (("README.md",), "changes made outside the agent")
    ]


def test_undo_after_a_tool_call_reverses_that_call(repo: Repository, endpoint: WireServer) -> None:
    ws = repo.root
    endpoint.queue(
        calls(("a.txt", "A"), prefix="one"), calls(("b.txt", "B"), prefix="two"), text("done")
    )
    run_agent(endpoint, lambda: Runner.run(writer(ws), "write", hooks=StrataHooks(repo)))
    assert files(ws) == {"a.txt": "A", "b.txt": "B"}
    repo.undo()
    assert files(ws) == {"a.txt": "A"}


def test_a_tool_call_that_fails_frees_the_agents_turn(
    repo: Repository, endpoint: WireServer
) -> None:
    ws = repo.root

    @function_tool(failure_error_function=None)  # its error ends the run: no on_tool_end
    def explode() -> str:
        """Fail."""
        raise RuntimeError("the tool broke")

    agent = writer(ws)
    agent.tools.append(explode)
    endpoint.queue(tools(("explode", {}), call_prefix="boom"))
    endpoint.queue(calls(("a.txt", "A"), prefix="after"), text("done"))
    hooks = StrataHooks(repo)

    async def twice() -> Any:
        with pytest.raises(Exception, match="the tool broke"):
            await Runner.run(agent, "explode", hooks=hooks)
        # the same agent, the same event loop: its next call gets its turn
        return await asyncio.wait_for(Runner.run(agent, "write", hooks=hooks), 30)

    assert run_agent(endpoint, twice).final_output == "done"
    assert [e.files for e in agent_events(repo)] == [("a.txt",)]


def test_a_tool_call_that_changes_nothing_records_nothing(
    repo: Repository, endpoint: WireServer
) -> None:
    ws = repo.root
    endpoint.queue(calls(("a.txt", "A"), prefix="one"), calls(("a.txt", "A"), prefix="two"))
    endpoint.queue(text("done"))
    hooks = StrataHooks(ws)
    run_agent(endpoint, lambda: Runner.run(writer(ws), "write", hooks=hooks))
    hooks.close()
    assert [e.files for e in agent_events(repo)] == [("a.txt",)]


# -- the extras ----------------------------------------------------------------------------


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_importing_strata_imports_neither_framework() -> None:
    done = python(
        "import json, sys, strata\n"
        "strata.Repository, strata.AsyncRepository, strata.ExtraNotInstalled\n"
        "import strata.integrations\n"
        "print(json.dumps(sorted(m for m in ('langgraph', 'agents') if m in sys.modules)))"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("strata.integrations.langgraph", "langgraph", "langgraph"),
        ("strata.integrations.openai_agents", "agents", "openai-agents"),
    ],
)
def test_a_missing_framework_names_the_extra_to_install(
    module: str, package: str, extra: str
) -> None:
    hidden = f"import sys; sys.modules[{package!r}] = None\n"
    done = python(
        hidden + "from strata import ExtraNotInstalled\n"
        f"try:\n    import {module}\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, isinstance(exc, ExtraNotInstalled), exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"ExtraNotInstalled True {module} needs the '{extra}' extra ({package} is not "
        f"installed): pip install 'strata-workspace[{extra}]'"
    )
    bare = python(hidden + f"import {module}")
    assert bare.returncode == 1
    assert f"pip install 'strata-workspace[{extra}]'" in bare.stderr.splitlines()[-1]
    assert "ModuleNotFoundError" not in bare.stderr


def test_the_extras_are_declared_and_in_the_test_extra() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    assert any(d.startswith("langgraph>=") and "<" in d for d in extras["langgraph"])
    assert any(d.startswith("openai-agents>=") and "<" in d for d in extras["openai-agents"])

    def pulled(extra: str) -> set[str]:  # the extras an extra names, its own included
        names = {extra}
        for d in extras[extra]:
            if d.startswith("strata-workspace["):
                for inner in d.split("[", 1)[1].rstrip("]").split(","):
                    names |= pulled(inner.strip())
        return names

    assert {"langgraph", "openai-agents"} <= pulled("test")


def doc_example(section: str) -> str:
    """The Python example of ``section`` in docs/integrations.md."""
    text = (Path(__file__).parents[1] / "docs" / "integrations.md").read_text()
    part = text.split(f"\n## {section}", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", part, flags=re.S)
    assert len(code.splitlines()) < 10, f"the {section} example is 10 lines or more"
    return str(code)


def test_the_langgraph_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_repo: Callable[..., Repository]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    make_repo(project)

    def count(state: Story) -> Story:
        (project / "count.txt").write_text(f"{state['n']}\n")
        return {"n": state["n"] + 1}

    builder: StateGraph[Story] = StateGraph(Story)
    builder.add_node("one", count)
    builder.add_node("two", count)
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", END)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"builder": builder}
    exec(doc_example("LangGraph"), namespace)
    # the fork went on from before 'one' with n=7: one wrote 7, two wrote 8
    assert namespace["graph"].get_state(namespace["config"]).values["n"] == 9
    assert (project / "count.txt").read_text() == "8\n"
    namespace["graph"].checkpointer.close()


def test_the_agents_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: WireServer
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    Repository.init(project).close()
    endpoint.queue(calls(("README.md", "tidy\n"), prefix="one"), text("tidied"))
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"agent": writer(project)}
    # run_sync runs its own event loop: a client that keeps no connection open between calls
    keeps_none = httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0))
    client = AsyncOpenAI(
        base_url=endpoint.openai_url, api_key="sk-test", max_retries=0, http_client=keeps_none
    )
    set_default_openai_client(client, use_for_tracing=False)
    try:
        exec(doc_example("OpenAI Agents SDK"), namespace)
    finally:
        # run_sync runs on the thread's default event loop and leaves it open: closed here,
        # or the collector finds it (and its sockets) during a later test
        loop = asyncio.get_event_loop_policy().get_event_loop()
        loop.close()
        asyncio.set_event_loop(None)
    assert namespace["result"].final_output == "tidied"
    with Repository.open(project) as repo:
        assert [(e.author.name, e.files) for e in agent_events(repo)] == [
            ("Scribe", ("README.md",))
        ]
