"""Replay and preflight: re-run recorded steps offline; check a proposal before accepting it."""
