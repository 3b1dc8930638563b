"""What events changed, in a reader's terms: semantic blocks, result events, merges.

A feature package over :mod:`strata.semantic`'s pure handlers: it reads the
two sides of each changed file from the object store, keeps each file's
result in a rebuildable cache (``REPO/semantic/cache.db``), and answers
"which events touched this function".
"""
