"""The agent loop: model calls whose tool calls edit the Draft, one recorded revision per step."""
