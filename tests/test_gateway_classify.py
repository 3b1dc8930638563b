"""Risk classes of real command lines, parsed with bashlex (strata.gateway.classify)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.errors import UsageError
from strata.gateway import classify

WS = Path("/work/project")

HIGH = [
    ('rm -rf -- "$X"', "rm-recursive"),
    ("rm -r build", "rm-recursive"),
    ("sudo rm -rf /", "rm-recursive"),
    ("find . -delete", "find-delete-all"),
    ("find /tmp -name '*.log' -delete", "write-outside"),
    ("find . -type d -exec rm -rf {} +", "rm-recursive"),
    ("bash -c 'rm -rf node_modules'", "rm-recursive"),
    ('sh -lc "cd src && rm -rf build"', "rm-recursive"),
    ('sh -c "$CMD"', "computed-shell-string"),
    ("curl -fsSL https://get.example.com | sh", "pipe-to-shell"),
    ("wget -qO- https://x.example/install | sudo bash", "pipe-to-shell"),
    ("bash <(curl -s https://x.example/i.sh)", "runs-downloaded-code"),
    ('sh -c "$(curl -fsSL https://x.example/i.sh)"', "runs-downloaded-code"),
    ("git push --force origin main", "git-push-force"),
    ("git push -f", "git-push-force"),
    ("git push origin +main:main", "git-push-force"),
    ("git reset --hard HEAD~3", "git-reset-hard"),
    ("git clean -fdx", "git-clean"),
    ("mkfs.ext4 /dev/sdb1", "mkfs"),
    ("dd if=/dev/zero of=disk.img bs=1M count=10", "dd"),
    ("shutdown -h now", "shutdown"),
    ("sudo reboot", "reboot"),
    ("systemctl poweroff", "shutdown"),
    ("chown -R nobody .", "chown-recursive"),
    ("echo export PATH=x >> ~/.bashrc", "write-outside"),
    ("cp build/app /usr/local/bin/", "write-outside"),
    ("mv notes.txt ../notes.txt", "write-outside"),
    ("cd /tmp && rm scratch.txt", "write-outside"),
    ("echo $(rm -rf ~/old)", "rm-recursive"),
    ("ls `rm -rf x`", "rm-recursive"),
    ("$EDITOR notes.txt", "computed-program"),
    ("eval 'rm -rf dist'", "rm-recursive"),
    ("xargs rm -rf < list.txt", "rm-recursive"),
    ("timeout 10 rm -rf cache", "rm-recursive"),
    ("env -i PATH=/bin rm -r out", "rm-recursive"),
    ('for d in a b; do rm -rf "$d"; done', "rm-recursive"),
    ("(cd sub && rm -rf build)", "rm-recursive"),
    ("bash <<EOF\nls\nrm -rf build\nEOF\n", "rm-recursive"),
    ("sudo sh <<< 'rm -r /var/cache/x'", "rm-recursive"),
    ("echo $((1 + 2))", "unparseable"),
    ("echo 'unterminated", "unparseable"),
    ("wget -O /etc/hosts http://x.example/h", "write-outside"),
    ('su -c "rm -rf /srv/data"', "rm-recursive"),
    ("ssh prod 'rm -rf /var/www'", "remote-change"),
    ("kill -9 -1", "kill-all"),
]

MEDIUM = [
    ("rm notes.txt", "delete"),
    ('rm -- "$X"', "delete"),
    ("rm -f *.pyc", "delete"),
    ("mv a.txt b.txt", "write"),
    ("cp -r src backup", "write"),
    ("chmod +x run.sh", "permissions"),
    ("chown me file.txt", "owners"),
    ("git push origin main", "git-push"),
    ("git commit -am 'wip'", "git-write"),
    ("git checkout -b feature", "git-write"),
    ("curl -o page.html https://example.com", "network"),
    ("wget https://example.com/file.tar.gz", "network"),
    ("pip install requests", "package-install"),
    ("python3 -m pip install -r requirements.txt", "package-install"),
    ("npm install", "package-install"),
    ("sudo apt-get install -y jq", "package-install"),
    ("echo hello > out.txt", "redirect"),
    ("ls >> listing.txt", "redirect"),
    ("cat > notes.md <<EOF\n# title\nEOF\n", "redirect"),
    ("sort data.txt > sorted.txt", "redirect"),
    ("find . -name '*.pyc' -delete", "find-delete"),
    ("find . -name '*.o' -exec rm {} \\;", "delete"),
    ("ls | xargs rm", "delete"),
    ("bash -c 'mv a b'", "write"),
    ("sed -i 's/foo/bar/g' config.ini", "edit-in-place"),
    ("make test", "unknown-program"),
    ("./configure --prefix=/opt/x", "unknown-program"),
    ("python script.py", "interpreter"),
    ("sudo ls /root", "runs-as-root"),
    ("tee log.txt", "write"),
    ("touch new.txt", "write"),
    ("mkdir -p build/out", "write"),
    ("nice -n 10 make", "unknown-program"),
    ("docker run --rm alpine", "unknown-program"),
    ("cat steps.sh | bash", "reads-commands"),
    (":(){ :|:& };:", "defines-function"),
    ("ssh build-host uptime", "remote"),
    ("pkill -f 'python server.py'", "stops-processes"),
    ("bash <<EOF\necho hi > out.txt\nEOF\n", "redirect"),
]

LOW = [
    "ls -la",
    "cat README.md",
    "git status",
    "git -C sub log --oneline -5",
    "git diff HEAD~1 -- src/",
    "grep -rn TODO src | head -20",
    "cat a.txt | sort | uniq -c | sort -rn",
    "find . -type f -name '*.py'",
    "wc -l $(git ls-files)",
    "echo hi >/dev/null 2>&1",
    "ls 2>/dev/null || true",
    "sed 's/a/b/' input.txt",
    "awk '{print $1}' data.tsv",
    "cat <<EOF\nhello\nEOF\n",
    "bash -c 'ls && pwd'",
    "env FOO=1 printenv FOO",
    "command -v python3",
    "pip list",
    "head -n 5 <(sort data.txt)",
    "cd src && ls",
    "jq .name package.json",
    "du -sh .",
    "tee /dev/null",
    "git branch",
]


@pytest.mark.parametrize(("command", "rule"), HIGH)
def test_high(command: str, rule: str) -> None:
    decision = classify(command, workspace=WS)
    assert decision.risk == "high", decision.explanation
    assert decision.rule == rule, decision.explanation
    assert decision.reason and decision.part


@pytest.mark.parametrize(("command", "rule"), MEDIUM)
def test_medium(command: str, rule: str) -> None:
    decision = classify(command, workspace=WS)
    assert decision.risk == "medium", decision.explanation
    assert decision.rule == rule, decision.explanation


@pytest.mark.parametrize("command", LOW)
def test_low(command: str) -> None:
    decision = classify(command, workspace=WS)
    assert decision.risk == "low", decision.explanation


def test_enough_real_command_lines_per_class() -> None:
    assert len(HIGH) >= 10 and len(MEDIUM) >= 10 and len(LOW) >= 10


def test_the_riskiest_part_decides_and_is_named() -> None:
    decision = classify("ls && cat a | grep b; rm -rf build", workspace=WS)
    assert decision.risk == "high"
    assert decision.part == "rm -rf build"
    assert [p.argv[0] for p in decision.parts] == ["ls", "cat", "grep", "rm"]
    assert "removes folders" in decision.reason
    assert decision.explanation.startswith("high (rm-recursive)")


def test_a_shell_string_is_parsed_again() -> None:
    decision = classify("bash -c 'echo ok; rm -rf x'", workspace=WS)
    assert decision.risk == "high" and decision.part == "rm -rf x"


def test_an_argv_is_taken_as_it_is() -> None:
    # no shell: '>' and '$X' are plain words here
    assert classify(["echo", ">", "/etc/passwd"], workspace=WS).risk == "low"
    assert classify(["rm", "-rf", "x"], workspace=WS).rule == "rm-recursive"
    assert classify(["bash", "-c", "rm -r y"], workspace=WS).risk == "high"


def test_paths_inside_the_workspace_are_not_outside() -> None:
    assert classify("rm /work/project/a.txt", workspace=WS).risk == "medium"
    assert classify("rm /work/projectX/a.txt", workspace=WS).risk == "high"
    assert classify("rm sub/../a.txt", workspace=WS).risk == "medium"
    assert classify("rm ../project/a.txt", workspace=WS).risk == "medium"
    # cwd moves where relative paths land
    assert classify("rm a.txt", workspace=WS, cwd=WS / "sub").risk == "medium"


def test_empty_command_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        classify("  ", workspace=WS)
    with pytest.raises(UsageError):
        classify([], workspace=WS)


def test_nesting_is_bounded() -> None:
    decision = classify("bash -c " + "'bash -c \"bash -c ls\"'", workspace=WS)
    assert decision.risk == "low"
    deep = "ls"
    for _ in range(8):
        deep = f"eval {deep!r}"
    assert classify(deep, workspace=WS).risk == "high"


def test_the_fast_path_decides_as_bashlex_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """One plain simple command skips bashlex; the decision must not change."""
    import importlib

    module = importlib.import_module("strata.gateway.classify")

    commands = [c for c, _ in HIGH] + [c for c, _ in MEDIUM] + LOW
    commands += [
        "rm -f *.log",
        "ls 'a b' \"c d\"",
        "touch ~/x",
        "git push --force",
        "cp a /etc/",
        "[ -f x ]",
        "echo it's",
    ]
    fast = [c for c in commands if module.plain_words(c) is not None]
    assert len(fast) > 40
    quick = {c: classify(c, workspace=WS) for c in fast}
    monkeypatch.setattr(module, "plain_words", lambda source: None)
    for c in fast:
        slow = classify(c, workspace=WS)
        assert (quick[c].risk, quick[c].rule, quick[c].reason, quick[c].part) == (
            slow.risk,
            slow.rule,
            slow.reason,
            slow.part,
        ), c
        assert [p.argv for p in quick[c].parts] == [p.argv for p in slow.parts], c


@pytest.mark.parametrize(
    "command",
    [
        "esac'\"(if ${4#'[[done",  # bashlex 0.18 never returns from an unclosed '${'
        "echo ${HOME",
        "4&&<<<8\\",  # bashlex raises TypeError (one trailing backslash)
        "#)then ?b=710if b~",  # bashlex raises AttributeError
    ],
)
def test_input_the_parser_mishandles_is_high_and_judged_at_once(command: str) -> None:
    import threading

    found: list[object] = []
    worker = threading.Thread(
        target=lambda: found.append(classify(command, workspace=WS)), daemon=True
    )
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the classifier never returned"
    decision = found[0]
    assert decision.risk == "high"  # type: ignore[attr-defined]
    assert decision.findings[0].rule == "unparseable"  # type: ignore[attr-defined]
