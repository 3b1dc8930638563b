"""``python -m strata``: the same as the ``strata`` command."""

from strata.cli import main

main()
