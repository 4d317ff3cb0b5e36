"""`python -m pipeline.merge`: chat datasets into one shuffled, tokenized training set
(__main__.py says how)."""
