"""What an operator's command plays out over time: starting one phase (`startflow`, the
questions it asks the caller), running them all in order (`runall`), waiting on one
(`waiting`) and watching them all (`watch`). The top floor of the core: the CLI and the UI
drive it, and nothing in the core imports it."""
