"""Model providers: one protocol, adapters for OpenAI, Anthropic, scripted and replayed models.

See :mod:`strata.providers.base` for the types every adapter speaks.
"""
