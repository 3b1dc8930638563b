"""The Workshop's Research → Plan → Implement loop against the scripted provider (seed 000)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from strata.agent.tools import TOOLS
from strata.errors import (
    ProviderCancelled,
    ProviderError,
    WorkshopLoopDetected,
    WorkshopPlanMissing,
)
from strata.providers.base import CancelToken, Finished, TextDelta, ToolCallEvent
from strata.providers.scripted import Scripted
from strata.providers.trace import Recorder, Trace
from strata.workshop import rpi
from strata.workshop.rpi import (
    ImplementProgress,
    LoopDetector,
    PhaseCompleted,
    PhaseStarted,
    Plan,
    RpiEvent,
    RpiResult,
    RpiStep,
    ToolCompleted,
    run_rpi,
)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


RESEARCH = [call("list_files"), call("read_file", path="notes.txt"), {"text": "notes.txt: 2 lines"}]
PLAN_2 = [{"text": "Steps:\n- [ ] 1. Add a title\n- [ ] 2. Fix the typo\n"}]
ITEM_1 = [
    call("write_file", path="title.txt", content="Title\n"),
    {"text": "DONE: wrote title.txt"},
]
ITEM_2 = [
    call("edit_file", path="notes.txt", old="teh", new="the"),
    {"text": "DONE: fixed the typo"},
]
SUMMARY = [{"text": "I added a title and fixed a typo.", "stream": 5}]


class Store:
    """An object store in memory: what the recorder writes traces to."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        oid = f"obj{len(self.objects)}"
        self.objects[oid] = data
        return oid


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "notes.txt").write_text("one\nteh two\n")
    return draft


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return rpi.rpi_folder(tmp_path / "private", "conv_1")


def turn(
    folder: Path,
    state: Path,
    script: list[dict[str, Any]],
    request: str = "tidy the notes",
    **kwargs: Any,
) -> tuple[RpiResult, Scripted, Recorder, list[RpiEvent]]:
    provider = Scripted(script)
    recorder = Recorder(put=Store().put)
    events: list[RpiEvent] = []
    result = run_rpi(
        folder,
        provider,
        TOOLS,
        request,
        state=state,
        recorder=recorder,
        on_event=events.append,
        **kwargs,
    )
    return result, provider, recorder, events


def llm_traces(recorder: Recorder) -> list[Trace]:
    return [t for t in recorder.traces if t.event_type == "llm_call"]


def tool_names(trace: Trace) -> list[str]:
    return [t["name"] for t in trace.request.get("tools", [])]


def test_a_turn_runs_the_four_phases_and_writes_their_artifacts(folder: Path, state: Path) -> None:
    script = RESEARCH + PLAN_2 + ITEM_1 + ITEM_2 + SUMMARY
    result, provider, recorder, events = turn(folder, state, script)

    assert result.text == "I added a title and fixed a typo."
    assert result.phases_run == ["research", "plan", "implement", "summary"]
    assert provider.served == len(script)
    assert (folder / "title.txt").read_text() == "Title\n"
    assert (folder / "notes.txt").read_text() == "one\nthe two\n"
    assert (state / "research.md").read_text() == "notes.txt: 2 lines\n"
    assert (state / "plan.md").read_text() == (
        "# Plan\n\n<!-- original_count: 2 -->\n\n- [x] 1. Add a title\n- [x] 2. Fix the typo\n"
    )
    assert (state / "summary.md").read_text() == "I added a title and fixed a typo.\n"
    assert rpi.progress(state) is None

    finished = [e for e in events if isinstance(e, Finished)]
    assert [f.response.text for f in finished] == [result.text]  # the summary's only
    kept = (TextDelta, ToolCallEvent, ToolCompleted, Finished)
    marks = [e for e in events if not isinstance(e, kept)]
    assert marks == [
        PhaseStarted("research"),
        PhaseCompleted("research"),
        PhaseStarted("plan"),
        PhaseCompleted("plan"),
        PhaseStarted("implement"),
        ImplementProgress(1, 2, "Add a title"),
        ImplementProgress(2, 2, "Fix the typo"),
        PhaseCompleted("implement"),
        PhaseStarted("summary"),
        PhaseCompleted("summary"),
    ]
    # only the summary's text streams; tool calls are announced in every phase
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == result.text
    assert next(e.text for e in events if isinstance(e, TextDelta)) == "I add"
    assert [e.call.name for e in events if isinstance(e, ToolCallEvent)] == [
        "list_files",
        "read_file",
        "write_file",
        "edit_file",
    ]
    # every model call and tool call is a trace: 9 model calls, 4 tool calls
    kinds = [t.event_type for t in recorder.traces]
    assert kinds.count("llm_call") == 9 and kinds.count("tool_call") == 4
    assert result.traces == recorder.ids


