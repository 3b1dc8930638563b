#!/usr/bin/env bash
# A short tour: record, rewind, instrumented runs with rollback, an agent
# working in a sandboxed Draft that a person reviews and publishes, the
# watcher and storage that keep it fast and small, a model-driven agent
# whose every call is recorded and replayed offline, the Workshop (a chat
# rewound by message), the command gateway and the knowledge base.
set -euo pipefail

ws=$(mktemp -d "${TMPDIR:-/tmp}/strata-demo.XXXXXX")
trap 'strata -C "$ws" watch --stop >/dev/null 2>&1 || true; rm -rf "$ws"' EXIT
cd "$ws"
export STRATA_AUTHOR=demo

# the command as a user would type it: arguments that need quoting are quoted
shown() {
    local out="" arg
    for arg in "$@"; do
        if [[ $arg =~ ^[A-Za-z0-9_./:=@%+~-]+$ ]]; then out+=" $arg"; else out+=" ${arg@Q}"; fi
    done
    printf '%s' "${out# }"
}

run() {
    printf '\n\033[1m$ %s\033[0m\n' "$(shown "$@")"
    "$@"
}

say() {
    printf '\n\033[36m# %s\033[0m\n' "$*"
}

mkdir -p src docs
printf 'def greet(name):\n    return "hello " + name\n' > src/app.py
printf '# Sample project\n' > README.md
printf 'notes\n' > docs/notes.txt
head -c 2048 /dev/urandom > logo.bin

say "1. Record the folder, let an 'agent' edit it, see and undo what it did."
run strata init   # records the project as it is: the agent's first change can be undone
printf 'def greet(name):\n    return f"hello, {name}!"\n' > src/app.py
rm docs/notes.txt
printf 'print("new")\n' > src/new.py
run strata status
run strata snapshot -m "agent: friendlier greeting" --author agent-1 --author-kind agent
run strata diff HEAD~1 HEAD --stat
printf 'x = 1  # unsaved experiment\n' > scratch.py
run strata rewind HEAD~1
run ls
say "The unsaved scratch.py was auto-saved before the rewind; 'strata undo' brings everything back."
run strata undo
run ls

say "2. Any command becomes rewindable: 'strata run' snapshots before and after it."
# (fake agents, so the demo needs no network or API key)
run strata run -- sh -c 'printf "TODO: tests\n" >> README.md'
run strata history --limit 4
say "A failing command with --rollback-on-failure: its changes are put back, its exit code kept."
set +e
run strata run --rollback-on-failure -- sh -c 'rm -r src; echo "half-done" > broken.txt; exit 3'
echo "exit code: $?"
set -e
run ls
run strata branch list

say "3. An agent in a Draft: bubblewrap sandbox, no network, no secrets; your files untouched."
export API_TOKEN=secret-on-the-host
run strata run --draft -- sh -c '
    printf "def greet(name):\n    return f\"hi {name}\"\n" > src/app.py
    echo "token seen by the agent: [${API_TOKEN:-}]"
    echo "stray" > /tmp/agent-was-here
    python3 -c "import socket; socket.create_connection((\"127.0.0.1\", 22), 1)" 2>/dev/null \
        || echo "network: denied"'
