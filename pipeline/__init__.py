"""EAGLE-3 stage programs. Each runs standalone (`python -m pipeline.X`) and never imports console."""