def test_each_phase_starts_from_a_fresh_context_with_the_earlier_artifacts(
    folder: Path, state: Path
) -> None:
    script = [
        {**RESEARCH[0], "expect": "Request:\ntidy the notes"},
        *RESEARCH[1:],
        {**PLAN_2[0], "expect": "notes.txt: 2 lines"},
        {**ITEM_1[0], "expect": "Do item 1 now: Add a title"},
        ITEM_1[1],
        {**ITEM_2[0], "expect": "Do item 2 now: Fix the typo"},
        ITEM_2[1],
        {**SUMMARY[0], "expect": "title.txt"},  # the file list reaches the summary
    ]
    _, _, recorder, _ = turn(folder, state, script, system="You are the Workshop.")
    messages = llm_traces(recorder)[3].request["messages"]
    # the plan call does not carry the research phase's tool calls, only its notes
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"].startswith("You are the Workshop.\n\nYou are in the PLAN")


def test_research_may_only_read(folder: Path, state: Path) -> None:
    script = [
        call("write_file", path="notes.txt", content="gone"),
        {"text": "cannot write", "expect": "not a tool of the research phase"},
        *PLAN_2,
        *ITEM_1,
        *ITEM_2,
        *SUMMARY,
    ]
    _, _, recorder, _ = turn(folder, state, script)
    assert (folder / "notes.txt").read_text() == "one\nthe two\n"  # edited by item 2 only
    calls = llm_traces(recorder)
    assert tool_names(calls[0]) == ["list_files", "read_file"]
    assert tool_names(calls[2]) == ["read_file"]  # the plan phase
    assert tool_names(calls[3]) == ["list_files", "read_file", "write_file", "edit_file"]
    assert "tools" not in calls[-1].request  # the summary is a call without tools
    refused = next(t for t in recorder.traces if t.event_type == "tool_call")
    assert refused.response is not None and refused.response["is_error"] is True


def test_research_stops_at_its_turn_budget(folder: Path, state: Path) -> None:
    research = [call("read_file", path=f"missing-{n}.txt") for n in range(rpi.RESEARCH_TURNS)]
    script = research + PLAN_2 + ITEM_1 + ITEM_2 + SUMMARY
    result, provider, _, _ = turn(folder, state, script)
    assert provider.served == len(script)
    assert result.research.endswith("[research stopped after its 30 turns]")


def test_plan_has_its_own_turn_budget(folder: Path, state: Path) -> None:
    plan = [call("read_file", path=f"missing-{n}.txt") for n in range(rpi.PLAN_TURNS)]
    script = RESEARCH + plan + [{"text": "- [ ] never read"}]
    with pytest.raises(WorkshopPlanMissing):
        turn(folder, state, script)
    assert not (state / "plan.md").exists()


def test_a_plan_without_a_checklist_fails_and_keeps_the_research(folder: Path, state: Path) -> None:
    with pytest.raises(WorkshopPlanMissing, match="without a checklist"):
        turn(folder, state, [*RESEARCH, {"text": "I would tidy it."}])
    assert (state / "research.md").read_text() == "notes.txt: 2 lines\n"
    assert not (state / "plan.md").exists()
    assert rpi.progress(state) == "plan"
    # sent again, the turn resumes at the plan: the research is not asked for again
    result, provider, _, _ = turn(folder, state, PLAN_2 + ITEM_1 + ITEM_2 + SUMMARY)
    assert result.phases_run == ["plan", "implement", "summary"]
    assert provider.served == 6


def test_a_failed_item_is_retried_once_then_marked_and_the_walk_goes_on(
    folder: Path, state: Path
) -> None:
    script = [
        *RESEARCH,
        *PLAN_2,
        {"text": "FAILED: the title is unknown"},
        {"text": "FAILED: still unknown", "expect": "failed: the title is unknown"},
        *ITEM_2,
        *SUMMARY,
    ]
    result, provider, _, events = turn(folder, state, script)
    assert provider.served == len(script)
    assert "- [!] 1. Add a title [Failed: still unknown]" in (state / "plan.md").read_text()
    assert "- [x] 2. Fix the typo" in (state / "plan.md").read_text()
    assert [i.number for i in result.failed_items] == [1]
    progress = [e.current_item for e in events if isinstance(e, ImplementProgress)]
    assert progress == [1, 1, 2]


