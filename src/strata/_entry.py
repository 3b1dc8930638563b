"""The ``strata`` console script: answers ``--version`` before importing the CLI."""

import gc
import sys

#: set by the native client (native/strata.c) when the watcher did not answer in time
SILENT_WATCHER = "STRATA_WATCHER_SILENT_"
#: the collector's first threshold in an agent's hook run here (Python's default: 700)
HOOK_GC_THRESHOLD = 70_000


def run() -> None:
    """Run the CLI (``strata --version`` costs only the interpreter start).

    ``strata snapshot`` and ``status`` are handed to the workspace's watcher when one runs.
    """
    if sys.argv[1:] == ["--version"]:
        from strata._version import __version__

        sys.stdout.write(f"strata {__version__}\n")
        return
    if "mcp" in sys.argv[1:4]:  # (strata mcp, strata -C DIR mcp): the prestarted server's
        from strata.integrations.mcp_prestart import try_prestarted

        try_prestarted(sys.argv[1:])  # exits when the prestarted server ran the session
    if sys.argv[1:2] == ["hook"]:  # an agent's hook: its snapshot handed to the watcher
        from strata.integrations.fasthook import try_fast

        try_fast(sys.argv[2:])  # exits when the workspace's watcher recorded it
        from strata.integrations import fasthook

        if fasthook.walks_here:  # recorded here: the walk begins while the modules load
            from strata.store.prefetch import start

            start(["snapshot"])
    # what the start-up imports make lives as long as the process: no collection while
    # importing (25 of them, 2.4 ms of a no-op snapshot), then kept out of the collector's
    # reach (gc.freeze) so that later collections do not walk it again
    gc.disable()
    import os

    if os.environ.pop(SILENT_WATCHER, None) == "1":
        # the native client waited for the watcher in vain: do not wait for it again
        from strata.watch import served

        served.silent_watcher = True
    else:
        from strata._resident import try_resident

        # exits when the workspace's watcher ran the command
        try_resident(sys.argv[1:], finish_run=_finish_run)
    from strata._fncache import install

    install()  # the methods dataclasses write, compiled in an earlier run
    if sys.argv[1:2] in (["snapshot"], ["status"]):
        from strata.store.prefetch import start

        start(sys.argv[1:])  # the walk begins on another core while the modules load
    if sys.argv[1:2] == ["snapshot"]:
        import strata.repo  # noqa: F401  (what a snapshot runs, loaded with the collector off)
        from strata.cli.plain import try_plain

        gc.freeze()
        gc.enable()
        try_plain(sys.argv[2:])  # exits when it ran a plain snapshot, without the parser
    from strata.cli import main

    gc.freeze()
    if sys.argv[1:2] == ["hook"]:
        # an agent waits for this short process, whose imports go on inside the command: the
        # young generation is collected 100 times less often (52 collections of a cold hook's
        # 20,000-file walk and record become a few)
        gc.set_threshold(HOOK_GC_THRESHOLD, 10, 10)
    gc.enable()
    main()


def _finish_run(lease: int, report: dict[str, object]) -> int:
    """Record here a run the watcher began and lost (see ``strata._resident``)."""
    from strata.cli.run import finish_here

    return finish_here(lease, report)
