"""``python -m strata``: the same as the ``strata`` command."""

from strata._entry import run

run()