def test_an_item_that_fails_once_and_then_succeeds_is_done(folder: Path, state: Path) -> None:
    script = [*RESEARCH, *PLAN_2, {"text": "FAILED: busy"}, *ITEM_1, *ITEM_2, *SUMMARY]
    result, _, _, _ = turn(folder, state, script)
    assert result.failed_items == []
    assert "- [x] 1. Add a title" in (state / "plan.md").read_text()


def test_an_item_has_its_own_turn_budget(folder: Path, state: Path) -> None:
    spin = [call("read_file", path=f"m{n}.txt") for n in range(rpi.ITEM_TURNS)]
    script = [*RESEARCH, *PLAN_2, *spin, *spin, *ITEM_2, *SUMMARY]
    turn(folder, state, script)
    assert "- [!] 1. Add a title [Failed: no answer within its 30 turns]" in (
        (state / "plan.md").read_text()
    )


def test_amendments_are_appended_up_to_twice_the_original_count(folder: Path, state: Path) -> None:
    script = [
        *RESEARCH,
        {"text": "- [ ] Add a title"},
        call("write_file", path="title.txt", content="T\n"),
        {"text": "DONE: title.\n- [ ] Fix the typo\n- [ ] Add an index\n- [ ] Add a footer"},
        *ITEM_2,
        *SUMMARY,
    ]
    result, provider, _, _ = turn(folder, state, script)
    assert provider.served == len(script)
    plan = Plan.parse((state / "plan.md").read_text())
    assert plan.original_count == 1
    assert [(i.number, i.text, i.status) for i in plan.items] == [
        (1, "Add a title", "x"),
        (2, "Fix the typo", "x"),
    ]
    assert len(result.plan.items) == 2


def test_three_identical_calls_inject_a_warning(folder: Path, state: Path) -> None:
    same = call("read_file", path="notes.txt")
    script = [
        same,
        same,
        same,
        {"text": "notes read", "expect": "Warning: you called read_file with the same"},
        *PLAN_2,
        *ITEM_1,
        *ITEM_2,
        *SUMMARY,
    ]
    _, provider, _, _ = turn(folder, state, script)
    assert provider.served == len(script)


def test_five_identical_calls_stop_the_turn(folder: Path, state: Path) -> None:
    same = call("read_file", path="notes.txt")
    with pytest.raises(WorkshopLoopDetected, match="read_file with the same arguments 5") as err:
        turn(folder, state, [same] * 6)
    assert err.value.hint and "/model" in err.value.hint
    assert not (state / "research.md").exists()


def test_the_loop_window_holds_the_last_ten_calls() -> None:
    detector = LoopDetector()
    assert detector.observe("read_file", {"path": "a"}) is None
    for n in range(9):
        assert detector.observe("read_file", {"path": f"other{n}"}) is None
    # the first call left the window: this one is the only one in it
    assert detector.observe("read_file", {"path": "a"}) is None
    # arguments compare canonically (key order does not matter)
    assert detector.observe("f", {"a": 1, "b": 2}) is None
    assert detector.observe("f", {"b": 2, "a": 1}) is None
    assert detector.observe("f", {"a": 1, "b": 2}) is not None


def test_cancel_stops_the_turn_and_a_new_invocation_resumes(folder: Path, state: Path) -> None:
    cancel = CancelToken()

    def stop_at_plan(event: RpiEvent) -> None:
        if event == PhaseStarted("plan"):
            cancel.cancel()

    provider = Scripted(RESEARCH + PLAN_2)
    with pytest.raises(ProviderCancelled):
        run_rpi(
            folder,
            provider,
            TOOLS,
            "tidy the notes",
            state=state,
            recorder=Recorder(put=Store().put),
            on_event=stop_at_plan,
            cancel=cancel,
        )
    assert provider.served == 3
    assert rpi.progress(state) == "plan"
    result, _, _, _ = turn(folder, state, PLAN_2 + ITEM_1 + ITEM_2 + SUMMARY)
    assert result.phases_run == ["plan", "implement", "summary"]


