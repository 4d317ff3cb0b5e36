"""`python -m pipeline.regenerate`: the target answers a chat dataset's user turns, so the
drafter later learns from what the target itself says (docs/regenerate.md)."""
