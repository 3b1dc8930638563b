"""Which commands a watcher runs for the command line (shared by the client and the server).

The client (``strata._resident``) imports only the standard library before
it hands a command over, so this module imports nothing.
"""

#: the commands a watcher runs for the command line (it refuses any other): those whose
#: cost is start-up; anything else (``run``, ``init``, ``watch``; ``show`` and ``cat``, whose
#: output may be a whole large file) runs in the calling process
SERVED = (
    "snapshot",
    "status",
    "diff",
    "history",
    "check",
    "rewind",
    "restore",
    "undo",
    "redo",
    "bookmark",
    "branch",
    "checkpoint",
    "op",
    "review",
    "publish",
    "discard",
    "draft",
    "export",
)
#: sub-commands of a served command that run in the calling process (they start a child)
LOCAL_SUB = {"draft": ("run",)}
#: options whose output depends on the terminal or the process: always run locally
LOCAL_ONLY = ("-h", "--help", "--debug")

#: set by the client when the watcher did not answer in time and this process runs the
#: command itself: its scans then read the whole tree instead of waiting for that watcher
#: again, and ``status`` says the watcher does not answer (this process only)
silent_watcher = False