def test_a_provider_failure_is_not_retried_by_the_loop(folder: Path, state: Path) -> None:
    # the script ends in the middle of the plan: the provider's error ends the turn at once
    with pytest.raises(ProviderError, match="all were served"):
        turn(folder, state, RESEARCH)
    assert rpi.progress(state) == "plan"


def test_a_finished_turn_is_not_run_again_and_clear_starts_over(folder: Path, state: Path) -> None:
    script = RESEARCH + PLAN_2 + ITEM_1 + ITEM_2 + SUMMARY
    turn(folder, state, script)
    again, provider, _, _ = turn(folder, state, [])
    assert again.phases_run == [] and provider.served == 0
    assert again.text == "I added a title and fixed a typo."

    assert rpi.clear(state) is True
    assert not state.exists() and rpi.clear(state) is False
    (folder / "notes.txt").write_text("one\nteh two\n")
    result, _, _, _ = turn(folder, state, script)
    assert result.phases_run == ["research", "plan", "implement", "summary"]


def test_another_request_starts_over(folder: Path, state: Path) -> None:
    with pytest.raises(WorkshopPlanMissing):
        turn(folder, state, [*RESEARCH, {"text": "no plan"}], request="first")
    assert rpi.progress(state) == "plan"
    result, _, _, _ = turn(folder, state, RESEARCH + PLAN_2 + ITEM_1 + ITEM_2 + SUMMARY)
    assert result.phases_run == ["research", "plan", "implement", "summary"]


def test_on_step_sees_each_model_call_with_its_traces(folder: Path, state: Path) -> None:
    steps: list[RpiStep] = []
    script = RESEARCH + PLAN_2 + ITEM_1 + ITEM_2 + SUMMARY
    _, _, recorder, _ = turn(folder, state, script, on_step=steps.append)
    assert [(s.phase, s.item) for s in steps] == [
        ("research", None),
        ("research", None),
        ("research", None),
        ("plan", None),
        ("implement", 1),
        ("implement", 1),
        ("implement", 2),
        ("implement", 2),
        ("summary", None),
    ]
    assert [len(s.traces) for s in steps] == [2, 2, 1, 1, 2, 1, 2, 1, 1]
    assert [t for s in steps for t in s.traces] == recorder.ids


CHILD = """
import json, sys, time
from pathlib import Path
from strata.agent.tools import TOOLS
from strata.providers.scripted import Scripted
from strata.providers.trace import Recorder
from strata.workshop.rpi import ImplementProgress, run_rpi

folder, state, script, marker = (Path(a) for a in sys.argv[1:5])

def on_event(event):
    if isinstance(event, ImplementProgress) and event.current_item == 2:
        marker.write_text("item 2")
        time.sleep(60)

run_rpi(folder, Scripted(json.loads(script.read_text())), TOOLS, "tidy the notes",
        state=state, recorder=Recorder(put=lambda b: "x"), on_event=on_event)
"""


def test_a_turn_killed_midway_resumes_without_redoing_a_phase(
    folder: Path, state: Path, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(RESEARCH + PLAN_2 + ITEM_1 + ITEM_2 + SUMMARY))
    marker = tmp_path / "marker"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder), str(state), str(script), str(marker)]
    )
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert child.poll() is None, "the child ended before item 2"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    research = (state / "research.md").read_bytes()
    assert rpi.progress(state) == "implement"
    assert "- [x] 1. Add a title\n- [ ] 2. Fix the typo" in (state / "plan.md").read_text()
    assert (folder / "title.txt").read_text() == "Title\n"

    # the resumed turn is served item 2 and the summary only: asking anything else fails
    result, provider, _, events = turn(folder, state, [*ITEM_2, *SUMMARY])
    assert result.phases_run == ["implement", "summary"]
    assert provider.served == 3
    assert (state / "research.md").read_bytes() == research
    assert [e.current_item for e in events if isinstance(e, ImplementProgress)] == [2]
    assert (folder / "notes.txt").read_text() == "one\nthe two\n"
    assert result.text == "I added a title and fixed a typo."


def test_a_conversation_id_cannot_leave_the_private_folder(tmp_path: Path) -> None:
    from strata.errors import UsageError

    with pytest.raises(UsageError, match="not a conversation id"):
        rpi.rpi_folder(tmp_path, "../escape")
    assert rpi.rpi_folder(tmp_path, "c1") == tmp_path / "workshop" / "c1" / "_rpi"


