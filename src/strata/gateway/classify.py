"""Risk classification of shell commands, with a real shell parser (bashlex).

:func:`classify` parses a command line (or takes an argv list as it is) and
sorts every simple command it finds into a risk class:

``high``
    destroys or escapes: ``rm -r``/``rm -rf``, ``mkfs``, ``dd``, ``shutdown``,
    ``reboot``, ``chown -R``, ``git push --force``, ``git reset --hard``,
    ``git clean -f``, a write outside the workspace, code downloaded and run
    (``curl … | sh``, ``bash <(curl …)``), ``find`` deleting everything it
    visits, a program or shell string computed at run time (``$CMD``,
    ``sh -c "$X"``), and input the parser cannot read (unparseable input is
    high).
``medium``
    changes files or reaches out: ``rm``, ``mv``, ``cp``, ``chmod``,
    ``sed -i``, ``git push``/``commit``/``checkout``…, ``curl``/``wget``,
    package installs, an output redirect to a file, and any program not on
    the read-only list (an unknown program is medium).
``low``
    the programs of :data:`READ_ONLY` used read-only (``ls``, ``cat``,
    ``grep``, ``git status``, ``find`` without actions…).

Compound input is classified by its riskiest part: pipelines, ``&&``/``||``/
``;`` lists, subshells, ``if``/``for``/``while`` bodies, functions, command
substitutions (``$(…)`` and backticks), process substitutions, and the
strings given to ``sh -c``/``bash -c``/``eval`` (parsed again, up to
:data:`MAX_DEPTH` levels). Wrappers (``sudo``, ``doas``, ``env``, ``nice``,
``timeout``, ``nohup``, ``xargs``, ``stdbuf``, ``ionice``, ``time``,
``command``, ``exec``) are looked through to the command they run; ``sudo``
and ``doas`` make it at least medium (it runs as root). ``find -exec CMD``
classifies ``CMD``.

Every decision names the part that decided it and the rule (an id such as
``rm-recursive``) with a reason a person can read. Nothing here runs a
command or reads the environment: ``~`` is taken to be outside the
workspace, and a path that holds a ``$VARIABLE`` is one whose place is
unknown.
"""

from __future__ import annotations

import os
import posixpath
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from strata.errors import UsageError

Risk = Literal["low", "medium", "high"]
RISKS: tuple[Risk, ...] = ("low", "medium", "high")
_RANK: dict[str, int] = {"low": 0, "medium": 1, "high": 2}

#: how deep ``sh -c '…'`` strings (and ``eval``) are parsed again before the input counts as high
MAX_DEPTH = 6

#: programs that only read (with the exceptions their own rules make: ``sort -o``, ``sed -i``…)
READ_ONLY: frozenset[str] = frozenset(
    """
    ls ll dir cat tac head tail less more bat grep egrep fgrep rg ag ack wc sort uniq cut tr
    echo printf pwd whoami id groups date cal uname hostname which whereis type file stat du
    df tree diff cmp comm md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum cksum
    sum basename dirname realpath readlink true false test [ printenv ps pgrep jq yq column
    nl od xxd hexdump strings seq sleep expr cd pushd popd export unset set alias read exit
    return shift local declare typeset : rev fold fmt paste join locale uptime free nproc
    lscpu lsblk man help whatis apropos tput tty wait history jobs fc getconf arch hash zcat
    zless bzcat xzcat lsof top htop env sed awk find git pip pip3 npm yes
    """.split()  # noqa: SIM905
)
"""Programs known to only read; some (``sed``, ``awk``, ``find``, ``git``, ``pip``, ``npm``,
``env``) are low only in their read-only forms, which their own rules check."""

SHELLS: frozenset[str] = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish"})
INTERPRETERS: frozenset[str] = SHELLS | frozenset(
    {"python", "python3", "python2", "perl", "ruby", "node", "nodejs", "php", "lua", "pwsh"}
)
DOWNLOADERS: frozenset[str] = frozenset({"curl", "wget", "fetch", "aria2c", "http", "xh"})

#: always high: they destroy disks, data or the running system
DESTRUCTIVE: dict[str, str] = {
    "dd": "writes raw blocks (dd)",
    "shutdown": "shuts the machine down",
    "reboot": "reboots the machine",
    "halt": "halts the machine",
    "poweroff": "powers the machine off",
    "fdisk": "edits partition tables",
    "sfdisk": "edits partition tables",
    "parted": "edits partition tables",
    "wipefs": "wipes file-system signatures",
    "shred": "overwrites files beyond recovery",
    "mkswap": "formats a swap device",
    "kexec": "boots another kernel",
}

