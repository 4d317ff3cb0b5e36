"""Chat templates and special tokens of the demo tokenizer.

Two templates render the same text. The shipped one has no `{% generation %}` markers,
like most production templates (Llama 3, Qwen), so the demo exercises the mask builder
that needs none; the marked one exists so tests can check both mask paths agree.
"""

from __future__ import annotations

import re

BOS = "<|begin|>"
END = "<|end|>"
PAD = "<|pad|>"
SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
SPECIAL_TOKENS = [PAD, BOS, END, SYSTEM, USER, ASSISTANT]
ROLES = ("system", "user", "assistant")
_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")

_HEAD = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role: ' + message['role']) }}"
    "{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' }}"
)
_TAIL = (
    "{{ '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

CHAT_TEMPLATE = _HEAD + "{{ message['content'] }}" + _TAIL

CHAT_TEMPLATE_WITH_GENERATION = (
    _HEAD
    + "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] }}{% endgeneration %}"
    "{% else %}{{ message['content'] }}{% endif %}"
    + _TAIL
)


def has_generation_markers(template: str) -> bool:
    """Whether a template marks assistant text itself (HF's `{% generation %}` block)."""
    return _GENERATION_TAG.search(template) is not None
