"""regenerate --synthesize: records whose questions the target writes too (main.py is the entry)."""
