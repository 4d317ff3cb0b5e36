"""Where answers come from: a local HF model (`hf.py`) or SGLang servers (`server.py`).
Both answer one prompt (the chat so far) with (text, generated tokens) or a failure reason."""
