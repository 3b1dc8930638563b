"""Claude Code's hooks, one tool call's PreToolUse and PostToolUse, vs a git commit, at 20k files.

Builds the large corpus of ``benchmarks/snapshots.py`` (same seed, same files,
same 10 edits), records it once in each tool, starts ``strata watch --daemon
--no-capture`` in the Strata workspace, then for each run makes the same 10
edits in both workspaces (the person's work between two agent calls) and
times, side by side, one Edit tool call as Claude Code runs its hooks:

* ``strata hook claude-code`` fed the PreToolUse message (judged; the person's
  10 edits recorded as their own event), the agent's edit of one more file,
  then the PostToolUse message (the agent's event, that file alone); both
  handed to the watcher before the CLI is imported; the two events are
  checked afterwards (untimed)
  vs ``git add -A`` + ``git commit -q -m x`` of the same 11 files;
* for reference (the last rows taken after all the timed samples, since a
  snapshot run locally rewrites the stat cache the watcher then reads again):
  a plain ``strata snapshot`` (the same path, without the hook's message),
  the same PostToolUse with ``STRATA_NO_RESIDENT=1`` (the CLI loads Strata and
  snapshots in its own process, the watcher still answering which paths
  changed), and a PreToolUse for a refused Bash command (the policy's
  decision and its record);
* the first PreToolUse after the watcher has exited (as it does when idle):
  the hook does the work in its own process (its walk started while its
  modules load) and starts a new watcher once it has answered, vs a
  ``git status`` of the same tree for reference.

Target: PreToolUse and PostToolUse together ≤ 0.5x git's commit.

Run:  .venv/bin/python benchmarks/hook.py [--runs N] [--seed N] [--work DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import snapshots as sb  # noqa: E402  (the corpus, the tools and the timing helpers)


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def payload(ws: Path, event: str, tool: str, tool_input: dict[str, str]) -> bytes:
    body = {
        "session_id": "bench-session",
        "transcript_path": str(ws.parent / "transcript.jsonl"),
        "cwd": str(ws),
        "hook_event_name": event,
        "tool_name": tool,
        "tool_input": tool_input,
    }
    if event == "PostToolUse":
        body["tool_response"] = {"success": True}
    return json.dumps(body).encode()


def hook(ws: Path, message: bytes, *, ok: tuple[int, ...] = (0,)) -> float:
    """Wall seconds of one ``strata hook claude-code`` fed ``message``."""
    os.sync()
    start = time.perf_counter()
    proc = subprocess.run(
        [sb.STRATA, "hook", "claude-code"],
        input=message,
        cwd=ws,
        env=sb.ENV,
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode not in ok:
        raise RuntimeError(f"the hook exited {proc.returncode}: {proc.stderr.decode()}")
    return wall


def wait_for_watcher(ws: Path, timeout: float = 30.0) -> None:
    """Wait until a watcher answers in ``ws`` (one being started cannot be stopped yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            [sb.STRATA, "watch", "--status", "--json"], cwd=ws, env=sb.ENV, capture_output=True
        ).stdout
        if json.loads(out or b"{}").get("running"):
            return
        time.sleep(0.05)
    raise RuntimeError("the hook started no watcher")


