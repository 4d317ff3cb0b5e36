"""A tiny local Llama with the demo's chat template, for the regenerate tests: built on the
CPU in a second, nothing downloaded."""

from __future__ import annotations

from pathlib import Path


def build_chat_target(path: Path, layers: int = 2) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.demo.tokenizer import build_tokenizer

    tok = build_tokenizer([f"question {i} answer {i * 7} words and more words" for i in range(200)], vocab_size=300)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def greedy_answers(model, tok, conv: list[dict[str, str]], max_new: int, ends: set[int] | None = None) -> list[str]:
    """Plain `model.generate`'s greedy answer to each assistant turn's prompt (the chat before it)."""
    import torch

    out = []
    for k, m in enumerate(conv):
        if m["role"] != "assistant":
            continue
        ids = tok.apply_chat_template(conv[:k], add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"]
        more = {"eos_token_id": sorted(ends)} if ends else {}
        with torch.inference_mode():
            seq = model.generate(ids, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id,
                                 **more)[0, ids.shape[1]:].tolist()
        if ends and seq and seq[-1] in ends:
            seq = seq[:-1]
        out.append(tok.decode(seq, skip_special_tokens=True))
    return out


def build_talking_target(path: Path, end_share: float = 0.12, word_share: float = 0.85, layers: int = 2) -> Path:
    """The tiny target, changed so that whatever it reads it ends a turn with about
    `end_share` probability at each token, and otherwise draws a word token (letters or digits,
    two or more) with about `word_share`: one dimension of the residual stream is a constant no
    layer writes to, and only the end and word tokens read it. Sampled, it writes short
    questions of words that end where a turn ends, and now and then bytes that are not text;
    greedy, it repeats one word to its bound."""
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build_chat_target(path, layers=layers)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    vocab = model.lm_head.weight.shape[0]
    words = [i for i in range(vocab) if len(tok.decode([i]).strip()) >= 2 and tok.decode([i]).strip().isalnum()]
    rest = vocab - 1 - len(words)
    total = rest / (1 - end_share - word_share)  # the softmax's sum when the rest's logits are 0
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0
            layer.mlp.down_proj.weight[0, :] = 0
        model.lm_head.weight[:, 0] = 0
        ids = tok.apply_chat_template([{"role": "user", "content": "question 3 words"}], return_tensors="pt",
                                      return_dict=True)["input_ids"]
        normed = float(model(ids, output_hidden_states=True).hidden_states[-1][0, :, 0].mean())
        model.lm_head.weight[tok.eos_token_id, 0] = math.log(end_share * total) / normed
        model.lm_head.weight[words, 0] = math.log(word_share * total / len(words)) / normed
        # one word a little likelier than the end: greedy answers say it until their bound
        model.lm_head.weight[words[-1], 0] = (math.log(end_share * total) + 0.5) / normed
    model.save_pretrained(path)
    return path
