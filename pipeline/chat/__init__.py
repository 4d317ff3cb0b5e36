"""Chat data as every stage that reads a conversation reads it: records and their checks
(records.py), the raw sources a dataset comes in (sources.py, json_stream.py), the chat
template and special tokens (template.py), the assistant-only loss mask (loss_mask.py) and the
demo's synthetic conversations (synthetic.py). A contract floor: it imports no stage."""
