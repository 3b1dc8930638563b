"""Where :class:`Transaction` was first defined; it lives beside :class:`~strata.core.core.Core`.

The two refer to each other (``core.transaction()`` opens one, ``tx.core`` is
its repository), so they are one module: :mod:`strata.core.core`.
"""

from strata.core.core import Transaction as Transaction
