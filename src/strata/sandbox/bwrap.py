"""The OS sandbox for isolated runs: a bubblewrap command line that grants, not subtracts.

:func:`sandbox_command` turns a :class:`SandboxSpec` into the argument list
and environment that run a command in a fresh bubblewrap sandbox. The sandbox
starts from nothing and is given, in this order:

1. the system folders (``/usr``, ``/etc``, ``/opt`` and ``/bin``, ``/sbin``,
   ``/lib*``, recreated as symlinks where the host has them as symlinks)
   read-only, and nothing else of the host;
2. a fresh ``/proc`` (the sandbox's processes only) and a minimal ``/dev``;
3. private, empty ``/tmp``, ``/run`` and home folder (tmpfs), mounted before
   the workspace, so a workspace below one of them is still visible;
4. ``source`` (the Draft) read-write at ``workspace`` (the real workspace's
   own path, so the command sees the usual paths);
5. the ``readonly`` binds (Published's ignored folders such as ``.venv``) and
   the user's ``bind_ro`` paths, read-only;

and then the root folder is made read-only. Every namespace is unshared (the
network too unless ``net``), every capability dropped, further user namespaces
disabled (bubblewrap 0.8 and later), and the environment is rebuilt from an
allowlist. The repository folder is never mounted, and an empty tmpfs is
mounted over it last (a store under ``/opt`` would otherwise be seen through
the system folders), so the command cannot reach it, whatever path it tries.

The command is started through :mod:`strata.sandbox._relay`, which passes
SIGINT, SIGQUIT, SIGTERM and SIGHUP on to the command inside (bubblewrap itself
would die and SIGKILL the command) and dies with its parent.

This module knows nothing of Drafts or events: callers give it paths.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from strata.errors import SandboxPolicyError, SandboxUnavailable
from strata.sandbox.net import LOOPBACK_NAMES, PROXY_PORT, SOCKET_NAME, proxy_environment

__all__ = [
    "ENV_ALLOWLIST",
    "SYSTEM_PATHS",
    "SandboxSpec",
    "sandbox_command",
    "missing_mount_points",
    "remove_mount_points",
    "sandbox_home",
    "sandbox_problem",
    "unreachable_command",
    "unsandboxed_environment",
]

#: Host folders the sandbox sees, read-only (or as symlinks, where they are symlinks).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")

#: Variables passed into the sandbox unchanged when set: how to find programs,
#: the user's language, terminal and time zone, and who they are. Everything
#: else (tokens, sockets, proxies, ``SSH_AUTH_SOCK``, ``DISPLAY`` …) is dropped
#: unless named with ``--env``. ``HOME`` and ``TMPDIR`` are always the sandbox's own.
ENV_ALLOWLIST = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
)

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_PRIVATE = ("/tmp", "/run")
_KERNEL = ("/proc", "/dev")
_HOME_FALLBACKS = ("/run/home", "/tmp/home")
_BWRAP_DIRS = ("/usr/bin", "/bin", "/usr/local/bin")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RELAY = Path(__file__).with_name("_relay.py")
_NETRELAY = Path(__file__).with_name("_netrelay.py")
_PROXY_INSIDE = "/run/strata-net"  # the proxy's folder, inside the sandbox
_NETRELAY_INSIDE = "/run/strata-netrelay.py"
_PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class SandboxSpec:
    """What a sandboxed command sees: the mounts and the variables it is granted."""

    workspace: Path
    """Absolute path where the command sees its files (the real workspace's path)."""
    source: Path
    """Host folder mounted read-write at ``workspace`` (the Draft's files)."""
    cwd: Path
    """Where the command starts: ``workspace`` or a folder below it."""
    net: bool = False
    """Share the host's network (``--net allow``); otherwise only a private loopback."""
    bind_ro: tuple[Path, ...] = ()
    """Host paths exposed read-only at the same path (``--bind-ro PATH``)."""
    readonly: tuple[tuple[Path, Path], ...] = ()
    """(host path, path inside) read-only binds; the inside path lies below ``workspace``.

    A mount point missing from ``source`` is created there, empty, by bubblewrap
    (see :func:`missing_mount_points`).
    """
    env_names: tuple[str, ...] = ()
    """Variables passed through beyond :data:`ENV_ALLOWLIST` (``--env NAME``)."""
    repository: Path | None = None
    """The repository folder (``.strata``): refused in every bind, so never reachable."""
    proxy: Path | None = None
    """Host folder holding the allow-list proxy's socket (:class:`strata.sandbox.net.NetProxy`).

    Set (with ``net`` off), the command gets a network namespace of its own
    whose only way out is that proxy, reached through a relay listening on
    ``127.0.0.1:3128`` inside; ``HTTPS_PROXY`` and the like point there.
    """
    no_proxy: tuple[str, ...] = LOOPBACK_NAMES
    """With ``proxy``: the hosts the command's clients reach directly (``NO_PROXY``)."""
    home_source: Path | None = None
    """A host folder shown read-write as the private home instead of an empty one.

    A throwaway folder the caller fills (copies of an agent's configuration,
    ``~/.claude.json``…) and removes after the run; files in it can be replaced
    by rename, as they could not be through single-file binds.
    """


@dataclass(frozen=True)
class _Bwrap:
    path: str
    version: tuple[int, ...]


def _find_bwrap() -> str | None:
    return shutil.which("bwrap", path=os.pathsep.join(_BWRAP_DIRS))


def _parse_version(text: str) -> tuple[int, ...]:
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return (0,)
    return tuple(int(part) for part in match.groups(default="0"))


def _isolation(bwrap: _Bwrap, *, net: bool) -> list[str]:
    flags = ["--unshare-all", "--unshare-user"]
    if net:
        flags.append("--share-net")
    if bwrap.version >= (0, 8):
        flags.append("--disable-userns")  # no nested user namespace: less kernel to attack
    # root (strata run by root) keeps every capability in its new user namespace
    # unless told otherwise, and could remount the read-only binds read-write
    flags += ["--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    return flags


def _system_mounts() -> list[str]:
    args: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


@cache
def _located(executable: str | None) -> tuple[_Bwrap | None, str | None]:
    """The path and version of bubblewrap (``bwrap --version``), or why there is none."""
    path = executable or _find_bwrap()
    if path is None:
        return None, "bubblewrap (bwrap) is not installed"
    env = {"PATH": _DEFAULT_PATH}
    try:
        done = subprocess.run(
            [path, "--version"],
            capture_output=True,
            env=env,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot run {path}: {exc}"
    if done.returncode != 0:
        return None, f"{path} --version failed: {_first_line(done.stderr)}"
    return _Bwrap(path, _parse_version(done.stdout.decode(errors="replace"))), None


@cache
def _probe(executable: str | None) -> tuple[_Bwrap | None, str | None]:
    bwrap, problem = _located(executable)
    if bwrap is None:
        return None, problem
    path = bwrap.path
    env = {"PATH": _DEFAULT_PATH}
    trivial = [
        path,
        *_isolation(bwrap, net=False),
        *_system_mounts(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "true",
    ]
    try:
        done = subprocess.run(
            trivial, capture_output=True, env=env, timeout=_PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"bubblewrap cannot create a sandbox here: {exc}"
    if done.returncode != 0:
        reason = _first_line(done.stderr) or f"exit status {done.returncode}"
        return None, f"bubblewrap cannot create a sandbox here: {reason}"
    return bwrap, None


def _first_line(data: bytes) -> str:
    lines = data.decode(errors="replace").strip().splitlines()
    return lines[0].strip() if lines else ""


def sandbox_problem(*, executable: str | None = None) -> str | None:
    """None when bubblewrap can run a sandbox here, else a one-line reason.

    Runs ``bwrap --version`` and a trivial sandbox (user namespaces may be
    forbidden, e.g. in some containers) once per process; the answer is cached.
    ``executable`` names a bubblewrap binary to use instead of the one found in
    ``/usr/bin``, ``/bin`` or ``/usr/local/bin``.
    """
    return _probe(executable)[1]


def sandbox_home(spec: SandboxSpec, *, environ: Mapping[str, str]) -> Path:
    """The private home folder the command gets (``HOME`` inside the sandbox).

    The host's ``HOME`` path when it can hold a private tmpfs (absolute, not a
    system folder, not the workspace or below it), else ``/run/home`` (or
    ``/tmp/home``). It is empty at every run.
    """
    _check_workspace(spec.workspace)
    candidates = [environ.get("HOME", ""), *_HOME_FALLBACKS]
    for candidate in candidates:
        if not candidate or not os.path.isabs(candidate):
            continue
        home = Path(os.path.normpath(candidate))
        if ".." in Path(candidate).parts or home == Path("/"):
            continue
        if any(_within(home, Path(p)) or _within(Path(p), home) for p in SYSTEM_PATHS + _KERNEL):
            continue
        if _within(home, spec.workspace) or _within(Path("/tmp"), home):
            continue
        if _within(Path("/run"), home):
            continue
        return home
    raise SandboxPolicyError(  # only a workspace at /run/home and /tmp/home gets here
        f"no private home folder fits next to the workspace {spec.workspace}",
        path=str(spec.workspace),
    )


def sandbox_command(
    spec: SandboxSpec, argv: Sequence[str], *, environ: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The full command line that runs ``argv`` in the sandbox, and its environment.

    ``environ`` is the caller's environment, from which only the allowlisted
    variables and ``spec.env_names`` are taken. Run the result with
    :func:`strata.runs.process.run_command` (``new_session=True``): signals sent to
    the caller reach the command, and the command dies when the caller dies.

    Raises:
        SandboxUnavailable: bubblewrap is missing or cannot create a sandbox here.
        SandboxPolicyError: a path of ``spec`` is malformed, missing, or one the
            policy refuses (a ``bind_ro`` that is ``/``, lies in the workspace,
            covers the workspace, a private folder or the repository …).

    """
    if not argv:
        raise SandboxPolicyError("no command to run in the sandbox")
    home = sandbox_home(spec, environ=environ)
    _check_spec(spec, home=home)
    env = _environment(spec, environ=environ, home=home)
    bwrap, problem = _probe(None)
    if bwrap is None:
        raise SandboxUnavailable(problem or "bubblewrap cannot run here")
    if not sys.executable:
        raise SandboxUnavailable("no Python interpreter to run the signal relay with")

    args = [*_isolation(bwrap, net=spec.net), *_system_mounts()]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # the private folders come before the workspace, which may lie below one of them
    for private in _PRIVATE:
        args += ["--tmpfs", private]
    if spec.home_source is not None:
        args += ["--bind", str(spec.home_source), str(home)]
    elif str(home) not in _PRIVATE:
        args += ["--tmpfs", str(home)]
    if spec.net:
        args += _resolver_binds()
    args += ["--bind", str(spec.source), str(spec.workspace)]
    for host, inside in sorted(spec.readonly, key=lambda pair: pair[1].parts):
        args += ["--ro-bind", str(host), str(inside)]
    for path in sorted(spec.bind_ro, key=lambda p: p.parts):
        args += ["--ro-bind", str(path), str(path)]
    command = list(argv)
    if spec.proxy is not None:
        python, binds = _inner_python(spec, home=home)
        args += binds
        args += ["--ro-bind", str(spec.proxy), _PROXY_INSIDE]
        args += ["--ro-bind", str(_NETRELAY), _NETRELAY_INSIDE]
        socket_inside = f"{_PROXY_INSIDE}/{SOCKET_NAME}"
        relay_argv = [python, "-I", "-S", "-B", _NETRELAY_INSIDE, str(PROXY_PORT), socket_inside]
        command = [*relay_argv, "--", *command]
        env.update(proxy_environment(no_proxy=spec.no_proxy))
    args += _repository_masks(spec, home=home)
    args += ["--remount-ro", "/", "--chdir", str(spec.cwd)]
    relay = [sys.executable, "-I", "-S", "-B", str(_RELAY), bwrap.path]
    return [*relay, *args, "--", *command], env


def _inner_python(spec: SandboxSpec, *, home: Path) -> tuple[str, list[str]]:
    """The interpreter that runs the network relay inside, and the binds that show it.

    Strata's own interpreter (resolved: a virtual environment's ``python`` is a
    symlink) when the sandbox shows it; else its installation (``sys.base_prefix``,
    e.g. under ``~/.pyenv``), exposed read-only at the same path.
    """
    python = Path(os.path.realpath(sys.executable))
    if _host_view(spec, python, home=home) == python:
        return str(python), []
    prefix = Path(os.path.realpath(sys.base_prefix))
    kept = [spec.workspace, spec.source, *([spec.repository] if spec.repository else [])]
    if _within(python, prefix) and not any(
        _within(prefix, other) or _within(other, prefix) for other in kept
    ):
        return str(python), ["--ro-bind", str(prefix), str(prefix)]
    for fallback in ("/usr/bin/python3", "/bin/python3"):
        if os.path.exists(fallback):
            return fallback, []
    raise SandboxUnavailable("no Python interpreter the sandbox can show runs the network relay")


def _repository_masks(spec: SandboxSpec, *, home: Path) -> list[str]:
    """An empty tmpfs over the repository, as given and resolved, mounted last.

    The repository is never bound, but a store kept below a system folder
    (``/opt``, ``/usr``, ``/etc``) would be seen read-only through that
    folder's bind, with the ledger, every object and the watcher's socket:
    so each form the sandbox would show from the host is masked. A form
    inside the workspace shows the Draft (and a mask would make a mount point
    in it); one in a private folder or nowhere shows nothing already.
    """
    if spec.repository is None:
        return []
    args: list[str] = []
    masked: set[Path] = set()
    for host in [*_forms(spec.repository), *mount_aliases(spec.repository)]:
        for form in _inside_views(spec, host, home=home):
            if form in masked or _within(form, spec.workspace) or _within(form, spec.source):
                continue
            masked.add(form)
            if os.path.isdir(host):
                args += ["--tmpfs", str(form)]
            else:  # a single file of the repository bound elsewhere
                args += ["--ro-bind", os.devnull, str(form)]
    return args


def _inside_views(spec: SandboxSpec, host: Path, *, home: Path) -> list[Path]:
    """Every path inside the sandbox that shows the host path ``host``."""
    binds = [(Path(p), Path(p)) for p in SYSTEM_PATHS if os.path.isdir(p) and not os.path.islink(p)]
    binds += [*((h, i) for h, i in spec.readonly), *((p, p) for p in spec.bind_ro)]
    views: list[Path] = []
    for source, point in binds:
        for form in _forms(source):
            if _within(host, form):
                inside = point / host.relative_to(form)
                if inside not in views and _host_view(spec, inside, home=home) is not None:
                    views.append(inside)
    return views


def _unescape_mountinfo(field: str) -> str:
    r"""A path field of ``/proc/self/mountinfo`` (spaces and the like are ``\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_aliases(folder: Path) -> list[Path]:
    """Host paths other than ``folder`` that show ``folder`` or part of it, through bind mounts.

    A bind mount (``mount --bind /opt/store /tmp/store``) makes one folder
    reachable under several paths that ``realpath`` does not relate. From
    ``/proc/self/mountinfo``: the file system holding ``folder`` and its path
    within that file system; then every mount of the same file system whose
    root lies inside that path (its mount point shows part of ``folder``) or
    above it (the mount point plus the rest shows ``folder``).
    """
    try:
        real = Path(os.path.realpath(folder))
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    mounts: list[tuple[str, Path, Path]] = []  # (device, root in the file system, mount point)
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5:
            continue
        root_text, point_text = _unescape_mountinfo(fields[3]), _unescape_mountinfo(fields[4])
        if not root_text.startswith("/") or not point_text.startswith("/"):
            continue
        mounts.append((fields[2], Path(root_text), Path(point_text)))
    holding = [m for m in mounts if _within(real, m[2])]
    if not holding:
        return []
    # the deepest mount point; of mounts stacked on one point, the last is the one seen
    device, root, point = max(reversed(holding), key=lambda m: len(m[2].parts))
    inner = root / real.relative_to(point)  # ``folder`` within its file system
    aliases: list[Path] = []
    for dev, other_root, other_point in mounts:
        if dev != device:
            continue
        if _within(other_root, inner):
            candidate = other_point
        elif _within(inner, other_root):
            candidate = other_point / inner.relative_to(other_root)
        else:
            continue
        if candidate != real and candidate not in aliases:
            aliases.append(candidate)
    return aliases


def missing_mount_points(spec: SandboxSpec) -> list[Path]:
    """Paths in ``spec.source`` that bubblewrap will create as mount points.

    A ``readonly`` bind below the workspace needs its mount point to exist in the
    Draft; when the Draft lacks it (an ignored folder such as ``.venv`` that was
    not copied), bubblewrap creates an empty folder (or an empty file) there.
    Callers that want the Draft exactly as the command left it remove these
    after the run when they are still empty. Listed parents first.
    """
    missing: list[Path] = []
    for _host, inside in sorted(spec.readonly, key=lambda pair: pair[1].parts):
        current = spec.source
        for name in inside.relative_to(spec.workspace).parts:
            current = current / name
            if not os.path.lexists(current) and current not in missing:
                missing.append(current)
    return missing


def remove_mount_points(spec: SandboxSpec, made: Sequence[Path]) -> None:
    """Remove the mount points ``made`` (from :func:`missing_mount_points`) still empty.

    The command may have replaced a folder on the way with a symlink to a host
    folder, so each path is reached from ``spec.source`` one name at a time
    through folder handles opened with ``O_NOFOLLOW``: a symlink ends the walk
    and nothing outside the Draft is ever removed. Only an empty folder or an
    empty file is removed; errors are ignored (what is left stays in the Draft).
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    for path in reversed(made):  # children before their parents
        try:
            parts = path.relative_to(spec.source).parts
        except ValueError:
            continue
        if not parts:
            continue
        try:
            fd = os.open(spec.source, flags)
        except OSError:
            return
        try:
            for name in parts[:-1]:
                child = os.open(name, flags, dir_fd=fd)
                os.close(fd)
                fd = child
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.rmdir(parts[-1], dir_fd=fd)  # only when empty; never follows a symlink
            elif stat.S_ISREG(st.st_mode) and st.st_size == 0:
                os.unlink(parts[-1], dir_fd=fd)
        except OSError:
            continue  # a symlink on the way (ELOOP, ENOTDIR), gone, or not empty
        finally:
            os.close(fd)


def unreachable_command(
    spec: SandboxSpec, program: str, *, environ: Mapping[str, str]
) -> str | None:
    """Why ``program`` cannot start in the sandbox, or None when it is visible there.

    An agent installed in the user's home (``~/.local/bin``, ``~/.npm-global``
    …) is on the host's ``PATH`` but not in the sandbox, whose home is empty:
    bubblewrap would only say ``execvp: No such file``. This looks ``program``
    up on the sandbox's ``PATH`` as the sandbox shows it (system folders, the
    Draft, the read-only binds) and, when it is not there but the host has it,
    says which folders to expose with ``--bind-ro`` (a path it does not show
    at all is named too): the link's folder and the
    installation it leads to (``~/.local/bin`` and ``~/.local/share/claude``),
    or the prefix holding both (``~/.nvm/versions/node/v20`` for a link from
    its ``bin`` into its ``lib``); an npm package is exposed with the whole
    ``node_modules`` holding it (its native binary is a sibling package). A
    script whose interpreter (``#!/usr/bin/env node``) the sandbox does not
    show is named too. It returns None too when
    the host has no such program either (the command's own error says it).
    """
    return _unreachable(spec, program, environ=environ, depth=0)


def _unreachable(
    spec: SandboxSpec, program: str, *, environ: Mapping[str, str], depth: int
) -> str | None:
    home = sandbox_home(spec, environ=environ)
    path = _environment(spec, environ=environ, home=home)["PATH"]
    if "/" in program:
        candidates = [Path(os.path.normpath(spec.cwd / program))]
    else:
        candidates = [Path(folder, program) for folder in path.split(":") if folder.startswith("/")]
    hidden_target: str | None = None  # a program the sandbox shows, pointing where it does not
    for candidate in candidates:
        host = _host_view(spec, candidate, home=home)
        if host is not None and os.access(host, os.X_OK) and os.path.isfile(host):
            target = Path(os.path.realpath(host))
            if (
                target == host
                or _host_view(spec, target, home=home) is not None
                or _in_draft(spec, target)
            ):
                return _unreachable_interpreter(spec, program, host, environ=environ, depth=depth)
            hidden_target = hidden_target or str(target)
    if hidden_target is not None:
        return (
            f"{program} leads to {hidden_target}, which the sandbox does not show; "
            f"expose its folder with --bind-ro {_install_folder(hidden_target)}"
        )
    if "/" in program:
        absolute = candidates[0]
        if not (os.path.isabs(program) and os.access(absolute, os.X_OK)):
            view = _host_view(spec, absolute, home=home)
            if (view is not None and os.path.lexists(view)) or depth > 0:
                return None  # there but not executable: the command's own error says it
            return f"the sandbox shows no {program} (at {absolute})"
        found: str | None = str(absolute)
    else:
        found = shutil.which(program, path=environ.get("PATH", _DEFAULT_PATH))
    if found is None:
        return None
    folders = _folders_to_expose(found)
    what = "its folder" if len(folders) == 1 else "its folders"
    return (
        f"{program} is {found} on this machine, which the sandbox does not show; "
        f"expose {what} with " + " ".join(f"--bind-ro {folder}" for folder in folders)
    )


def _unreachable_interpreter(
    spec: SandboxSpec, program: str, host: Path, *, environ: Mapping[str, str], depth: int
) -> str | None:
    """Why the interpreter of the script ``host`` (its ``#!`` line) cannot start, or None."""
    if depth > 0:
        return None
    try:
        with open(host, "rb") as script:
            first = script.read(256).split(b"\n", 1)[0]
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    if not words:
        return None
    problem = _unreachable(spec, words[0], environ=environ, depth=depth + 1)
    return None if problem is None else f"{program} runs {words[0]}: {problem}"


def _folders_to_expose(found: str) -> list[str]:
    """The folders that show the program ``found`` (maybe a link) and what it leads to."""
    real = os.path.realpath(found)
    if real == os.path.abspath(found):
        return [_install_folder(real)]
    link_folder = os.path.dirname(os.path.abspath(found))
    if os.path.basename(link_folder) == "bin":
        prefix = os.path.dirname(link_folder)
        if prefix != "/" and _within(Path(real), Path(prefix, "lib")):
            return [prefix]  # PREFIX/bin/agent -> PREFIX/lib/node_modules/…: npm, nvm
    target = _install_folder(real)
    parts = Path(real).parts
    if "node_modules" in parts:  # a package's platform binaries are its siblings' in there
        target = str(Path(*parts[: parts.index("node_modules") + 1]))
    if _within(Path(target), Path(link_folder)):
        return [link_folder]
    if _within(Path(link_folder), Path(target)):
        return [target]
    return [link_folder, target]


def _install_folder(program: str) -> str:
    """The folder to expose for ``program``: its own, or the prefix above a ``bin``."""
    folder = os.path.dirname(program)
    if os.path.basename(folder) == "bin" and os.path.dirname(folder) != "/":
        folder = os.path.dirname(folder)  # PREFIX/bin/python needs PREFIX/lib too
    return folder


def _host_view(spec: SandboxSpec, inside: Path, *, home: Path) -> Path | None:
    """The host file the sandbox shows at ``inside``, or None when it shows none there."""
    binds = [(Path(p), Path(p)) for p in SYSTEM_PATHS if os.path.isdir(p) and not os.path.islink(p)]
    binds += [(spec.source, spec.workspace), *((h, i) for h, i in spec.readonly)]
    binds += [(p, p) for p in spec.bind_ro]
    for private in (*_PRIVATE, *_KERNEL, str(home)):
        binds.append((Path("/nonexistent"), Path(private)))  # shows nothing of the host
    best: tuple[Path, Path] | None = None
    for host, point in binds:
        if _within(inside, point) and (best is None or len(point.parts) > len(best[1].parts)):
            best = (host, point)
    if best is None:
        for link in SYSTEM_PATHS:  # /bin -> usr/bin and the like
            if os.path.islink(link) and _within(inside, Path(link)):
                target = Path(os.path.realpath(link)) / inside.relative_to(link)
                return _host_view(spec, target, home=home)
        return None
    host, point = best
    if host == Path("/nonexistent"):
        return None
    return host / inside.relative_to(point)


def _in_draft(spec: SandboxSpec, target: Path) -> bool:
    roots = [spec.source, *(h for h, _ in spec.readonly), *spec.bind_ro]
    return any(_within(target, Path(os.path.realpath(root))) for root in roots)


def unsandboxed_environment(folder: Path, *, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment for a command run directly in ``folder`` (``--sandbox none``).

    No isolation: the caller's environment, except that git may not look for a
    repository above ``folder`` (``GIT_CEILING_DIRECTORIES`` holds its parent)
    and variables that point git at a repository (``GIT_DIR``, ``GIT_WORK_TREE``
    …) are dropped, so git in a Draft never climbs into the real repository.
    """
    env = {k: v for k, v in environ.items() if k not in _GIT_LOCATORS}
    parent = os.path.realpath(folder.parent)
    ceiling = environ.get("GIT_CEILING_DIRECTORIES")
    env["GIT_CEILING_DIRECTORIES"] = f"{parent}:{ceiling}" if ceiling else parent
    return env


_GIT_LOCATORS = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    }
)


def _environment(spec: SandboxSpec, *, environ: Mapping[str, str], home: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, value in environ.items():
        if name in ENV_ALLOWLIST or (name.startswith("LC_") and _ENV_NAME.fullmatch(name)):
            env[name] = value
    for name in spec.env_names:
        if not _ENV_NAME.fullmatch(name):
            raise SandboxPolicyError(f"not an environment variable name: {name!r}", path=name)
        if name in environ:
            env[name] = environ[name]
    env.setdefault("PATH", _DEFAULT_PATH)
    env["HOME"] = str(home)
    env["TMPDIR"] = "/tmp"
    env["STRATA_NO_DAEMON"] = "1"  # a watcher started in the sandbox would die with it
    return env


def _resolver_binds() -> list[str]:
    """With the network shared, DNS must work: ``/etc/resolv.conf`` may point into ``/run``."""
    target = os.path.realpath("/etc/resolv.conf")
    if _within(Path(target), Path("/run")) and os.path.isfile(target):
        return ["--ro-bind", target, target]
    return []


# -- the policy -------------------------------------------------------------------------


def _within(path: Path, folder: Path) -> bool:
    """True when ``path`` is ``folder`` or lies below it (lexically)."""
    return path == folder or folder in path.parents


def _checked(path: Path, what: str, *, exists: bool = True) -> Path:
    text = str(path)
    if "\0" in text:
        raise SandboxPolicyError(f"{what} {text!r} contains a NUL byte", path=text)
    if not path.is_absolute():
        raise SandboxPolicyError(f"{what} {text} is not an absolute path", path=text)
    if ".." in path.parts:
        raise SandboxPolicyError(f"{what} {text} contains '..'", path=text)
    if exists and not os.path.lexists(path):
        raise SandboxPolicyError(f"{what} {text} does not exist", path=text)
    return path


def _forms(path: Path) -> list[Path]:
    """``path`` as given and with symlinks resolved: a bind is judged by both."""
    return list(dict.fromkeys([path, Path(os.path.realpath(path))]))


def _check_workspace(path: Path) -> Path:
    workspace = _checked(path, "workspace", exists=False)
    if any(_within(Path(p), workspace) for p in SYSTEM_PATHS + _KERNEL + _PRIVATE):
        raise SandboxPolicyError(
            f"the workspace {workspace} cannot be sandboxed: it covers a system folder",
            path=str(workspace),
        )
    if any(_within(workspace, Path(p)) for p in _KERNEL):
        raise SandboxPolicyError(
            f"the workspace {workspace} lies in {workspace.parts[1]!r}", path=str(workspace)
        )
    return workspace


def _check_spec(spec: SandboxSpec, *, home: Path) -> None:
    workspace = _check_workspace(spec.workspace)
    source = _checked(spec.source, "Draft folder")
    cwd = _checked(spec.cwd, "working folder", exists=False)
    if os.path.islink(source) or not source.is_dir():
        raise SandboxPolicyError(f"the Draft folder {source} is not a folder", path=str(source))
    repository = spec.repository
    if repository is not None:
        repository = _checked(repository, "repository folder", exists=False)
        if any(_within(repo, form) for repo in _forms(repository) for form in _forms(source)):
            raise SandboxPolicyError(
                f"the Draft folder {source} contains the repository {repository}",
                path=str(source),
            )
    if not _within(cwd, workspace):
        raise SandboxPolicyError(
            f"the working folder {cwd} is outside the workspace {workspace}", path=str(cwd)
        )

    repository_forms = (
        [] if repository is None else [*_forms(repository), *mount_aliases(repository)]
    )

    def overlaps_repository(path: Path) -> bool:
        return any(_within(a, b) or _within(b, a) for a in _forms(path) for b in repository_forms)

    for host, inside in spec.readonly:
        _checked(host, "read-only folder")
        _checked(inside, "read-only mount point", exists=False)
        if inside == workspace or not _within(inside, workspace):
            raise SandboxPolicyError(
                f"read-only mount point {inside} must lie below the workspace {workspace}",
                path=str(inside),
            )
        if overlaps_repository(host):
            raise SandboxPolicyError(
                f"read-only folder {host} overlaps the repository {repository}", path=str(host)
            )
        if any(_within(w, form) for w in (workspace, source) for form in _forms(host)):
            raise SandboxPolicyError(
                f"read-only folder {host} contains the workspace or the Draft", path=str(host)
            )
        _check_mount_point(source, inside.relative_to(workspace), host=host)

    covered = (workspace, source, home, *(Path(p) for p in _PRIVATE + _KERNEL))
    for path in spec.bind_ro:
        _checked(path, "--bind-ro path")
        forms = _forms(path)
        if Path("/") in forms:
            raise SandboxPolicyError("--bind-ro / would expose the whole host", path="/")
        if any(_within(path, Path(p)) for p in _KERNEL):
            raise SandboxPolicyError(
                f"--bind-ro {path}: the sandbox has its own {path.parts[1]!r}", path=str(path)
            )
        if any(_within(form, w) for form in forms for w in _forms(workspace)):
            raise SandboxPolicyError(
                f"--bind-ro {path} lies in the workspace, which the sandbox already shows",
                path=str(path),
            )
        if overlaps_repository(path):
            raise SandboxPolicyError(
                f"--bind-ro {path} would expose the repository {repository}", path=str(path)
            )
        hidden = [c for c in covered for form in forms if _within(c, form)]
        if hidden:
            raise SandboxPolicyError(
                f"--bind-ro {path} would cover {hidden[0]}, which the sandbox keeps private",
                path=str(path),
            )

    if spec.proxy is not None:
        _checked(spec.proxy, "network proxy folder")
        if spec.net:
            raise SandboxPolicyError(
                "the network allow-list and the host's whole network exclude each other",
                path=str(spec.proxy),
            )
    if spec.home_source is not None:
        home_source = _checked(spec.home_source, "home folder")
        if os.path.islink(home_source) or not home_source.is_dir():
            raise SandboxPolicyError(f"home folder {home_source} is not a folder")
        if overlaps_repository(home_source) or any(
            _within(a, b) or _within(b, a) for a in _forms(home_source) for b in (workspace, source)
        ):
            raise SandboxPolicyError(
                f"home folder {home_source} overlaps the workspace, the Draft or the repository",
                path=str(home_source),
            )

    if not _exists_inside(cwd, spec):
        raise SandboxPolicyError(
            f"the working folder {cwd} does not exist in the Draft", path=str(cwd)
        )


def _check_mount_point(source: Path, relative: Path, *, host: Path) -> None:
    """A mount point below the Draft must be reachable without a symlink.

    bubblewrap creates a missing mount point (an empty folder, or an empty file)
    in the Draft; a symlink on the way could send that write anywhere.
    """
    current = source
    for index, name in enumerate(relative.parts):
        current = current / name
        try:
            mode = current.lstat().st_mode
        except FileNotFoundError:
            return
        last = index == len(relative.parts) - 1
        if os.path.islink(current):
            raise SandboxPolicyError(
                f"read-only mount point {current} is a symlink in the Draft", path=str(current)
            )
        if not last and not stat.S_ISDIR(mode):
            raise SandboxPolicyError(
                f"read-only mount point {current} is not a folder in the Draft", path=str(current)
            )
        if last and stat.S_ISDIR(mode) != os.path.isdir(host):
            raise SandboxPolicyError(
                f"read-only mount point {current} and {host} are not the same kind of file",
                path=str(current),
            )


def _exists_inside(cwd: Path, spec: SandboxSpec) -> bool:
    """True when ``cwd`` is a folder in the sandbox: in the Draft or a read-only bind."""
    binds: Iterable[tuple[Path, Path]] = [
        (spec.source, spec.workspace),
        *((host, inside) for host, inside in spec.readonly),
    ]
    for host, inside in sorted(binds, key=lambda pair: len(pair[1].parts), reverse=True):
        if _within(cwd, inside):
            return (host / cwd.relative_to(inside)).is_dir()
    return False


# -- confinement: a command in the real workspace (strata.sandbox.confine) ---------------


def confinement_prefix(
    workspace: Path,
    *,
    writable: bool,
    network: bool,
    masks: Sequence[Path],
    cwd: Path,
    new_session: bool = True,
) -> list[str]:
    """The bubblewrap command line (up to ``--``) confining a command to ``workspace``.

    The host's ``/`` read-only; private ``/tmp`` and ``/run``; ``workspace``
    bound again (read-write when ``writable``) since it may lie below ``/tmp``;
    each of ``masks`` that exists (the repository) hidden under an empty
    read-only folder (a file: under an empty read-only file). ``new_session``
    off keeps the command in the caller's process group (a caller that runs it
    in a session of its own, with no terminal, kills the group on a time-out:
    the sandbox's first process then dies with it, and the rest with that).
    See :mod:`strata.sandbox.confine`.
    """
    workspace = _check_workspace(workspace)
    if workspace == Path("/"):
        raise SandboxPolicyError("the whole file system cannot be the workspace", path="/")
    # only located, not probed with a trivial sandbox (that would cost as much again):
    # where bubblewrap cannot make one, it fails, and the command does not run
    bwrap, problem = _located(None)
    if bwrap is None:
        raise SandboxUnavailable(problem or "bubblewrap cannot run here")
    isolation = _isolation(bwrap, net=network)
    if not new_session:
        isolation.remove("--new-session")
    args = [bwrap.path, *isolation, "--ro-bind", "/", "/"]
    args += ["--dev", "/dev", "--proc", "/proc"]
    for private in _PRIVATE:
        args += ["--tmpfs", private]
    if network:
        args += _resolver_binds()
    args += ["--bind" if writable else "--ro-bind", str(workspace), str(workspace)]
    forms = [f for mask in masks for f in (*_forms(mask), *mount_aliases(mask))]
    for form in dict.fromkeys(forms):
        if any(_within(form, Path(p)) for p in _PRIVATE) and not _within(form, workspace):
            continue  # a private folder shows nothing of the host already
        if form.is_dir() and not form.is_symlink():
            args += ["--perms", "0555", "--tmpfs", str(form), "--remount-ro", str(form)]
        elif os.path.lexists(form):
            args += ["--ro-bind", os.devnull, str(form)]
    args += ["--chdir", str(cwd)]
    return args
