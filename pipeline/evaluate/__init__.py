"""Acceptance-length evaluation of an exported EAGLE-3 drafter (see __main__ for the CLI):
chain speculative decoding with greedy verification against the target in transformers,
or the figures a running SGLang server reports."""
