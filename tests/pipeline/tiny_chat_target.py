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
