"""The start of ``strata hook``: what an agent sent, handed to the workspace's watcher.

The console script calls :func:`try_fast` before it imports the CLI: the
agent's message is read here with the standard library alone and handed to
the workspace's watcher (:func:`strata._resident.try_resident`), which runs it
without this process importing the rest of Strata:

- Claude Code's and Codex's PreToolUse of a writing tool (Codex's
  PermissionRequest too) and every PostToolUse become ``strata hook AGENT
  --payload=JSON`` (the watcher has no standard input of the asker's):
  judged, the person's unrecorded work recorded before the call, the call's
  change recorded after it (see ``strata.cli.hook``);
- ``strata hook codex JSON`` (the ``notify`` of a Codex without hooks) and
  ``strata hook aider FILE...`` (Aider's lint command) become one ``strata
  snapshot --message=RATIONALE --author=WHO --author-kind=agent``.

When no watcher answers, the CLI's ``hook`` command runs as usual and finds
what was read from stdin in :data:`pending_stdin`.

Only the standard library is imported here (``os``, ``sys``; JSON through
:mod:`strata._wire`, which spares the ``json`` module's import).
"""

from __future__ import annotations

import os
import sys

from strata import _wire

#: what :func:`try_fast` read from stdin (the CLI's hook command reads it from here)
pending_stdin: str | None = None
#: set by :func:`try_fast` when the hook records a snapshot that no watcher took: the
#: command line then walks the workspace (in the hook's ``cwd``, where this went)
walks_here = False

#: the longest rationale recorded (an Edit's strings or a Write's content are clipped)
RATIONALE_LIMIT = 1000
#: the longest single string value shown in a rationale
VALUE_LIMIT = 200

#: Claude Code's tools whose PostToolUse is recorded (the others only read)
CLAUDE_WRITING_TOOLS = ("Bash", "Edit", "MultiEdit", "Write", "NotebookEdit")
#: Codex's tools whose hooks are handed to the watcher (its shell tool, its patch tool)
CODEX_WRITING_TOOLS = ("Bash", "apply_patch")
#: the options of ``strata hook AGENT`` whose message comes on stdin
HOOK_OPTIONS = {"claude-code": ("--ask", "--strict"), "codex": ("--strict",)}
#: Claude Code's tools that write one file, and the key of its path in ``tool_input``
CLAUDE_FILE_TOOLS = {
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
}
#: how a hook's message is given in its argument list (so a watcher can run it: it has no
#: standard input of the asker's)
PAYLOAD = "--payload="


def _clip(value: object) -> object:
    """``value`` with long strings cut (at :data:`VALUE_LIMIT` characters, marked ``…``)."""
    if isinstance(value, str):
        return value if len(value) <= VALUE_LIMIT else value[:VALUE_LIMIT] + "…"
    if isinstance(value, dict):
        return {k: _clip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v) for v in value[:20]]
    return value


def tool_rationale(tool_name: str, tool_input: object) -> str:
    """``TOOL {input as JSON}``: a tool call as the rationale of its snapshot (clipped)."""
    shown = _wire.dumps(_clip(tool_input), ensure_ascii=False)
    text = f"{tool_name} {shown}"
    return text if len(text) <= RATIONALE_LIMIT else text[: RATIONALE_LIMIT - 1] + "…"


def _snapshot_argv(message: str, author: str) -> list[str]:
    """``strata snapshot`` recording ``message`` by the agent ``author``.

    Options are given as ``--name=value``: a value starting with ``-`` stays a value.
    """
    return ["snapshot", f"--message={message}", f"--author={author}", "--author-kind=agent"]


def hook_argv(agent: str, args: list[str], text: str) -> list[str]:
    """``strata hook AGENT ARGS`` with its message in the argument list, for the watcher."""
    return ["hook", agent, *args, PAYLOAD + text]


def codex_snapshot(payload: dict[str, object]) -> list[str] | None:
    """The snapshot command line of a Codex ``notify`` message (``agent-turn-complete``)."""
    if payload.get("type") != "agent-turn-complete":
        return None
    asked = payload.get("input-messages") or payload.get("input_messages") or []
    prompt = " / ".join(str(m) for m in asked) if isinstance(asked, list) else str(asked)
    turn = payload.get("turn-id") or payload.get("turn_id") or ""
    message = f"codex turn {turn}: {prompt}".strip() if turn else f"codex turn: {prompt}"
    who = payload.get("thread-id") or payload.get("thread_id") or "codex"
    return _snapshot_argv(message[:RATIONALE_LIMIT], str(who))


def aider_snapshot(files: list[str]) -> list[str]:
    """The snapshot command line of Aider's lint command run on ``files``."""
    names = ", ".join(files) if files else "the workspace"
    return _snapshot_argv(f"aider edited {names}"[:RATIONALE_LIMIT], "aider")


def _notify_form(args: list[str]) -> bool:
    """Whether ``strata hook codex ARGS`` is Codex's ``notify`` (its message an argument)."""
    return any(not a.startswith("-") for a in without_ask_studio(args)[0])


#: the option that has a PreToolUse asked on the studio's Approvals page (it takes SECONDS)
ASK_STUDIO = "--ask-studio"


