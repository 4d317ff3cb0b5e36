"""`python -m pipeline.prepare`: the recipe's inputs as the stages read them."""