def test_workbench_context_reaches_research_plan_and_items_and_the_manifest_the_summary(
    folder: Path, state: Path
) -> None:
    script = [
        {**RESEARCH[0], "expect": "MANIFEST: notes.txt"},
        *RESEARCH[1:],
        {**PLAN_2[0], "expect": "MANIFEST: notes.txt"},
        {**ITEM_1[0], "expect": "MANIFEST: notes.txt"},
        ITEM_1[1],
        *ITEM_2,
        {**SUMMARY[0], "expect": "files: notes.txt, title.txt"},
    ]
    _, provider, recorder, _ = turn(
        folder,
        state,
        script,
        context="MANIFEST: notes.txt (text, 12 bytes)",
        manifest=lambda: "files: notes.txt, title.txt",
    )
    assert provider.served == len(script)
    summary_call = llm_traces(recorder)[-1]
    assert "MANIFEST" not in json.dumps(summary_call.request["messages"])


def test_on_a_repository_each_step_is_a_draft_revision_and_the_summary_is_the_answer(
    tmp_path: Path,
) -> None:
    from strata import Repository
    from strata.workbench.draft import open_draft

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("one\nteh two\n")
    script = RESEARCH + PLAN_2 + ITEM_1 + ITEM_2 + SUMMARY
    with Repository.init(ws) as repo:
        repo.snapshot(message="base")
        state = rpi.rpi_folder(repo.layout.repo, "conv_1")
        started: list[int] = []
        tools: list[tuple[int, str, bool]] = []
        result = rpi.run_rpi_agent(
            repo,
            Scripted(script),
            "tidy the notes",
            state=state,
            key="evt_user_1",
            on_step_start=started.append,
            on_tool_result=lambda n, _id, name, res: tools.append((n, name, res.is_error)),
            data={"workshop": {"conversation": "conv_1"}},
        )
        assert tools == [
            (0, "list_files", False),
            (1, "read_file", False),
            (4, "write_file", False),
            (6, "edit_file", False),
        ]
        assert result.text == "I added a title and fixed a typo."
        assert [s.step for s in result.steps] == list(range(9)) == started
        draft = open_draft(repo)
        assert draft is not None and draft.id == result.draft_id
        assert (draft.path / "title.txt").read_text() == "Title\n"
        assert (ws / "notes.txt").read_text() == "one\nteh two\n"  # Published is untouched
        events = [repo.event(s.event_id) for s in result.steps if s.event_id]
        assert len(events) == 9
        phases = [(e.data["step"]["phase"], e.data["step"]["item"]) for e in events]
        assert phases[3:] == [
            ("plan", None),
            ("implement", 1),
            ("implement", 1),
            ("implement", 2),
            ("implement", 2),
            ("summary", None),
        ]
        assert all(e.data["workshop"] == {"conversation": "conv_1"} for e in events)
        assert [len(e.artifacts) for e in events] == [2, 2, 1, 1, 2, 1, 2, 1, 1]
        assert json.loads((state / "run.json").read_text())["request"] == "evt_user_1"
        # the same message again: nothing is redone; another message starts over
        again = rpi.run_rpi_agent(
            repo, Scripted([]), "tidy the notes", state=state, key="evt_user_1"
        )
        assert again.text == result.text
        assert [(s.event_id, s.traces) for s in again.steps] == [(None, ())]
        with pytest.raises(ProviderError, match="all were served"):
            rpi.run_rpi_agent(repo, Scripted([]), "tidy the notes", state=state, key="evt_user_2")


def test_a_plan_written_as_a_numbered_list_is_taken_but_amendments_must_be_checkboxes(
    folder: Path, state: Path
) -> None:
    script = [
        *RESEARCH,
        {"text": "Plan:\n1. Add a title\n2) Fix the typo\n"},
        ITEM_1[0],
        {"text": "DONE: title.\n1. a numbered line is not an amendment"},
        *ITEM_2,
        *SUMMARY,
    ]
    result, provider, _, _ = turn(folder, state, script)
    assert provider.served == len(script)
    assert [(i.text, i.status) for i in result.plan.items] == [
        ("Add a title", "x"),
        ("Fix the typo", "x"),
    ]
