"""`python -m pipeline.demo`: the demo's inputs built offline from a seed (__main__.py says how)."""
