"""Strata: a time machine and safety layer for an AI agent's workspace."""

from strata._version import __version__

__all__ = ["__version__"]