def without_ask_studio(args: list[str]) -> tuple[list[str], str | None]:
    """``args`` without ``--ask-studio SECONDS`` (or ``--ask-studio=SECONDS``), and its value."""
    kept: list[str] = []
    value: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == ASK_STUDIO and i + 1 < len(args):
            value = args[i + 1]
            i += 2
            continue
        if arg.startswith(ASK_STUDIO + "="):
            value = arg.split("=", 1)[1]
        else:
            kept.append(arg)
        i += 1
    return kept, value


def _waits_for_a_person(text: str) -> bool:
    """Whether a hook's message is a shell command's PreToolUse or PermissionRequest.

    Such a call may wait minutes for an answer on the studio's page
    (``--ask-studio``): it is judged in this process, never in the watcher,
    which serves every other command of the workspace one at a time.
    """
    try:
        payload = _wire.loads(text)
    except ValueError:
        return True  # the CLI says what is wrong
    return not isinstance(payload, dict) or (
        payload.get("hook_event_name") in ("PreToolUse", "PermissionRequest")
        and payload.get("tool_name") == "Bash"
    )


def parse(agent: str, args: list[str], stdin_text: str) -> tuple[list[str] | None, str | None]:
    """The snapshot command line for ``strata hook AGENT ARGS`` and the folder it runs in.

    ``(None, None)`` when the message asks for no snapshot here (a PreToolUse,
    another event, a message that is not JSON: the CLI then decides).
    """
    try:
        if agent in HOOK_OPTIONS and not (agent == "codex" and _notify_form(args)):
            payload = _wire.loads(stdin_text)
            if isinstance(payload, dict):
                cwd = payload.get("cwd")
                event = payload.get("hook_event_name")
                if agent == "codex":
                    writes = payload.get("tool_name") in CODEX_WRITING_TOOLS
                    before = event in ("PreToolUse", "PermissionRequest")
                    prompt = event in ("UserPromptSubmit", "Stop")  # a prompt's group
                else:
                    writes = payload.get("tool_name") in CLAUDE_WRITING_TOOLS
                    before = event == "PreToolUse"
                    prompt = event in ("UserPromptSubmit", "Stop")  # a prompt's group
                if event == "PostToolUse" or prompt or (before and writes):
                    # handed whole to the watcher: before a call, judged and what changed
                    # before it recorded as the person's; after it, recorded as the agent's
                    return hook_argv(agent, args, stdin_text), str(cwd) if cwd else None
        elif agent == "codex" and args:
            payload = _wire.loads(args[-1])
            if isinstance(payload, dict):
                cwd = payload.get("cwd")
                return codex_snapshot(payload), str(cwd) if cwd else None
        elif agent == "aider":
            files = [a for a in args if not a.startswith("-")]
            return aider_snapshot(files), None
    except ValueError:
        pass
    return None, None


def try_fast(argv: list[str]) -> None:
    """Record ``strata hook AGENT ...`` through the watcher; returns when it did not.

    ``argv`` follows ``hook``. Returns at once for ``install``, ``--help`` and
    anything with options this does not know; once the watcher has taken the
    snapshot the process exits with the snapshot's code.
    """
    global pending_stdin
    if not argv or argv[0] not in ("claude-code", "codex", "aider"):
        return
    agent, args = argv[0], argv[1:]
    if any(a in ("-h", "--help") for a in args):
        return
    studio = None
    if agent in HOOK_OPTIONS and not (agent == "codex" and _notify_form(args)):
        if any(a.startswith(PAYLOAD) for a in args):
            return  # the message is in the arguments: served (or run) as it is
        args, studio = without_ask_studio(args)
        if any(a not in HOOK_OPTIONS[agent] for a in args) or sys.stdin is None:
            return
        pending_stdin = sys.stdin.buffer.read().decode("utf-8", "replace")
        if studio is not None and _waits_for_a_person(pending_stdin):
            return  # judged here: it may wait for a person's answer
        # any other event does not ask: handed to the watcher without the option
    command, cwd = parse(agent, args, pending_stdin or "")
    if command is None:
        return
    if cwd:
        try:
            os.chdir(cwd)
        except (OSError, ValueError):  # ValueError: a NUL in it
            return  # the CLI says what is wrong (and refuses a call it cannot judge)
    from strata._resident import try_resident

    global walks_here
    walks_here = True  # unless the watcher takes it (then this process exits)
    try:
        try_resident(command)
    except SystemExit as exc:
        # Codex runs the tool when its hook exits any way but 2: a watcher that stopped
        # while judging a call (exit 1), or an interrupt, refuses it
        if exc.code not in (0, 2, None) and agent == "codex" and _before_call(pending_stdin):
            sys.stderr.write("strata: refused: this call could not be judged (see above)\n")
            sys.stderr.flush()
            sys.exit(2)
        raise


def _before_call(text: str | None) -> bool:
    """Whether a hook's message asks about a call before it runs (which a failure refuses)."""
    try:
        payload = _wire.loads(text or "")
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("hook_event_name") in (
        "PreToolUse",
        "PermissionRequest",
    )
