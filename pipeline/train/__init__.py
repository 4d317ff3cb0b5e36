"""Drafter training: `python -m pipeline.train` (see __main__.py for the CLI and exit codes).

Modules: data.py (the store: checks, batch plan, memory-mapped reads, draft-vocab counts),
loss.py (training-time test against the target's head), checkpoint.py (atomic checkpoints
with a `latest` pointer; what export reads), dist.py (torchrun/DDP), loop.py (one run).
"""
