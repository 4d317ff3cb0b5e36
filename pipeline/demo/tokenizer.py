"""A byte-level BPE tokenizer trained locally, wrapped for transformers.

Nothing may be downloaded, so the demo (and tests) train their own tokenizer on the text
they generate; byte-level BPE needs no unknown token and round-trips any string.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from pipeline.chat.template import BOS, CHAT_TEMPLATE, END, PAD, SPECIAL_TOKENS


def train_bpe(
    texts: Iterable[str], vocab_size: int = 1024, min_frequency: int = 2, special_tokens: Iterable[str] = SPECIAL_TOKENS
) -> Tokenizer:
    """Deterministic for the same texts in the same order; tests pass other templates'
    special tokens (Llama 3, ChatML, ...) to build look-alikes of production tokenizers."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # trim_offsets=False: offsets then cover a token's leading space, which the mask builder relies on.
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def wrap(
    tok: Tokenizer,
    chat_template: str = CHAT_TEMPLATE,
    model_max_length: int = 2048,
    bos: str = BOS,
    eos: str = END,
    pad: str = PAD,
) -> PreTrainedTokenizerFast:
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = chat_template
    return fast


def build_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 1024,
    chat_template: str = CHAT_TEMPLATE,
    model_max_length: int = 2048,
) -> PreTrainedTokenizerFast:
    return wrap(train_bpe(texts, vocab_size), chat_template, model_max_length)
