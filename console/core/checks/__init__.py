"""Pre-flight and verification checks (DESIGN.md section 3)."""
