#!/usr/bin/env bash
# A short tour: make a sample workspace, snapshot, edit, diff, rewind.
set -euo pipefail

ws=$(mktemp -d "${TMPDIR:-/tmp}/strata-demo.XXXXXX")
trap 'rm -rf "$ws"' EXIT
cd "$ws"
export STRATA_AUTHOR=demo

run() {
    printf '\n\033[1m$ %s\033[0m\n' "$*"
    "$@"
}

mkdir -p src docs
printf 'def greet(name):\n    return "hello " + name\n' > src/app.py
printf '# Sample project\n' > README.md
printf 'notes\n' > docs/notes.txt
head -c 2048 /dev/urandom > logo.bin

run strata init
run strata snapshot -m "the project before the agent"

# An "agent" edits a file, deletes one, adds one and rewrites a binary.
printf 'def greet(name):\n    return f"hello, {name}!"\n\ndef bye():\n    return "bye"\n' > src/app.py
rm docs/notes.txt
printf 'print("new")\n' > src/new.py
head -c 2048 /dev/urandom > logo.bin

run strata status
run strata snapshot -m "agent: friendlier greeting" --author agent-1 --author-kind agent
run strata history
run strata diff HEAD~1 HEAD --stat
run strata diff HEAD~1 HEAD --file src/app.py

# A person starts typing, then decides the agent's change was wrong.
printf 'x = 1  # unsaved experiment\n' > scratch.py
run strata rewind HEAD~1
run cat src/app.py
run ls

echo
echo "The experiment in scratch.py was auto-saved before the rewind; it is one rewind away:"
auto=$(strata history --json --limit 3 | python3 -c 'import json,sys; print([e["id"] for e in json.load(sys.stdin) if e["action_type"]=="auto_save"][0])')
run strata rewind "$auto"
run cat scratch.py
run strata check