#: package managers and the subcommands that install or remove packages
PACKAGE_MANAGERS: dict[str, frozenset[str]] = {
    "pip": frozenset({"install", "uninstall", "download", "wheel"}),
    "pip3": frozenset({"install", "uninstall", "download", "wheel"}),
    "uv": frozenset({"pip", "add", "remove", "sync", "tool"}),
    "poetry": frozenset({"add", "remove", "install", "update"}),
    "pipx": frozenset({"install", "uninstall", "upgrade", "run"}),
    "npm": frozenset({"install", "i", "ci", "add", "uninstall", "remove", "rm", "update", "exec"}),
    "npx": frozenset(),
    "yarn": frozenset({"add", "install", "remove", "upgrade", ""}),
    "pnpm": frozenset({"add", "install", "i", "remove", "update", "dlx"}),
    "bun": frozenset({"add", "install", "i", "remove", "x"}),
    "apt": frozenset({"install", "remove", "purge", "upgrade", "full-upgrade", "autoremove"}),
    "apt-get": frozenset({"install", "remove", "purge", "upgrade", "dist-upgrade", "autoremove"}),
    "dnf": frozenset({"install", "remove", "erase", "upgrade", "update"}),
    "yum": frozenset({"install", "remove", "erase", "upgrade", "update"}),
    "apk": frozenset({"add", "del", "upgrade"}),
    "pacman": frozenset(),
    "zypper": frozenset({"install", "in", "remove", "rm", "update", "up"}),
    "brew": frozenset({"install", "uninstall", "upgrade", "reinstall"}),
    "cargo": frozenset({"install", "uninstall", "add", "remove"}),
    "gem": frozenset({"install", "uninstall", "update"}),
    "go": frozenset({"install", "get"}),
    "conda": frozenset({"install", "remove", "update", "create"}),
    "mamba": frozenset({"install", "remove", "update", "create"}),
    "snap": frozenset({"install", "remove", "refresh"}),
}

