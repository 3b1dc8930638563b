"""The host loop (seed 001): retrieval, answers with citations, plans through the gateway."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from strata import Repository, UnrecordedCall
from strata.gateway import approve_all
from strata.host import KB_TOOL, PLAN_TOOL, run_host, specs
from strata.ledger.events import EventType
from strata.providers.profile import strict_schema
from strata.providers.replay import ReplayProvider
from strata.providers.scripted import Scripted
from strata.providers.trace import Trace

DOC = "# Server\n\nThe server listens on port 8421.\n\n# Cache\n\nThe cache lives in .cache/.\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "guide.md").write_text(DOC)
    (root / "notes.txt").write_text("draft\n")
    return root


def retrieve(query: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": KB_TOOL, "arguments": {"query": query, "k": None}}]}


def task(kind: str, title: str, **fields: Any) -> dict[str, Any]:
    keys = ("command", "timeout_s", "action", "path", "paragraphs", "sheet", "cells")
    return {"kind": kind, "title": title, **{k: fields.get(k) for k in keys}}


def plan(*tasks: dict[str, Any], goal: str = "do it") -> dict[str, Any]:
    return {"tool_calls": [{"name": PLAN_TOOL, "arguments": {"goal": goal, "tasks": list(tasks)}}]}


def actions(repo: Repository, family: str = "host") -> list[str]:
    return [e.action_type for e in reversed(repo.history(action=family))]


def test_the_tools_are_strict_schemas() -> None:
    for spec in specs():
        assert strict_schema(spec.parameters) == spec.parameters, spec.name
    assert [s.name for s in specs()] == ["local_kb_retrieval", "create_plan"]


def test_an_answer_from_retrieval_alone_cites_its_passages(ws: Path) -> None:
    script = [
        retrieve("server port"),
        retrieve("cache"),
        {"text": "The server listens on port 8421 [1].", "stream": 5},
    ]
    streamed: list[str] = []
    with Repository.init(ws) as repo:
        result = repo.host(
            "which port does the server use?", provider=Scripted(script), on_text=streamed.append
        )
        assert result.status == "answered" and result.ok
        assert result.answer == "The server listens on port 8421 [1]."
        assert "".join(streamed) == result.answer  # streamed as it came
        # two passages were read, numbered across the run; the answer cites the first
        assert [(h.path, h.start_line) for h in result.passages] == [
            ("guide.md", 1),
            ("guide.md", 5),
        ]
        assert result.citations == [1]
        cited = result.passages[0]
        assert "8421" in cited.text and cited.citation.startswith("guide.md:1-3@")
        assert actions(repo) == [
            "host_run_started",
            "agent_step",
            "agent_step",
            "agent_step",
            "host_run_finished",
        ]
        # every model call and the retrieval are traces linked from the steps' events
        first = repo.event(result.steps[0].event_id or "")
        kinds = [Trace.decode(repo.objects.get(t), name=t).event_type for t in first.artifacts]
        assert kinds == ["llm_call", "tool_call"]
        finished = repo.event(result.finished_event_id or "")
        assert list(finished.artifacts) == result.traces and len(result.traces) == 5
        assert finished.data["host"]["citations"] == [cited.citation]
        lines = [a.text for a in result.activity]
        assert lines[:2] == [
            "searched the knowledge base for 'server port': [1]",
            "searched the knowledge base for 'cache': [2]",
        ]
        assert lines[-1].startswith("answered, citing [1] guide.md:1-3@")


def test_a_recorded_host_run_replays_offline(ws: Path) -> None:
    script = [retrieve("server port"), {"text": "Port 8421 [1]."}]
    with Repository.init(ws) as repo:
        first = repo.host("which port?", provider=Scripted(script))
        traces = [Trace.decode(repo.objects.get(t), name=t) for t in first.traces]
        again = repo.host("which port?", provider=ReplayProvider(traces))
        assert again.answer == "Port 8421 [1]." and again.status == "answered"  # no model
        (ws / "guide.md").write_text(DOC.replace("8421", "9000"))
        with pytest.raises(UnrecordedCall):  # other passages: not the recorded request
            repo.host("which port?", provider=ReplayProvider(traces))
        # the failed replay is recorded as an ended run, not left half-open
        last = repo.history(action="host_run_finished", limit=1)[0]
        assert last.data["host"]["status"] == "error"


def test_a_plan_runs_a_command_that_changes_a_file_and_undo_reverts_it(ws: Path) -> None:
    script = [
        retrieve("notes"),
        plan(task("terminal_exec", "rewrite the notes", command="echo final > notes.txt")),
        {"text": "I rewrote notes.txt."},
    ]
    with Repository.init(ws) as repo:
        result = repo.host("finalise the notes", provider=Scripted(script), approver=approve_all())
        assert result.status == "completed", result.to_json()
        assert (ws / "notes.txt").read_text() == "final\n"
        (done,) = result.tasks
        assert done.status == "ok" and done.result is not None
        assert done.result["changes"][0]["path"] == "notes.txt" and done.run_id
        assert actions(repo) == [
            "host_run_started",
            "agent_step",
            "agent_step",
            "plan_created",
            "task_started",
            "task_finished",
            "agent_step",
            "host_run_finished",
        ]
        # the gateway's own events for the step, approval included (echo > file is medium)
        assert actions(repo, "terminal_step") == ["terminal_step_started", "terminal_step_finished"]
        assert actions(repo, "approval") == ["approval_requested", "approval_decided"]
        finished = repo.event(done.finished_event_id or "")
        (trace,) = (Trace.decode(repo.objects.get(t), name=t) for t in finished.artifacts)
        assert trace.tool == "terminal_exec" and trace.request["arguments"]["command"]
        # the model saw the outcome, without ids or timings
        seen = json.loads(
            next(
                m["content"]
                for m in Trace.decode(
                    repo.objects.get(result.steps[2].traces[0]), name="t"
                ).request["messages"]
                if m["role"] == "tool" and m.get("name") == PLAN_TOOL
            )
        )
        assert seen["tasks"][0]["status"] == "ok" and "run_id" not in seen["tasks"][0]["result"]
        assert [a.kind for a in result.activity] == [
            "retrieval",
            "plan",
            "task_started",
            "task_finished",
            "answer",
        ]
        assert result.activity[3].text.endswith("1 file changed")
        repo.undo()  # one step: the task's change
        assert (ws / "notes.txt").read_text() == "draft\n"
        # the whole run replays from its traces: the model is shown no ids or timings
        traces = [Trace.decode(repo.objects.get(t), name=t) for t in result.traces]
        again = repo.host(
            "finalise the notes", provider=ReplayProvider(traces), approver=approve_all()
        )
        assert again.status == "completed" and again.answer == "I rewrote notes.txt."
        assert (ws / "notes.txt").read_text() == "final\n"


def test_a_denied_command_fails_its_task_with_the_reason(ws: Path) -> None:
    script = [
        plan(
            task("terminal_exec", "delete the notes", command="rm notes.txt"),
            task("terminal_exec", "list", command="ls"),
        ),
        {"text": "I could not delete notes.txt: the approval was denied."},
    ]
    with Repository.init(ws) as repo:
        result = repo.host("delete the notes", provider=Scripted(script))  # no approver
        assert result.status == "failed" and not result.ok
        denied, skipped = result.tasks
        assert denied.status == "failed" and skipped.status == "skipped"
        assert denied.error is not None and denied.error["code"] == "approval_denied"
        assert "no approver was given" in denied.error["message"]
        assert (ws / "notes.txt").exists()
        assert actions(repo, "approval") == ["approval_requested", "approval_decided"]
        ended = repo.event(denied.finished_event_id or "")
        assert ended.data["host"]["status"] == "failed"
        assert ended.data["host"]["error"]["code"] == "approval_denied"
        assert "approval denied" in ended.rationale
        last = repo.history(action="host_run_finished", limit=1)[0]
        assert last.data["host"]["tasks"] == {"ok": 0, "failed": 1, "skipped": 1}


def test_a_forbidden_command_is_refused_by_the_policy(ws: Path) -> None:
    script = [
        plan(task("terminal_exec", "push", command="git push --force")),
        {"text": "The policy forbids that."},
    ]
    with Repository.init(ws) as repo:
        result = repo.host(
            "push", provider=Scripted(script), profile="read-only", approver=approve_all()
        )
        (forbidden,) = result.tasks
        assert forbidden.error is not None and forbidden.error["code"] == "command_forbidden"
        assert result.status == "failed"


def test_an_unknown_capability_is_a_tool_error_the_model_reads(ws: Path) -> None:
    script = [
        plan(task("pptx", "make slides", path="a.pptx")),
        {"expect": "unsupported capability kind: pptx", "text": "pptx is not available."},
    ]
    with Repository.init(ws) as repo:
        result = repo.host("make slides", provider=Scripted(script))
        (unknown,) = result.tasks
        assert unknown.error is not None
        assert unknown.error["code"] == "unsupported_capability"
        assert unknown.error["message"] == "unsupported capability kind: pptx"
        assert result.answer == "pptx is not available." and result.status == "failed"


def test_docx_and_excel_tasks_go_through_the_registry(ws: Path) -> None:
    script = [
        plan(
            task("docx", "write the report", action="create", path="r.docx", paragraphs=["Hi"]),
            task(
                "excel",
                "fill the sheet",
                action="write",
                path="b.xlsx",
                cells=[{"cell": "A1", "value": 3}],
            ),
        ),
        {"text": "done"},
    ]
    with Repository.init(ws) as repo:
        result = repo.host("report", provider=Scripted(script))
        assert [t.status for t in result.tasks] == ["ok", "ok"], result.to_json()
        assert (ws / "r.docx").is_file() and (ws / "b.xlsx").is_file()


def test_the_step_cap_ends_the_run(ws: Path) -> None:
    script = [retrieve("server"), retrieve("cache"), retrieve("port")]
    with Repository.init(ws) as repo:
        result = repo.host("loop", provider=Scripted(script), max_steps=2)
        assert result.status == "max_steps" and len(result.steps) == 2
        assert result.activity[-1].kind == "limit"
        last = repo.history(action="host_run_finished", limit=1)[0]
        assert last.data["host"]["status"] == "max_steps"


def test_a_timed_out_command_fails_its_task(ws: Path) -> None:
    script = [
        plan(task("terminal_exec", "wait", command="sleep 5", timeout_s=30)),
        {"text": "it timed out"},
    ]
    with Repository.init(ws) as repo:
        result = run_host(
            repo, Scripted(script), "wait", approver=approve_all(), timeout_s=0.3, index=False
        )
        (slow,) = result.tasks
        assert slow.status == "failed" and slow.error is not None
        assert slow.error["code"] == "timed_out"
        assert slow.args == {"command": "sleep 5", "timeout_s": 30}


def test_bad_input_is_a_clear_error_and_records_nothing(ws: Path) -> None:
    from strata import UsageError

    with Repository.init(ws) as repo:
        with pytest.raises(UsageError, match="the request is empty"):
            repo.host("  ", provider=Scripted([{"text": "x"}]))
        with pytest.raises(UsageError, match="max_steps"):
            repo.host("x", provider=Scripted([{"text": "x"}]), max_steps=0)
        assert repo.history(action="host") == []


def test_a_malformed_plan_and_an_unknown_tool_go_back_to_the_model(ws: Path) -> None:
    script = [
        {"tool_calls": [{"name": PLAN_TOOL, "arguments": {"goal": "x", "tasks": []}}]},
        {"tool_calls": [{"name": "browse", "arguments": {}}]},
        {"expect": "unknown tool 'browse'", "text": "ok"},
    ]
    with Repository.init(ws) as repo:
        result = repo.host("x", provider=Scripted(script))
        assert result.status == "answered" and result.plans == []


def test_history_action_host_lists_the_lifecycle(ws: Path) -> None:
    assert EventType.HOST_RUN_STARTED.value == "host_run_started"
    with Repository.init(ws) as repo:
        repo.host("hi", provider=Scripted([retrieve("x y"), {"text": "hello"}]))
        assert actions(repo, "task") == []
        assert actions(repo)[0] == "host_run_started"


def test_commands_go_through_the_callers_approver(ws: Path) -> None:
    from strata.gateway import ApprovalRequest, callback_approver

    asked: list[ApprovalRequest] = []

    def no(request: ApprovalRequest) -> bool:
        asked.append(request)
        return False

    script = [plan(task("terminal_exec", "move", command="mv notes.txt n.txt")), {"text": "no"}]
    with Repository.init(ws) as repo:
        result = repo.host("move", provider=Scripted(script), approver=callback_approver(no))
        assert [r.command for r in asked] == ["mv notes.txt n.txt"] and asked[0].risk == "medium"
        (denied,) = result.tasks
        assert denied.error is not None and "denied by the callback" in denied.error["message"]
        assert (ws / "notes.txt").exists()
