"""The workbench: the Draft where agent edits land, its review, publish and discard, checkpoints.

Modules: :mod:`~strata.workbench.draft` (the Draft's folder, record, runs and
revisions), :mod:`~strata.workbench.publish` (review, publish with a three-way
tree merge, discard) and :mod:`~strata.workbench.checkpoints` (protected,
restorable snapshots of Published).
"""
