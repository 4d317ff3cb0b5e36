"""`python -m pipeline.export`: a trained drafter checkpoint as a folder SGLang serves, and the
check of such a folder (__main__.py says how)."""