def newest(ws: Path, count: int) -> list[dict[str, object]]:
    out = subprocess.run(
        [sb.STRATA, "history", "--limit", str(count), "--json"],
        cwd=ws,
        env=sb.ENV,
        capture_output=True,
        check=True,
    ).stdout
    found: list[dict[str, object]] = json.loads(out)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=HERE / "work" / "hook")
    args = parser.parse_args()
    size = sb.SIZES["large"]
    base = args.work
    sb.rmtree(base)
    base.mkdir(parents=True)
    sb.log(f"generating {size.files} files, {size.total / 1e6:.0f} MB")
    files = sb.plan_corpus(size, args.seed)
    st_ws, git_ws = base / "strata", base / "git"
    sb.write_corpus(st_ws, files, args.seed)
    subprocess.run(["cp", "-a", str(st_ws), str(git_ws)], check=True)
    edits = sb.pick_edits(files, args.seed)
    git = sb.GIT_TOOL
    sb.ENV["STRATA_NO_DAEMON"] = "1"  # the one watcher is started below, in known mode
    sb.run(git.git("init", "-q"), git_ws)
    sb.run(git.git("add", "-A"), git_ws)
    sb.run(git.git("commit", "-q", "-m", "x"), git_ws)
    sb.run([sb.STRATA, "init"], st_ws)
    sb.run([sb.STRATA, "snapshot", "-m", "x"], st_ws)
    sb.log("recorded the corpus in both tools")

    rows: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)

    sb.run([sb.STRATA, "watch", "--daemon", "--no-capture"], st_ws)
    sb.run([sb.STRATA, "snapshot"], st_ws)  # the stat cache now holds a watcher token
    run_no = 0
    agent_file = "agent-edit.txt"
    target = str(st_ws / agent_file)
    try:
        for i in range(args.runs):
            run_no += 1
            sb.edit(st_ws, edits, run_no, args.seed)  # the person's work between two calls
            sb.edit(git_ws, edits, run_no, args.seed)
            tool_input = {"file_path": target, "old_string": "", "new_string": f"{i}"}
            pre = payload(st_ws, "PreToolUse", "Edit", tool_input)
            post = payload(st_ws, "PostToolUse", "Edit", tool_input)
            before = hook(st_ws, pre)
            for ws in (st_ws, git_ws):  # the agent's edit
                (ws / agent_file).write_text(f"agent edit {i}\n")
            after = hook(st_ws, post)
            add("PreToolUse + PostToolUse (watcher)", before + after)
            add("PreToolUse (watcher)", before)
            add("PostToolUse (watcher)", after)
            agent, person = newest(st_ws, 2)
            assert agent["files"] == [agent_file], agent
            assert person["author"]["kind"] == "human", person  # type: ignore[index]
            add(
                "commit git",
                sb.timed(sb.seq(git_ws, git.git("add", "-A"), git.git("commit", "-q", "-m", "x"))),
            )
            # the next call straight after it: nothing changed meanwhile (PreToolUse's no-op
            # check), vs a commit of the one file the agent changed
            pre = payload(st_ws, "PreToolUse", "Edit", {**tool_input, "new_string": f"{i}b"})
            post = payload(st_ws, "PostToolUse", "Edit", {**tool_input, "new_string": f"{i}b"})
            before = hook(st_ws, pre)
            for ws in (st_ws, git_ws):
                (ws / agent_file).write_text(f"agent edit {i}b\n")
            after = hook(st_ws, post)
            add("back to back: PreToolUse + PostToolUse (watcher)", before + after)
            add(
                "back to back: commit git",
                sb.timed(sb.seq(git_ws, git.git("add", "-A"), git.git("commit", "-q", "-m", "x"))),
            )
            run_no += 1
            sb.edit(st_ws, edits, run_no, args.seed)
            add("snapshot strata (watcher)", sb.timed(sb.seq(st_ws, [sb.STRATA, "snapshot"])))
            sb.log(f"run {i + 1}/{args.runs}")
        # the reference rows after the timed ones: a snapshot run locally rewrites the stat
        # cache, which the watcher then reads again on its next command (an agent's hooks
        # never run locally while a watcher serves them)
        for i in range(args.runs):
            run_no += 1
            sb.edit(st_ws, edits, run_no, args.seed)
            (st_ws / agent_file).write_text(f"local {i}\n")
            post = payload(
                st_ws, "PostToolUse", "Edit", {"file_path": target, "new_string": f"local {i}"}
            )
            sb.ENV["STRATA_NO_RESIDENT"] = "1"
            add("PostToolUse (watcher, run locally)", hook(st_ws, post))
            del sb.ENV["STRATA_NO_RESIDENT"]
            pre = payload(st_ws, "PreToolUse", "Bash", {"command": "rm -rf build"})
            add("PreToolUse Bash refused", hook(st_ws, pre, ok=(2,)))
        # the first call after the watcher's idle exit: no watcher answers, so the hook
        # starts one (as it does after [watch] idle_timeout) and meanwhile does the work in
        # its own process: the person's 10 edits found by a walk of the tree and recorded
        del sb.ENV["STRATA_NO_DAEMON"]
        for i in range(args.runs):
            if i:  # the watcher the previous hook started (once it had answered) is up
                wait_for_watcher(st_ws)
            sb.run([sb.STRATA, "watch", "--stop"], st_ws)
            run_no += 1
            sb.edit(st_ws, edits, run_no, args.seed)
            sb.edit(git_ws, edits, run_no, args.seed)
            tool_input = {"file_path": target, "old_string": "", "new_string": f"cold {i}"}
            add(
                "PreToolUse, first after the watcher's exit",
                hook(st_ws, payload(st_ws, "PreToolUse", "Edit", tool_input)),
            )
            person = newest(st_ws, 1)[0]
            assert person["author"]["kind"] == "human", person  # type: ignore[index]
            assert len(person["files"]) == 10, person  # type: ignore[arg-type]
            add(
                "git status, first after a pause (for reference)",
                sb.timed(sb.seq(git_ws, git.git("status", "--porcelain"))),
            )
        sb.ENV["STRATA_NO_DAEMON"] = "1"
    finally:
        sb.run([sb.STRATA, "watch", "--stop"], st_ws)

    strata_ms = median_ms(rows["PreToolUse + PostToolUse (watcher)"])
    git_ms = median_ms(rows["commit git"])
    ratio = strata_ms / git_ms
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cpus = os.cpu_count()
    print(
        f"### One Edit call's hooks, watcher on: 20,000 files, 10 edited by the person "
        f"({now}, {platform.node()}, {cpus} CPUs, load {os.getloadavg()[0]:.1f}, runs={args.runs})"
    )
    print()
    print("| operation | strata | git | strata/git | target | met |")
    print("|---|---|---|---|---|---|")
    met = "yes" if ratio <= 0.5 else "NO"
    print(
        f"| PreToolUse + PostToolUse → the person's event and the agent's, vs `git add -A && "
        f"git commit` | {strata_ms:.0f} ms | {git_ms:.0f} ms | {ratio:.2f}x | ≤ 0.5x git | {met} |"
    )
    b2b = median_ms(rows["back to back: PreToolUse + PostToolUse (watcher)"])
    b2b_git = median_ms(rows["back to back: commit git"])
    print(
        f"| the next call straight after (PreToolUse finds nothing to record), vs a commit of its "
        f"one file | {b2b:.0f} ms | {b2b_git:.0f} ms | {b2b / b2b_git:.2f}x | ≤ 0.5x git | "
        f"{'yes' if b2b / b2b_git <= 0.5 else 'NO'} |"
    )
    print()
    for key in (
        "PreToolUse (watcher)",
        "PostToolUse (watcher)",
        "snapshot strata (watcher)",
        "PostToolUse (watcher, run locally)",
        "PreToolUse Bash refused",
        "PreToolUse, first after the watcher's exit",
        "git status, first after a pause (for reference)",
    ):
        print(f"* {key}: {median_ms(rows[key]):.0f} ms")
    print()
    for key, values in rows.items():
        print(f"  {key} (ms): {', '.join(f'{v * 1000:.1f}' for v in values)}")


if __name__ == "__main__":
    main()
