"""The public surface: what ``import strata`` offers, and the version."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import strata
import strata.errors

ERRORS = {
    name
    for name, value in vars(strata.errors).items()
    if inspect.isclass(value) and issubclass(value, Exception)
}

EXPECTED = ERRORS | {
    "AsyncRepository",
    "Author",
    "Checkpoint",
    "Checkpoints",
    "DiffResult",
    "Draft",
    "DraftRun",
    "PreflightResult",
    "PublishResult",
    "ReviewResult",
    "Event",
    "FileDiff",
    "LiveCapture",
    "Point",
    "Repository",
    "RewindResult",
    "RunResult",
    "SnapshotResult",
    "StatusResult",
    "WorkspaceOptions",
    "__version__",
}


def test_all_is_exactly_the_public_api() -> None:
    assert set(strata.__all__) == EXPECTED
    assert len(strata.__all__) == len(set(strata.__all__)), "no name listed twice"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_public_name_imports(name: str) -> None:
    value = getattr(strata, name)
    assert value is not None
    namespace: dict[str, object] = {}
    exec(f"from strata import {name}", namespace)
    assert namespace[name] is value
    if inspect.isclass(value):
        assert value.__doc__, f"{name} has no docstring"
        # the public name is the real class, importable from where it lives
        home = importlib.import_module(value.__module__)
        assert getattr(home, value.__name__) is value


def test_dir_and_unknown_names() -> None:
    assert set(dir(strata)) >= EXPECTED
    with pytest.raises(AttributeError):
        _ = strata.NoSuchThing  # type: ignore[attr-defined]
    with pytest.raises(ImportError):
        exec("from strata import NoSuchThing", {})


def test_every_error_is_a_strata_error_and_documented() -> None:
    doc = strata.errors.__doc__ or ""
    errors = [
        value
        for value in vars(strata.errors).values()
        if inspect.isclass(value) and issubclass(value, Exception)
    ]
    assert strata.StrataError in errors
    for error in errors:
        assert issubclass(error, strata.StrataError), error
        assert error.__name__ in doc, f"{error.__name__} is missing from the errors tree"


def test_every_error_is_exported_and_has_an_exit_code() -> None:
    assert len(ERRORS) > 30
    usage = {strata.errors.UsageError}
    runs = {
        strata.errors.RunError: 125,
        strata.errors.GitBackendError: 125,
        strata.errors.CommandNotFound: 127,
        strata.errors.CommandNotExecutable: 126,
    }
    for name in ERRORS:
        error = getattr(strata, name)
        assert error is getattr(strata.errors, name), name
        assert name in strata.__all__, name
        want = 2 if error in usage else runs.get(error, 1)
        assert error.exit_code == want, f"{name}.exit_code is {error.exit_code}, not {want}"


def test_no_anonymous_strata_error_is_raised() -> None:
    """Every error raised names its specific class, so tools can tell them apart."""
    src = Path(strata.__file__).parent
    found = [
        f"{path.relative_to(src)}:{number}"
        for path in sorted(src.rglob("*.py"))
        if path.name != "errors.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "StrataError(" in line and "class " not in line
    ]
    assert found == []


def test_importing_strata_is_lazy() -> None:
    code = (
        "import sys, strata; "
        "heavy = [m for m in ('sqlite3', 'zstandard', 'pygit2', 'click') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""


def test_version_is_a_version() -> None:
    parts = strata.__version__.split(".")
    assert len(parts) >= 2 and all(p.isdigit() for p in parts[:2])


def test_cli_version(tmp_path: Path) -> None:
    want = f"strata {strata.__version__}\n"
    by_module = subprocess.run(
        [sys.executable, "-m", "strata", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert by_module.stdout == want
    script = Path(sys.executable).parent / "strata"
    if not script.exists():
        pytest.skip("the strata console script is not installed next to this interpreter")
    by_script = subprocess.run(
        [str(script), "--version"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert by_script.stdout == want
