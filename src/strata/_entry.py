"""The ``strata`` console script: answers ``--version`` before importing the CLI."""

import sys


def run() -> None:
    """Run the CLI (``strata --version`` costs only the interpreter start)."""
    if sys.argv[1:] == ["--version"]:
        from strata._version import __version__

        sys.stdout.write(f"strata {__version__}\n")
        return
    from strata.cli import main

    main()
