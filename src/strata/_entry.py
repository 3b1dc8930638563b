"""The ``strata`` console script: answers ``--version`` before importing the CLI."""

import sys


def run() -> None:
    """Run the CLI (``strata --version`` costs only the interpreter start).

    ``strata snapshot`` and ``status`` are handed to the workspace's watcher when one runs.
    """
    if sys.argv[1:] == ["--version"]:
        from strata._version import __version__

        sys.stdout.write(f"strata {__version__}\n")
        return
    from strata._resident import try_resident

    try_resident(sys.argv[1:])  # exits when the workspace's watcher ran the command
    from strata.cli import main

    main()
