"""Drafter training: `python -m pipeline.train` (see __main__.py for the CLI and exit codes).

Modules: source.py (what training asks of its data; data.py the store, online.py the merged
dataset), setup.py (the run, built once; run.py holds it), draft_vocab.py, step.py, loss.py
(training-time test against the target's head), checkpoint.py (atomic checkpoints with a
`latest` pointer; what export reads), dist.py (torchrun/DDP), loop.py (one run).
"""
