"""Replay and preflight: rebuild recorded states in a scratch folder and check them (seed 004)."""
