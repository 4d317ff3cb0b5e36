"""`python -m pipeline.serve`: an SGLang server for a `service` phase (__main__.py says how)."""
