"""The rules engine: a pure function of (event, facts, policy, now) to a decision record."""
