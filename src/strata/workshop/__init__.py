"""The Workshop: a chat with an agent whose edits land in the Draft (seed 000)."""
