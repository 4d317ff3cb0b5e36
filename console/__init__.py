"""eagle3-console: the operator console for EAGLE-3 drafter pipelines."""

__version__ = "0.1.0"
