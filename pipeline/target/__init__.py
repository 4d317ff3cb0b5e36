"""The target model, one way for every stage: its facts read from its files with the stdlib
only (config.py) and its weights loaded with torch and transformers (model.py). A contract
floor: it imports no stage."""
