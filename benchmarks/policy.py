"""Policy decision time per command (parse with bashlex, classify, match the rules).

A corpus of 200 command lines — 100 written as agents and people type them
(reads, edits, deletes, git, package installs, downloads, pipelines,
heredocs, wrappers, ``find -exec``) and the same 100 once more wrapped as an
agent's shell tool sends them (``bash -lc '…'``, parsed twice) — is decided
by a policy with the profile ``workspace-write`` and five prefix rules.
Each command is decided ``--repeat`` times; the figures are the per-command
median, then the median, 90th percentile and maximum of those over the
corpus, and the first decisions of the process: one plain simple command
(split without bashlex), then the first that needs bashlex (its import
builds the parser's tables).

Target: every command under 1 ms.

Run:  .venv/bin/python benchmarks/policy.py [--repeat 50]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import time
from pathlib import Path

BASE = [
    "ls -la",
    "ls -la src/ | head -20",
    "cat README.md",
    "cat pyproject.toml | grep -n version",
    "head -n 50 src/app/main.py",
    "tail -f logs/app.log",
    "grep -rn 'TODO' src --include='*.py'",
    "rg -n 'def main' src",
    "find . -type f -name '*.py' | wc -l",
    "find . -name '*.pyc' -delete",
    "find . -type d -name __pycache__ -exec rm -rf {} +",
    "find /tmp -name 'build-*' -mtime +3 -delete",
    "wc -l $(git ls-files '*.py')",
    "git status",
    "git status --short",
    "git diff HEAD~1 -- src/",
    "git log --oneline -20",
    "git show HEAD:README.md",
    "git branch -a",
    "git add -A && git commit -m 'wip: refactor parser'",
    "git checkout -b feature/login",
    "git pull --rebase origin main",
    "git push origin feature/login",
    "git push --force-with-lease origin feature/login",
    "git push -f origin main",
    "git reset --hard origin/main",
    "git clean -fdx",
    "git stash list",
    "git -C vendor/lib log -3",
    "rm -rf node_modules",
    'rm -rf -- "$BUILD_DIR"',
    "rm -f *.log",
    "rm build/output.bin",
    "rm -r dist build *.egg-info",
    "mv src/old_name.py src/new_name.py",
    "cp .env.example .env",
    "cp -r templates/ /etc/myapp/",
    "mkdir -p build/reports && touch build/reports/.keep",
    "chmod +x scripts/deploy.sh",
    "chmod -R 755 public/",
    "chown -R www-data:www-data /var/www",
    "sudo chown -R $USER ~/.npm",
    "sed -i 's/DEBUG = True/DEBUG = False/' settings.py",
    "sed -n '1,20p' settings.py",
    "awk -F, '{print $2}' data.csv | sort | uniq -c | sort -rn | head",
    "echo 'export PATH=$HOME/.local/bin:$PATH' >> ~/.bashrc",
    "echo done > status.txt",
    "printf '%s\\n' a b c > list.txt",
    "cat > config.yaml <<EOF\nname: demo\nport: 8080\nEOF\n",
    "cat <<'EOF'\nhello $USER\nEOF\n",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]'",
    "pip install requests==2.32.0",
    "pip list --outdated",
    "npm install",
    "npm ci && npm run build",
    "npm test -- --watch=false",
    "yarn add lodash",
    "cargo build --release",
    "cargo install ripgrep",
    "go test ./...",
    "sudo apt-get update && sudo apt-get install -y build-essential",
    "brew install jq",
    "make -j4 test",
    "pytest -q tests/test_api.py -k login",
    "python manage.py migrate",
    "node scripts/seed.js",
    "docker compose up -d",
    "docker run --rm -v $(pwd):/src alpine ls /src",
    "curl -s https://api.github.com/repos/python/cpython | jq .stargazers_count",
    "curl -fsSL https://get.docker.com | sh",
    "curl -sSf https://sh.rustup.rs | sh -s -- -y",
    "wget -qO- https://example.com/install.sh | sudo bash",
    "bash <(curl -s https://example.com/setup.sh)",
    'sh -c "$(curl -fsSL https://raw.githubusercontent.com/x/y/master/install.sh)"',
    "wget https://example.com/data.tar.gz && tar xzf data.tar.gz",
    "tar czf backup.tar.gz src/",
    "unzip -o archive.zip -d out/",
    "dd if=/dev/zero of=disk.img bs=1M count=100",
    "mkfs.ext4 /dev/sdb1",
    "sudo reboot",
    "shutdown -h now",
    "kill -9 $(pgrep -f 'python server.py')",
    "ps aux | grep python | grep -v grep",
    "xargs -n1 rm < files-to-delete.txt",
    "ls *.tmp | xargs rm -f",
    "timeout 30 npm test",
    "nice -n 19 make all",
    "env NODE_ENV=production node server.js",
    "export FOO=bar && echo $FOO",
    "cd frontend && npm run lint",
    "cd /tmp && rm -rf scratch",
    "(cd docs && make html)",
    'for f in *.md; do pandoc "$f" -o "${f%.md}.html"; done',
    'while read -r line; do echo "$line"; done < input.txt',
    "if [ -f .env ]; then source .env; fi",
    "$EDITOR notes.txt",
    'eval "$(pyenv init -)"',
    "echo $((2 + 2))",
    "[[ -d build ]] && rm -rf build",
    "jq '.dependencies | keys' package.json",
]

RULES = {
    "profile": "workspace-write",
    "rules": [
        {
            "name": "git-read",
            "pattern": ["git", ["status", "log", "diff", "show", "branch"]],
            "decision": "allow",
            "match": ["git status", "git log -5"],
            "not_match": ["git push"],
        },
        {"name": "no-force", "pattern": ["git", "push", "-f"], "decision": "forbid"},
        {"name": "tests", "pattern": [["pytest", "make"]], "decision": "allow"},
        {"name": "npm", "pattern": ["npm", ["ci", "test", "run"]], "decision": "allow"},
        {"name": "clean", "pattern": ["rm", "-rf", "node_modules"], "decision": "allow"},
    ],
}


def corpus() -> list[str]:
    """200 command lines: the base 100, and each as an agent's ``bash -lc`` tool call."""
    return BASE + [f"bash -lc {shlex.quote(c)}" for c in BASE]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    from strata.gateway import load_policy
    from strata.gateway.classify import plain_words

    commands = corpus()
    assert len(commands) == 200, len(commands)
    workspace = Path("/work/project")
    start = time.perf_counter()
    policy = load_policy(RULES, workspace=workspace)
    first = policy.decide(commands[0])  # one plain simple command: split, bashlex not needed
    cold_ms = (time.perf_counter() - start) * 1000
    assert first.decision == "allow"
    start = time.perf_counter()
    policy.decide("ls | wc -l")  # the first that needs bashlex: imported (its tables built)
    bashlex_ms = (time.perf_counter() - start) * 1000

    per_command: list[tuple[float, str, str, str]] = []
    counts: dict[str, int] = {}
    for command in commands:
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            decision = policy.decide(command)
            times.append((time.perf_counter() - t) * 1000)
        counts[f"{decision.risk}/{decision.decision}"] = (
            counts.get(f"{decision.risk}/{decision.decision}", 0) + 1
        )
        per_command.append((statistics.median(times), command, decision.risk, decision.decision))
    medians = sorted(m for m, *_ in per_command)
    p90 = medians[int(len(medians) * 0.9) - 1]
    slowest = max(per_command)
    over = sum(1 for m in medians if m >= 1.0)
    load = os.getloadavg()
    print(
        f"# benchmarks/policy.py --repeat {args.repeat}, {datetime.date.today()}, "
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"load {load[0]:.1f}"
    )
    print(f"policy loaded and first (plain) decision: {cold_ms:.1f} ms")
    print(f"first decision that needs bashlex (import, parser tables built): {bashlex_ms:.1f} ms")
    plain = sum(1 for c in commands if plain_words(c) is not None)
    print(f"plain simple commands (split without bashlex): {plain} of {len(commands)}")
    print(
        f"per command (median of {args.repeat}): median {statistics.median(medians):.3f} ms, "
        f"p90 {p90:.3f} ms, max {slowest[0]:.3f} ms ({slowest[1][:60]!r})"
    )
    print(f"commands at or over 1 ms: {over} of {len(medians)}")
    print("classes/decisions:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    base = statistics.median(sorted(m for m, c, *_ in per_command if not c.startswith("bash -lc")))
    wrapped = statistics.median(sorted(m for m, c, *_ in per_command if c.startswith("bash -lc")))
    print(f"median: as typed {base:.3f} ms, wrapped in bash -lc (parsed twice) {wrapped:.3f} ms")


if __name__ == "__main__":
    main()
