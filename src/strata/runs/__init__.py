"""Instrumented runs: snapshot before, run, snapshot after, diff, optional rollback."""
