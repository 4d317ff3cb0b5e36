"""Hidden-state extraction: the target's capture layers and final state, per sample, into the
store (pipeline/store: its layout and API). Two backends fill it: the HF engine in this
process (`engine.py`) and the SGLang client (`sglang_client.py`) over a patched server."""