run cat src/app.py
test -e /tmp/agent-was-here || echo "(the host's /tmp has no agent-was-here: the sandbox's /tmp was private)"
run strata review
run strata publish -m "agent: shorter greeting"
run cat src/app.py
run strata checkpoint list
say "Publishing took a checkpoint first; restoring it brings the old files back (and is undoable)."
cp=$(strata checkpoint list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
run strata checkpoint restore "$cp"
run cat src/app.py
run strata check

say "4. Speed by default: the first command started a watcher for this folder; commands ask it what changed instead of reading every file."
run strata watch --status
run strata status
say "The store keeps every version; 'strata du' shows what it holds, 'strata gc' what the [retention] tiers of config.toml let go."
run strata du
run strata gc --dry-run

say "5. A model-driven agent: 'strata agent' sends the task to a provider of config.toml; its tool calls edit the Draft, one revision per step, every call recorded."
say "(a scripted provider answers here, so the demo needs no network or key; 'strata models' lists real ones: OpenAI, Anthropic, Ollama, llama.cpp)"
cat > agent-script.yaml <<'YAML'
responses:
  - tool_calls:
      - {name: read_file, arguments: {path: src/app.py}}
  - tool_calls:
      - name: edit_file
        arguments: {path: src/app.py, old: "return f\"hello, {name}!\"", new: "return f\"Hello, {name}!\""}
      - name: write_file
        arguments: {path: CHANGELOG.md, content: "- greet() says Hello\n"}
  - text: "Capitalised the greeting and noted it in CHANGELOG.md."
YAML
printf '\n[providers.demo]\nadapter = "scripted"\nscript = "agent-script.yaml"\n' >> .strata/config.toml
run strata models
run strata agent --model demo "Capitalise the greeting and note it in the changelog (questions: ops@example.com)"
run strata review
say "Each step's revision links its traces (in 'artifacts'); secrets are redacted before anything is written:"
tip=$(strata history --json --limit 1 --action draft_revision | python3 -c 'import json,sys; d=json.load(sys.stdin); print((d["events"] if isinstance(d, dict) else d)[0]["id"])')
first=$(strata history --json --limit 3 --action draft_revision | python3 -c 'import json,sys; d=json.load(sys.stdin); print((d["events"] if isinstance(d, dict) else d)[-1]["artifacts"][0])')
strata cat "$first" | python3 -c 'import re, sys; print(re.search(r"\"content\": \"Capitalise[^\"]*\"", sys.stdin.read()).group(0))'
base=$(strata draft status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["base_event_id"])')
say "Replay: rebuild the files at the Draft's base, answer each model call from its trace, run the tools again, compare every step's files."
run strata replay "$base..$tip"
say "Publish with a preflight: the result is rebuilt in a scratch folder and a check runs on it (sandboxed, no network) before your files change."
run strata publish --preflight "grep -q Hello src/app.py" -m "agent: capitalised greeting"
run cat src/app.py

say "6. The Workshop: a chat whose agent edits land in a Draft; every message is in the ledger, and any message can be rewound to."
cat > shop-script.yaml <<'YAML'
responses:
  - tool_calls:
      - {name: get_file_map, arguments: {path: src/app.py}}
  - tool_calls:
      - name: write_file
        arguments: {path: NOTES.md, content: "# Notes\n- greet() says Hello\n"}
  - text: "Wrote NOTES.md: one note about greet()."
    stream: 8
YAML
printf '\n[providers.shop]\nadapter = "scripted"\nscript = "shop-script.yaml"\n' >> .strata/config.toml
say "The model is told the files (a manifest, structural maps of csv/xlsx/docx/pptx/pdf, small files inline) and the workspace digest:"
run strata digest scan
run strata ask --model shop "Start a NOTES.md about greet()"
run strata chat log
run strata review
first=$(strata chat log --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["messages"][0]["id"])')
say "Rewind to the first message: the Draft it made is discarded (the conversation keeps everything, inactive) ..."
run strata chat rewind "$first"
run strata draft status
say "... and like every operation, the rewind is undoable."
run strata undo
run strata review
run strata publish -m "workshop: notes"
run cat NOTES.md
say "'strata chat' is the same in a terminal UI (/rewind, /regenerate, /model, /review, /publish); 'strata ask --rpi' researches, plans and implements."

say "7. The gateway: commands an agent runs pass a risk policy and an approval gate; an approved risky command is one 'strata undo' away."
run strata exec -- cat NOTES.md
run strata exec --dry-run --shell 'curl -s https://example.com/install.sh | sh'
set +e
run strata exec --profile read-only -- rm -rf src
echo "exit code: $?"
set -e
run strata exec --yes -- rm NOTES.md
run ls
run strata undo
run ls
say "Claude Code, Codex and Aider plug in with hooks ('strata hook install'), any MCP client with 'strata mcp':"
run strata hook install claude-code --dry-run

say "8. A local knowledge base over the workspace's files, every hit with its citation (path, lines, snapshot):"
run strata kb index
run strata kb search "greet"

say "9. Strata Studio: the same history in a browser (timeline, play head, diffs side by side, the Draft's review)."
studio_log="${TMPDIR:-/tmp}/strata-studio.$$.log"
nohup strata studio --no-open >"$studio_log" 2>&1 &
studio_pid=$!
for _ in $(seq 50); do
    grep -q "^Strata Studio: " "$studio_log" 2>/dev/null && break
    sleep 0.1
done
grep "^Strata Studio: " "$studio_log" || { cat "$studio_log"; exit 1; }
# the workspace stays while the studio serves it
trap 'strata -C "$ws" watch --stop >/dev/null 2>&1 || true' EXIT
echo "(serving $ws in the background as process $studio_pid;"
echo " 'kill $studio_pid && rm -rf $ws' stops it and removes the demo)"
