"""The records that cross a process boundary: files (and `--estimate --json` lines) one program
writes and another reads. One module each, a frozen dataclass with a `version`, one writer and
one reader; nothing reads these files by string key outside their module.

- `evaluate_report`: `python -m pipeline.evaluate --report`, read by the console's acceptance
  bars and bench;
- `train_summary`: a training run's `summary.json`, read by train's resume and bench;
- `merge_stats`: merge's stats beside its dataset, read by extract and the console's checks;
- `regenerate_stats`: regenerate's stats beside its output, read by its own resume;
- `estimates`: the `--estimate --json` lines of train, extract and regenerate, read by the
  console's checks and bench.

`codec.py` is what they share: the typed decoding, the bounded read, the atomic write, the
record's tag and version, and the errors (`RecordError`, a `BadInput`: exit 2 in a stage).
Ground floor, stdlib only: the console imports this package.
"""
