"""regenerate --synthesize: records whose questions the target writes too (synthesize.py is the entry)."""