_GIT_READ = frozenset(
    """
    status log diff show rev-parse ls-files ls-tree cat-file blame grep describe shortlog
    show-ref for-each-ref whatchanged version help rev-list merge-base name-rev check-ignore
    count-objects var show-branch annotate cherry range-diff ls-remote
    """.split()  # noqa: SIM905
)
_GIT_GLOBAL_WITH_VALUE = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"}
)
_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"})
_OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_FIND_FILTERS = frozenset(
    """
    -name -iname -path -ipath -wholename -iwholename -regex -iregex -type -xtype -newer
    -mtime -mmin -atime -amin -ctime -cmin -size -user -group -uid -gid -perm -empty -links
    -inum -samefile -lname -ilname -nouser -nogroup -maxdepth -mindepth -newermt
    """.split()  # noqa: SIM905
)
_FIND_WRITES = frozenset({"-fprint", "-fprint0", "-fls", "-fprintf"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


@dataclass(frozen=True)
class Finding:
    """One rule that fired on one part of a command."""

    risk: Risk
    rule: str
    """The rule's id, e.g. ``rm-recursive`` or ``unknown-program``."""
    reason: str
    part: str
    """The command text the rule judged (a simple command, a redirect, a pipeline)."""

    def to_json(self) -> dict[str, str]:
        """The finding as JSON."""
        return {"risk": self.risk, "rule": self.rule, "reason": self.reason, "part": self.part}


@dataclass(frozen=True)
class Part:
    """A simple command found in the input, as the shell would run it.

    ``argv`` is its words after quote removal (assignments before the program
    dropped); ``findings`` the rules that fired on it, riskiest first.
    """

    argv: tuple[str, ...]
    text: str
    risk: Risk
    findings: tuple[Finding, ...]

    def to_json(self) -> dict[str, Any]:
        """The part as JSON."""
        return {
            "argv": list(self.argv),
            "text": self.text,
            "risk": self.risk,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True)
class RiskDecision:
    """The risk class of a command, and why: the riskiest part and the rule that fired."""

    command: str
    risk: Risk
    rule: str
    reason: str
    part: str
    parts: tuple[Part, ...] = ()
    findings: tuple[Finding, ...] = field(default=())
    """Every rule that fired, riskiest first."""

    @property
    def explanation(self) -> str:
        """One line: the class, the rule and the part, e.g. ``high (rm-recursive): …``."""
        return f"{self.risk} ({self.rule}): {self.reason} [{self.part}]"

    def to_json(self) -> dict[str, Any]:
        """The decision as JSON."""
        return {
            "command": self.command,
            "risk": self.risk,
            "rule": self.rule,
            "reason": self.reason,
            "part": self.part,
            "parts": [p.to_json() for p in self.parts],
        }


def riskier(a: str, b: str) -> bool:
    """True when risk class ``a`` is riskier than ``b``."""
    return _RANK[a] > _RANK[b]


def _adder(out: list[Finding], text: str) -> Callable[[Risk, str, str], None]:
    """``add(risk, rule, reason)``: append a finding about ``text`` to ``out``."""

    def add(risk: Risk, rule: str, reason: str) -> None:
        out.append(Finding(risk, rule, reason, text))

    return add


def classify(
    command: str | Sequence[str],
    *,
    workspace: Path | str,
    cwd: Path | str | None = None,
) -> RiskDecision:
    """The risk class of ``command``: a shell string (parsed) or an argv list (taken as it is).

    ``workspace`` is the folder writes must stay in; ``cwd`` (default: the
    workspace) is where relative paths start. An empty command is a
    :class:`~strata.errors.UsageError`.
    """
    ws = Path(os.path.normpath(Path(workspace).absolute()))
    here = Path(os.path.normpath(Path(cwd).absolute())) if cwd is not None else ws
    if isinstance(command, str):
        text = command
        if not text.strip():
            raise UsageError("the command is empty")
    else:
        argv = [str(a) for a in command]
        if not argv or not argv[0]:
            raise UsageError("the command is empty")
        text = shlex.join(argv)
    walker = _Walker(ws, here)
    if isinstance(command, str):
        walker.parse(command, depth=0)
    else:
        walker.simple([_Word(a) for a in argv], text, depth=0)
    return walker.decision(text)


@dataclass
class _Word:
    text: str
    dynamic: bool = False
    """It holds an expansion (``$X``, ``$(…)``, ``~``): its value is known only at run time."""
    subs: tuple[Any, ...] = ()
    """The command and process substitutions inside it (bashlex nodes)."""
    tilde: bool = False


class _Walker:
    """Walks the parse tree, collecting :class:`Part` s."""

    def __init__(self, workspace: Path, cwd: Path) -> None:
        self.workspace = workspace
        self.real_workspace = Path(os.path.realpath(workspace))
        self.cwd: Path | None = cwd
        """Where relative paths start; None once a ``cd`` went somewhere unknown."""
        self.cwd_outside = False
        """A ``cd`` left the workspace: relative paths are outside it."""
        self.parts: list[Part] = []
        self.loose: list[Finding] = []  # findings not tied to one simple command
        self.stdin_script: str | None = None
        """The here-document (or here-string) fed to the simple command being judged."""

    # -- the result ---------------------------------------------------------------------

    def decision(self, text: str) -> RiskDecision:
        findings = [f for p in self.parts for f in p.findings] + self.loose
        if not findings:
            return RiskDecision(
                text, "low", "no-command", "nothing to run", text, tuple(self.parts)
            )
        ordered = sorted(findings, key=lambda f: -_RANK[f.risk])  # stable: first riskiest wins
        top = ordered[0]
        return RiskDecision(
            text, top.risk, top.rule, top.reason, top.part, tuple(self.parts), tuple(ordered)
        )

    # -- parsing --------------------------------------------------------------------------

    def parse(self, source: str, *, depth: int, where: str = "") -> None:
        if depth > MAX_DEPTH:
            self.loose.append(
                Finding("high", "too-deep", "shell strings nested too deeply to judge", source)
            )
            return
        words = plain_words(source)
        if words is not None:  # one simple command: no need for the full parser
            self.simple(words, source.strip(), depth)
            return
        import bashlex
        from bashlex.errors import ParsingError

        try:
            if _unclosed_parameter(source):
                # bashlex 0.18 loops forever on a '${' with no '}' after it
                raise ParsingError("a '${' is never closed", source, source.find("${"))
            trees = bashlex.parse(source)
        except (ParsingError, NotImplementedError, *BASHLEX_BUGS) as exc:
            what = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.loose.append(
                Finding(
                    "high",
                    "unparseable",
                    f"the shell parser cannot read it{where} ({what}), so it cannot be judged",
                    source,
                )
            )
            return
        for tree in trees:
            self.node(tree, source, depth)

    def node(self, node: Any, source: str, depth: int) -> None:
        kind = node.kind
        if kind == "command":
            self.command(node, source, depth)
        elif kind == "pipeline":
            commands = [p for p in node.parts if p.kind != "pipe"]
            for c in commands:
                self.node(c, source, depth)
            self.pipe_to_shell(commands, source, node)
        elif kind in ("list", "if", "for", "while", "until"):
            for p in node.parts:
                self.node(p, source, depth)
        elif kind == "function":
            name = node.name.word if getattr(node, "name", None) is not None else "?"
            self.loose.append(
                Finding(
                    "medium",
                    "defines-function",
                    f"defines a shell function ({name}): what its calls run is not judged by name",
                    _text(node, source),
                )
            )
            for p in node.parts:
                self.node(p, source, depth)
        elif kind == "compound":
            for p in node.list:
                self.node(p, source, depth)
            for r in getattr(node, "redirects", ()) or ():
                self.redirect(r, source, depth, self.loose)
        elif kind in ("reservedword", "operator", "pipe", "word", "assignment"):
            for sub in _substitutions(node):
                self.node(sub, source, depth)
        else:
            self.loose.append(
                Finding(
                    "high",
                    "unsupported-construct",
                    f"a shell construct ({kind}) the classifier does not judge",
                    _text(node, source),
                )
            )

    def command(self, node: Any, source: str, depth: int) -> None:
        text = _text(node, source)
        words: list[_Word] = []
        extra: list[Finding] = []
        seen_program = False
        heredoc: str | None = None
        for p in node.parts:
            if p.kind == "assignment" and not seen_program:
                for sub in _substitutions(p):
                    self.node(sub, source, depth)
            elif p.kind == "word":
                seen_program = True
                words.append(_word(p))
            elif p.kind == "redirect":
                self.redirect(p, source, depth, extra)
                if p.type in ("<<", "<<-") and getattr(p, "heredoc", None) is not None:
                    body = p.heredoc.value.rsplit("\n", 1)[0]  # without the delimiter line
                    heredoc = body
                elif p.type == "<<<":
                    heredoc = _word(p.output).text if not isinstance(p.output, int) else None
        for w in words:
            for sub in w.subs:
                self.node(sub, source, depth)
        if not words:
            if extra:
                self.parts.append(Part((), text, _top(extra), tuple(extra)))
            return
        self.stdin_script = heredoc
        try:
            self.simple(words, text, depth, extra=extra)
        finally:
            self.stdin_script = None

    def redirect(self, node: Any, source: str, depth: int, sink: list[Finding]) -> None:
        kind = node.type
        target = node.output
        if kind not in _OUTPUT_REDIRECTS:
            if not isinstance(target, int) and target is not None:
                for sub in _substitutions(target):
                    self.node(sub, source, depth)
            return
        if isinstance(target, int):  # 2>&1, >&2: a descriptor, no file
            return
        word = _word(target)
        for sub in word.subs:
            self.node(sub, source, depth)
        text = _text(node, source)
        where = self.place(word)
        if where == "sink":
            return
        if where == "outside":
            sink.append(
                Finding("high", "write-outside", "redirects output outside the workspace", text)
            )
        elif where == "repository":
            sink.append(
                Finding("high", "write-repository", "redirects output into Strata's .strata", text)
            )
        elif where == "unknown":
            sink.append(
                Finding("medium", "redirect", "redirects output to a file named at run time", text)
            )
        else:
            sink.append(Finding("medium", "redirect", "redirects output into a file", text))

    def pipe_to_shell(self, commands: list[Any], source: str, node: Any) -> None:
        downloading = False
        for c in commands:
            argv = _literal_argv(c)
            program = _program(_unwrap(argv)) if argv else ""
            if downloading and program in INTERPRETERS:
                self.loose.append(
                    Finding(
                        "high",
                        "pipe-to-shell",
                        f"pipes downloaded data into {program}, which runs it as code",
                        _text(node, source),
                    )
                )
                return
            if program in DOWNLOADERS:
                downloading = True

    # -- simple commands -----------------------------------------------------------------

    def simple(
        self, words: list[_Word], text: str, depth: int, *, extra: Sequence[Finding] = ()
    ) -> None:
        found = list(extra)
        self.judge(words, text, depth, found)
        argv = tuple(w.text for w in words)
        risk = _top(found) if found else "low"
        if not found:
            found.append(Finding("low", "read-only", f"{_program(list(argv))} only reads", text))
        ordered = tuple(sorted(found, key=lambda f: -_RANK[f.risk]))
        self.parts.append(Part(argv, text, risk, ordered))

    def judge(self, words: list[_Word], text: str, depth: int, out: list[Finding]) -> None:
        """Add what the rules find in the simple command ``words`` to ``out``."""
        add = _adder(out, text)

        if not words:
            return
        first = words[0]
        if first.dynamic:
            add("high", "computed-program", f"the program ({first.text}) is known only at run time")
            return
        name = _basename(first.text)
        args = words[1:]

        # wrappers: judge the command they run
        wrapped = _wrapped(name, args)
        if wrapped is not None:
            inner, _ = wrapped
            if inner:
                self.judge(inner, text, depth, out)
            if name in ("sudo", "doas"):
                add("medium", "runs-as-root", f"{name} runs the command as root")
            return

        if name in ("cd", "pushd"):
            self.change_folder(args)
            return
        if name in SHELLS or name == "eval" or name in ("source", "."):
            self.shell(name, args, text, depth, out)
            return
        if name in DESTRUCTIVE:
            add("high", name, DESTRUCTIVE[name])
            return
        if name.startswith("mkfs") or name.startswith("mke2fs"):
            add("high", "mkfs", "formats a file system")
            return
        if name in ("init", "telinit") and any(a.text in ("0", "6") for a in args):
            add("high", "shutdown", "shuts down or reboots the machine")
            return
        if name == "systemctl" and any(
            a.text in ("poweroff", "reboot", "halt", "kexec", "suspend", "hibernate") for a in args
        ):
            add("high", "shutdown", "shuts down or reboots the machine")
            return
        if name in DOWNLOADERS:
            self.downloader(name, args, add)
            return
        if name == "su":
            self.su(args, text, depth, out)
            return
        if name == "ssh":
            self.ssh(args, add)
            return
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(self, name, args, text, depth, out)
            return
        if name in PACKAGE_MANAGERS:
            self.package(name, args, add)
            return
        if name in INTERPRETERS:
            self.interpreter(name, args, add)
            return
        if name in READ_ONLY:
            for w in args:
                self.downloaded_code(w, add)
            return
        add("medium", "unknown-program", f"{name} is not on the list of read-only programs")

    def shell(
        self, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
    ) -> None:
        add = _adder(out, text)

        for w in args:
            if self.downloaded_code(w, add):
                return
        if name in ("source", "."):
            add("medium", "runs-script", f"{name} runs a script file in the shell")
            return
        if name == "eval":
            if any(w.dynamic for w in args):
                add("high", "computed-shell-string", "eval runs a string known only at run time")
                return
            self.parse(" ".join(w.text for w in args), depth=depth + 1, where=" (eval)")
            return
        script: _Word | None = None
        i = 0
        while i < len(args):
            a = args[i].text
            if a == "--":
                i += 1
                break
            if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                i += 2
                continue
            if len(a) > 1 and a[0] in "-+" and not a.startswith("--") and "c" in a[1:]:
                script = args[i + 1] if i + 1 < len(args) else None
                if script is None:
                    add("high", "unparseable", f"{name} -c without a command string")
                    return
                break
            if a.startswith("-") or a.startswith("+"):
                i += 1
                continue
            break
        if script is None:
            if i < len(args):
                add("medium", "runs-script", f"{name} runs the script {args[i].text}")
            elif self.stdin_script is not None:  # bash <<EOF … EOF: the document is the script
                self.parse(self.stdin_script, depth=depth + 1, where=f" ({name} here-document)")
            else:  # what feeds it is judged by the pipeline too (curl … | sh)
                add("medium", "reads-commands", f"{name} runs the commands it reads from its input")
            return
        if script.dynamic:
            add(
                "high",
                "computed-shell-string",
                f"{name} -c runs a string known only at run time ({script.text})",
            )
            return
        self.parse(script.text, depth=depth + 1, where=f" ({name} -c)")

    def su(self, args: list[_Word], text: str, depth: int, out: list[Finding]) -> None:
        """``su [-] [USER] -c COMMAND``: the command is judged; su runs it as another user."""
        out.append(Finding("medium", "runs-as-root", "su runs a shell as another user", text))
        for i, a in enumerate(args):
            if a.text in ("-c", "--command") and i + 1 < len(args):
                command = args[i + 1]
                if command.dynamic:
                    out.append(
                        Finding(
                            "high",
                            "computed-shell-string",
                            f"su -c runs a string known only at run time ({command.text})",
                            text,
                        )
                    )
                    return
                self.parse(command.text, depth=depth + 1, where=" (su -c)")
                return

    def ssh(self, args: list[_Word], add: Any) -> None:
        """``ssh HOST COMMAND``: a command that changes anything there is high."""
        i = 0
        while i < len(args) and args[i].text.startswith("-"):
            i += 2 if args[i].text in _SSH_WITH_VALUE else 1
        remote = args[i + 1 :]
        if not remote:
            add("medium", "remote", "ssh opens a session on another machine")
            return
        there = _Walker(Path("/nonexistent/remote"), Path("/nonexistent/remote"))
        there.parse(" ".join(w.text for w in remote), depth=MAX_DEPTH)  # no nesting there
        judged = there.decision(" ".join(w.text for w in remote))
        if judged.risk == "low":
            add("medium", "remote", "ssh runs a command on another machine")
        else:
            add("high", "remote-change", f"ssh runs a command on another machine: {judged.reason}")

    def downloaded_code(self, word: _Word, add: Any) -> bool:
        """True (and high) when ``word`` substitutes the output of a downloader (``$(curl …)``)."""
        for sub in word.subs:
            argv = _literal_argv(sub)
            if argv and _program(_unwrap(argv)) in DOWNLOADERS:
                add("high", "runs-downloaded-code", "runs code it downloads")
                return True
        return False

    def downloader(self, name: str, args: list[_Word], add: Any) -> None:
        outputs = []
        for i, w in enumerate(args):
            if w.text in ("-o", "-O", "--output", "--output-document") and i + 1 < len(args):
                outputs.append(args[i + 1])
        for out in outputs:
            if self.place(out) == "outside":
                add("high", "write-outside", f"{name} writes a file outside the workspace")
                return
        add("medium", "network", f"{name} reaches the network")

    def package(self, name: str, args: list[_Word], add: Any) -> None:
        sub = next((a.text for a in args if not a.text.startswith("-")), "")
        installs = PACKAGE_MANAGERS[name]
        if not installs or sub in installs:
            add("medium", "package-install", f"{name} {sub} installs or removes packages".strip())
            return
        add("medium", "unknown-program", f"{name} {sub} may change the environment".strip())

    def interpreter(self, name: str, args: list[_Word], add: Any) -> None:
        for w in args:
            if self.downloaded_code(w, add):
                return
        texts = [a.text for a in args]
        if (
            len(texts) >= 3
            and texts[0] == "-m"
            and texts[1] in ("pip", "pip3")
            and texts[2] in PACKAGE_MANAGERS["pip"]
        ):
            add("medium", "package-install", f"{name} -m pip {texts[2]} installs packages")
            return
        if texts in (["--version"], ["-V"]):
            return
        add("medium", "interpreter", f"{name} runs code the classifier cannot read")

    # -- paths ---------------------------------------------------------------------------

    def place(self, word: _Word) -> str:
        """Where a written path lands: inside, repository, outside, sink or unknown.

        ``repository`` is the workspace's own ``.strata`` (Strata's records).
        """
        text = word.text
        if word.tilde or text.startswith("~"):
            return "outside"
        if word.dynamic:
            return "unknown"
        if text in _SINKS or text.startswith("/dev/fd/"):
            return "sink"
        if not text.startswith("/"):
            if self.cwd_outside:
                return "outside"
            if self.cwd is None:
                return "unknown"
        path = Path(posixpath.normpath(posixpath.join(str(self.cwd or "/"), text)))
        for root in (self.workspace, self.real_workspace):
            if path == root or path.is_relative_to(root):
                private = root / ".strata"
                return "repository" if path.is_relative_to(private) else "inside"
        return "outside"

    def change_folder(self, args: list[_Word]) -> None:
        """Follow a ``cd``: later relative paths start where it went."""
        operands = [a for a in args if not a.text.startswith("-") or a.text == "-"]
        if not operands:
            self.cwd, self.cwd_outside = None, True  # cd alone: the home folder
            return
        target = operands[0]
        where = self.place(target)
        if where == "outside":
            self.cwd_outside = True
        elif where == "inside" and target.text != "-":
            self.cwd = Path(posixpath.normpath(posixpath.join(str(self.cwd or "/"), target.text)))
        else:
            self.cwd = None

    def writes(
        self,
        targets: Sequence[_Word],
        add: Any,
        *,
        rule: str,
        reason: str,
        risk: Risk = "medium",
    ) -> None:
        """Judge a command that writes ``targets``: high outside the workspace, else ``risk``."""
        for t in targets:
            where = self.place(t)
            if where == "outside":
                add("high", "write-outside", f"{reason} outside the workspace ({t.text})")
                return
            if where == "repository":
                add("high", "write-repository", f"{reason} in Strata's .strata ({t.text})")
                return
        add(risk, rule, reason)


#: what bashlex 0.18 raises on input it mishandles besides its ParsingError and
#: NotImplementedError (seen by fuzzing it: AttributeError and TypeError on a stray
#: newline or backslash); such input is unparseable, so high, never a crash of the gate
BASHLEX_BUGS: tuple[type[Exception], ...] = (
    AttributeError,
    TypeError,
    LookupError,
    ValueError,
    RecursionError,
)


def _unclosed_parameter(source: str) -> bool:
    """True when a ``${`` has no ``}`` after it (the input bashlex never returns from)."""
    at = source.find("${")
    while at != -1:
        if source.find("}", at + 2) == -1:
            return True
        at = source.find("${", at + 2)
    return False


# -- the rules of single programs ------------------------------------------------------------


def _split(args: Sequence[_Word]) -> tuple[set[str], list[str], list[_Word]]:
    """Short flags, long options and operands of ``args`` (``--`` ends the options)."""
    short: set[str] = set()
    long: list[str] = []
    operands: list[_Word] = []
    ended = False
    for a in args:
        t = a.text
        if ended or a.dynamic or not t.startswith("-") or t == "-":
            operands.append(a)
        elif t == "--":
            ended = True
        elif t.startswith("--"):
            long.append(t.split("=", 1)[0])
        else:
            short.update(t[1:])
    return short, long, operands


def _rm(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    add = _adder(out, text)

    short, long, operands = _split(args)
    if name in ("rm",) and ({"r", "R"} & short or "--recursive" in long):
        force = "f" in short or "--force" in long
        add(
            "high",
            "rm-recursive",
            "removes folders and everything in them" + (" without asking (-f)" if force else ""),
        )
        # and where: outside the workspace or in .strata, no rule may allow it
        if {w.place(o) for o in operands} & {"outside", "repository"}:
            w.writes(operands, add, rule="delete", reason=f"{name} -r deletes folders")
        return
    w.writes(operands, add, rule="delete", reason=f"{name} deletes files")


def _mv_cp(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    add = _adder(out, text)

    _, _, operands = _split(args)
    targets: list[_Word] = []
    for i, a in enumerate(args):
        if a.text in ("-t", "--target-directory") and i + 1 < len(args):
            targets.append(args[i + 1])
        elif a.text.startswith("--target-directory="):
            targets.append(_Word(a.text.split("=", 1)[1], a.dynamic))
    if name == "mv":
        targets += operands  # the sources go too
    elif not targets and operands:
        targets.append(operands[-1])
    verb = {"mv": "moves files", "cp": "copies files", "ln": "makes links"}.get(
        name, f"{name} writes files"
    )
    w.writes(targets, add, rule="write", reason=verb)


def _writer(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    add = _adder(out, text)

    short, long, operands = _split(args)
    recursive = "R" in short or "--recursive" in long
    if name in ("chmod", "chown", "chgrp"):
        operands = operands[1:]  # the mode or owner
        if recursive and name in ("chown", "chgrp"):
            w.writes(
                operands,
                add,
                rule=f"{name}-recursive",
                reason=f"{name} -R changes the owner of whole trees",
                risk="high",
            )
            return
        what = "permissions" if name == "chmod" else "owners"
        w.writes(operands, add, rule=what, reason=f"{name} changes {what}")
        return
    if name == "tee":
        files = [o for o in operands if w.place(o) != "sink"]
        if files:
            w.writes(files, add, rule="write", reason="tee writes files")
        return
    if name == "truncate":
        w.writes(operands, add, rule="write", reason="truncates files")
        return
    w.writes(operands, add, rule="write", reason=f"{name} writes files")


def _sort(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    add = _adder(out, text)

    for i, a in enumerate(args):
        if a.text in ("-o", "--output") and i + 1 < len(args):
            w.writes([args[i + 1]], add, rule="write", reason="sort -o writes a file")
            return
        if a.text.startswith("--output="):
            w.writes([_Word(a.text[9:], a.dynamic)], add, rule="write", reason="writes a file")
            return


def _sed(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    add = _adder(out, text)

    short, long, operands = _split(args)
    in_place = "i" in short or "--in-place" in long
    if name == "perl" and not in_place:
        w.interpreter(name, args, add)
        return
    if not in_place:
        return
    scripted = "e" in short or "f" in short or "--expression" in long or "--file" in long
    files = operands if scripted else operands[1:]
    w.writes(files, add, rule="edit-in-place", reason=f"{name} -i edits files in place")


def _awk(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    add = _adder(out, text)

    texts = [a.text for a in args]
    if "inplace" in texts or any("system" in t or ">" in t or "|" in t for t in texts):
        add("medium", "awk-writes", f"the {name} program may write files or run commands")


def _find(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    add = _adder(out, text)

    roots: list[_Word] = []
    i = 0
    while i < len(args) and not (
        args[i].text.startswith("-") or args[i].text in ("(", "!", ")", ",")
    ):
        roots.append(args[i])
        i += 1
    if not roots:
        roots = [_Word(".")]
    outside = any(w.place(r) == "outside" for r in roots)
    filtered = False
    while i < len(args):
        t = args[i].text
        if t in _FIND_FILTERS:
            filtered = True
        elif t == "-delete":
            if outside:
                add("high", "write-outside", "find -delete deletes files outside the workspace")
            elif not filtered:
                add("high", "find-delete-all", "find -delete with no filter deletes everything")
            else:
                add("medium", "find-delete", "find -delete deletes the files it matches")
        elif t in _FIND_WRITES and i + 1 < len(args):
            w.writes([args[i + 1]], add, rule="write", reason=f"find {t} writes a file")
            i += 1
        elif t in _FIND_EXEC:
            j = i + 1
            while j < len(args) and args[j].text not in (";", "+"):
                j += 1
            inner = args[i + 1 : j]
            if inner:
                found: list[Finding] = []
                w.judge(inner, text, depth, found)
                for f in found:
                    if outside and f.risk == "medium" and f.rule not in ("unknown-program",):
                        add("high", "write-outside", f"find {t} {f.reason} outside the workspace")
                    else:
                        out.append(f)
            i = j
        i += 1


def _git(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    add = _adder(out, text)

    i = 0
    while i < len(args) and args[i].text.startswith("-"):
        i += 2 if args[i].text in _GIT_GLOBAL_WITH_VALUE else 1
    if i >= len(args):
        return  # git, git --version
    sub = args[i].text
    rest = [a.text for a in args[i + 1 :]]
    flags = {r for r in rest if r.startswith("-")}
    shorts = {c for r in rest if r.startswith("-") and not r.startswith("--") for c in r[1:]}
    if sub in _GIT_READ:
        if sub == "diff" and any(r.startswith("--output") for r in rest):
            add("medium", "write", "git diff --output writes a file")
        return
    if sub == "push":
        forced = {"--force", "--mirror", "--delete", "--prune"} & {f.split("=")[0] for f in flags}
        if (
            forced
            or "f" in shorts
            or "d" in shorts
            or any(f.startswith("--force") for f in flags)
            or any(r.startswith("+") or r.startswith(":") for r in rest if not r.startswith("-"))
        ):
            add("high", "git-push-force", "git push rewrites or deletes remote history")
        else:
            add("medium", "git-push", "git push publishes commits to a remote")
        return
    if sub == "reset" and "--hard" in flags:
        add("high", "git-reset-hard", "git reset --hard throws away uncommitted changes")
        return
    if sub == "clean" and ("f" in shorts or "--force" in flags) and "n" not in shorts:
        add("high", "git-clean", "git clean -f deletes untracked files")
        return
    renames = {"-d", "-D", "-m", "-M", "-c", "-C", "--delete"}
    if (
        sub == "branch"
        and not (renames & flags)
        and (not [r for r in rest if not r.startswith("-")] or flags & {"--list", "-l"})
    ):
        return
    if sub == "tag" and not [r for r in rest if not r.startswith("-")]:
        return
    if sub == "stash" and rest[:1] in (["list"], ["show"]):
        return
    if sub == "remote" and (not rest or rest[0] in ("-v", "show", "get-url")):
        return
    if sub == "config" and (flags & {"--get", "--list", "-l", "--get-all", "--get-regexp"}):
        return
    if sub in ("reflog", "worktree") and (not rest or rest[0] in ("show", "list")):
        return
    add("medium", "git-write", f"git {sub} changes the repository or the files")


def _pkg_read(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    sub = next((a.text for a in args if not a.text.startswith("-")), "")
    reads = {
        "pip": ("list", "show", "freeze", "check", "help", ""),
        "pip3": ("list", "show", "freeze", "check", "help", ""),
        "npm": ("ls", "list", "view", "help", "outdated", ""),
    }[name]
    if sub in reads:
        return
    w.package(name, args, lambda r, ru, re: out.append(Finding(r, ru, re, text)))


def _kill(
    w: _Walker, name: str, args: list[_Word], text: str, depth: int, out: list[Finding]
) -> None:
    # kill -9 -1 / kill -- -1: pid -1 is every process the user may signal
    if name == "kill" and "-1" in [a.text for a in args[1:]]:
        out.append(Finding("high", "kill-all", "kill -1 stops every process it may", text))
        return
    out.append(Finding("medium", "stops-processes", f"{name} stops processes", text))


_SSH_WITH_VALUE = frozenset(
    "-b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w -B".split()  # noqa: SIM905
)

_Handler = Any
_HANDLERS: dict[str, _Handler] = {
    "kill": _kill,
    "pkill": _kill,
    "killall": _kill,
    "rm": _rm,
    "rmdir": _rm,
    "unlink": _rm,
    "mv": _mv_cp,
    "cp": _mv_cp,
    "ln": _mv_cp,
    "install": _mv_cp,
    "rsync": _mv_cp,
    "scp": _mv_cp,
    "chmod": _writer,
    "chown": _writer,
    "chgrp": _writer,
    "touch": _writer,
    "mkdir": _writer,
    "truncate": _writer,
    "tee": _writer,
    "mktemp": _writer,
    "patch": _writer,
    "sort": _sort,
    "sed": _sed,
    "perl": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "find": _find,
    "git": _git,
    "pip": _pkg_read,
    "pip3": _pkg_read,
    "npm": _pkg_read,
}


# -- wrappers -------------------------------------------------------------------------------

#: wrapper -> its options that take a value
_WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "--user"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "nohup": frozenset(),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "command": frozenset(),
    "exec": frozenset({"-a"}),
    "builtin": frozenset(),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "xargs": frozenset(
        {"-n", "-I", "-P", "-d", "-L", "-a", "-E", "-s", "-i", "--max-args", "--delimiter"}
    ),
    "watch": frozenset({"-n", "-d", "--interval"}),
    "unbuffer": frozenset(),
    "chronic": frozenset(),
}


def _wrapped(name: str, args: list[_Word]) -> tuple[list[_Word], str] | None:
    """The command a wrapper runs (None when ``name`` is no wrapper)."""
    takes = _WRAPPERS.get(name)
    if takes is None:
        return None
    i = 0
    while i < len(args):
        t = args[i].text
        if t == "--":
            i += 1
            break
        if name == "env" and "=" in t and not t.startswith("-"):
            i += 1
            continue
        if name == "env" and t in ("-S", "--split-string") and i + 1 < len(args):
            split = [_Word(s) for s in shlex.split(args[i + 1].text)]
            return split + args[i + 2 :], ""
        if not t.startswith("-") or t == "-":
            break
        i += 2 if t in takes else 1
    rest = args[i:]
    if name == "timeout" and rest:
        rest = rest[1:]  # the duration
    if name == "command" and args and args[0].text in ("-v", "-V"):
        return [], ""  # command -v NAME: looks a program up
    return rest, ""


def _unwrap(argv: list[str]) -> list[str]:
    """``argv`` without the wrappers in front of it."""
    words = [_Word(a) for a in argv]
    for _ in range(8):
        if not words:
            break
        found = _wrapped(_basename(words[0].text), words[1:])
        if found is None:
            break
        words = found[0]
    return [w.text for w in words]


# -- the fast path: one plain simple command -------------------------------------------

#: characters that make a command line more than one plain simple command (operators,
#: redirects, expansions, substitutions, comments, escapes, braces, negation, line breaks)
_SHELL_SYNTAX = frozenset("|&;<>()$`\\\n#{}!")


def plain_words(source: str) -> list[_Word] | None:
    """The words of ``source`` when it is one plain simple command, else None.

    A line with none of :data:`_SHELL_SYNTAX`, whose first word is no
    assignment, is split as the shell would (POSIX quoting); anything else
    goes to bashlex. The result is the same either way (a test compares
    them); this path only spares importing bashlex (about 200 ms) and
    parsing, which matters to a hook that decides one command per process.
    """
    if any(c in _SHELL_SYNTAX for c in source):
        return None
    try:
        split = shlex.split(source, comments=False, posix=True)
    except ValueError:  # an unclosed quote: bashlex reports it
        return None
    if not split or "=" in split[0]:
        return None
    return [_Word(t, dynamic=t.startswith("~"), tilde=t.startswith("~")) for t in split]


# -- bashlex helpers ------------------------------------------------------------------------


def _text(node: Any, source: str) -> str:
    start, end = node.pos
    return source[start:end]


def _word(node: Any) -> _Word:
    subs: list[Any] = []
    dynamic = tilde = False
    for p in getattr(node, "parts", ()) or ():
        if p.kind in ("commandsubstitution", "processsubstitution"):
            subs.append(p.command)
            dynamic = True
        elif p.kind == "parameter":
            dynamic = True
        elif p.kind == "tilde":
            dynamic = tilde = True
    return _Word(node.word, dynamic, tuple(subs), tilde)


def _substitutions(node: Any) -> list[Any]:
    return [
        p.command
        for p in getattr(node, "parts", ()) or ()
        if p.kind in ("commandsubstitution", "processsubstitution")
    ]


def _literal_argv(node: Any) -> list[str]:
    if node.kind != "command":
        return []
    return [p.word for p in node.parts if p.kind == "word"]


def _basename(program: str) -> str:
    return program.rsplit("/", 1)[-1] if "/" in program else program


def _program(argv: list[str]) -> str:
    return _basename(argv[0]) if argv else ""


def _top(findings: Sequence[Finding]) -> Risk:
    best: Risk = "low"
    for f in findings:
        if _RANK[f.risk] > _RANK[best]:
            best = f.risk
    return best
