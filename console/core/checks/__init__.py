"""Pre-flight and verification checks (docs/internals.md, "Check vocabulary")."""
