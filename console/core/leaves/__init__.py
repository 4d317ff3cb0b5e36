"""The core's leaves: modules that import nothing of ours but each other. Units and their
words (durations, rates, curves), text made safe to print (terminal_text, redaction), the
error types, expressions, the interpreter a phase runs under, atomic JSON writes, and the
readers of a log's tail and of an acceptance report."""
