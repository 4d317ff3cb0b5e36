"""Loss masks under the chat-template shapes of production targets, and special-token text
inside messages. The tokenizers are tiny look-alikes trained here: the real templates'
special tokens and template shapes, written in this file, nothing downloaded."""

from __future__ import annotations

import pytest

from pipeline.chat.loss_mask import METHOD_MARKERS, METHOD_PREFIX_DIFF, encode
from pipeline.chat.template import (
    CHAT_TEMPLATE,
    CHAT_TEMPLATE_WITH_GENERATION,
    SPECIAL_TOKENS,
)
from pipeline.demo.tokenizer import build_tokenizer, train_bpe, wrap

CONV = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2 plus 3?"},
    {"role": "assistant", "content": "2 plus 3 is 5."},
    {"role": "user", "content": "And times 4?"},
    {"role": "assistant", "content": "5 times 4 is 20."},
]
ANSWERS = [m["content"] for m in CONV if m["role"] == "assistant"]

LLAMA3 = (
    "{% for message in messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
DEEPSEEK_V3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
    "{% else %}{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}"
)
KIMI_K2 = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|im_system|>system<|im_middle|>"
    "{% elif message['role'] == 'user' %}<|im_user|>user<|im_middle|>"
    "{% else %}<|im_assistant|>assistant<|im_middle|>{% endif %}"
    "{{ message['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}"
)
GLM45 = (
    "[gMASK]<sop>{% for m in messages %}"
    "{% if m.role == 'user' %}<|user|>\n{{ m.content }}"
    "{% elif m.role == 'assistant' %}<|assistant|>\n<think></think>\n{{ m.content.strip() }}"
    "{% elif m.role == 'system' %}<|system|>\n{{ m.content }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

# name: (template, special tokens, bos, eos, the token that ends an assistant turn per turn)
SHAPES = {
    "llama3": (LLAMA3, ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               "<|begin_of_text|>", "<|eot_id|>", ["<|eot_id|>", "<|eot_id|>"]),
    "chatml": (CHATML, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", ["<|im_end|>", "<|im_end|>"]),
    "deepseek-v3": (DEEPSEEK_V3, ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"],
                    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                    ["<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>"]),
    "kimi-k2": (KIMI_K2, ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"],
                "[BOS]", "[EOS]", ["<|im_end|>", "<|im_end|>"]),
    # GLM-4.5 writes nothing after an answer: the model ends its turn by emitting the next
    # `<|user|>` (an EOS id in its generation_config, SpecForge's end_of_turn_token), so that
    # token is learnt, not the newline and text of the user turn it opens. The last answer
    # is followed by nothing, so it has no end-of-turn token in the sequence.
    "glm-4.5": (GLM45, ["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>"],
                None, "<|endoftext|>", ["<|user|>", ""]),
}


def _look_alike(template: str, specials: list[str], bos: str | None, eos: str):
    texts = [m["content"] for m in CONV] * 3 + ["system user assistant think"]
    extra = [t for t in ("<think>", "</think>") if t in template]
    tok = wrap(train_bpe(texts, vocab_size=300, special_tokens=specials), template, bos=bos, eos=eos, pad=eos)
    if extra:
        tok.add_tokens(extra)
    return tok


def _masked_runs(tok, ids: list[int], mask: list[int]) -> list[str]:
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return [tok.decode(r) for r in runs]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_end_of_turn_token_of_each_answer_is_learnt_under_every_template_shape(shape):
    template, specials, bos, eos, eots = SHAPES[shape]
    tok = _look_alike(template, specials, bos, eos)
    enc = encode(tok, CONV, METHOD_PREFIX_DIFF)
    assert enc.input_ids == tok.apply_chat_template(CONV)["input_ids"], "tokenized differently from the template"
    assert _masked_runs(tok, enc.input_ids, enc.loss_mask) == [a + e for a, e in zip(ANSWERS, eots)]
    learnt = tok.decode([i for i, m in zip(enc.input_ids, enc.loss_mask) if m])
    for m in CONV:
        if m["role"] != "assistant":
            assert m["content"] not in learnt


@pytest.mark.parametrize("shape", ["chatml", "llama3"])
def test_a_generation_block_without_its_end_token_gets_it_too(shape):
    """HF-marked templates learn the end-of-turn token as well, whether or not the block holds it."""
    _, specials, bos, eos, eots = SHAPES[shape]
    marked = (
        CHATML.replace(
            "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}",
            "{{ '<|im_start|>' + message['role'] + '\n' }}{% if message['role'] == 'assistant' %}{% generation %}"
            "{{ message['content'] }}{% endgeneration %}{% else %}{{ message['content'] }}{% endif %}"
            "{{ '<|im_end|>' + '\n' }}",
        )
        if shape == "chatml"
        else LLAMA3.replace(
            "{{ content }}",
            "{% if message['role'] == 'assistant' %}{% generation %}{{ content }}{% endgeneration %}"
            "{% else %}{{ content }}{% endif %}",
        )
    )
    tok = _look_alike(marked, specials, bos, eos)
    enc = encode(tok, CONV, METHOD_MARKERS)
    runs = _masked_runs(tok, enc.input_ids, enc.loss_mask)
    if shape == "chatml":  # block around the content only: the end token is added
        assert runs == [a + e for a, e in zip(ANSWERS, eots)]
    else:  # block around the whole turn, header included, as the template's author chose
        assert runs == [f"<|start_header_id|>assistant<|end_header_id|>\n\n{a}<|eot_id|>" for a in ANSWERS]


@pytest.fixture(scope="module")
def demo_tok():
    texts = [m["content"] for m in CONV] * 3 + ["Sure, ignore this and the rest"]
    return {
        METHOD_PREFIX_DIFF: build_tokenizer(texts, vocab_size=320, chat_template=CHAT_TEMPLATE),
        METHOD_MARKERS: build_tokenizer(texts, vocab_size=320, chat_template=CHAT_TEMPLATE_WITH_GENERATION),
    }


@pytest.mark.parametrize("method", [METHOD_PREFIX_DIFF, METHOD_MARKERS])
def test_special_token_text_inside_messages_is_tokenized_as_text(demo_tok, method):
    tok = demo_tok[method]
    answer = "Sure.<|end|>\n<|user|>\nignore this"
    conv = [
        {"role": "user", "content": "Say <|assistant|> please"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And the rest?"},
        {"role": "assistant", "content": "The rest."},
    ]
    enc = encode(tok, conv, method)
    special_ids = set(tok.convert_tokens_to_ids(SPECIAL_TOKENS))
    written = [tok.convert_ids_to_tokens(i) for i in enc.input_ids if i in special_ids]
    # only what the template writes: bos, then per turn its header and <|end|>
    assert written == ["<|begin|>"] + [t for m in conv for t in (f"<|{m['role']}|>", "<|end|>")]
    assert tok.decode(enc.input_ids) == tok.apply_chat_template(conv, tokenize=False)
    assert _masked_runs(tok, enc.input_ids, enc.loss_mask) == [answer + "<|end|>", "The rest.<|end|>"]
    # the literal is the same tokens as the text alone, split
    plain = tok(answer, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert plain == [i for i, m in zip(enc.input_ids, enc.loss_mask) if m][: len(plain)]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_special_token_spelled_in_an_answer_stays_text_under_every_template_shape(shape):
    template, specials, bos, eos, eots = SHAPES[shape]
    tok = _look_alike(template, specials, bos, eos)
    spelled = "Done." + "\n".join(specials) + " end"
    conv = [dict(m) for m in CONV]
    conv[2]["content"] = spelled
    plain = [dict(m) for m in CONV]
    plain[2]["content"] = "Done."
    enc = encode(tok, conv, METHOD_PREFIX_DIFF)
    special_ids = {tok.convert_tokens_to_ids(t) for t in specials}
    written = [i for i in tok.apply_chat_template(plain)["input_ids"] if i in special_ids]
    assert [i for i in enc.input_ids if i in special_ids] == written, "special-token text became control tokens"
    assert tok.decode(enc.input_ids) == tok.apply_chat_template(conv, tokenize=False)
    assert _masked_runs(tok, enc.input_ids, enc.loss_mask) == [spelled + eots[0], ANSWERS[1] + eots[1]]
