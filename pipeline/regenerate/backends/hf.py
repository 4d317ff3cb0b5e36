"""Answers from a local HF model: batched, left-padded prompts, a KV cache, and one
random generator per answer.

`model.generate` draws from one generator for the whole batch, so an answer would depend
on which records share its batch; here each row samples with its own `torch.Generator`
seeded from the record (conversation.seed_for), and a resumed run gives the same answers.
Temperature 0 is greedy. The prompt is the target's own chat template with
`add_generation_prompt`, as the target saw chats in training.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.hf_cache import cache_kwarg

from ..errors import BadInput, Failure

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class HFBackend:
    def __init__(self, model_dir: Path, device: str, dtype: str, max_new_tokens: int, temperature: float,
                 top_p: float, max_prompt_tokens: int | None = None) -> None:
        import torch
        from transformers import AutoTokenizer

        from pipeline.target_model import load_target

        if not (Path(model_dir) / "config.json").is_file():
            raise BadInput(f"--model {model_dir}: no config.json there; point it at a save_pretrained folder")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BadInput(f"--device {device}: torch {torch.__version__} sees no CUDA device; use --device cpu")
        try:
            self.tok = AutoTokenizer.from_pretrained(model_dir)
        except (OSError, ValueError) as e:
            raise BadInput(f"--model {model_dir}: cannot load its tokenizer: {e}") from None
        if not getattr(self.tok, "chat_template", None):
            raise BadInput(f"--model {model_dir}: the tokenizer has no chat template (tokenizer_config.json "
                           "'chat_template', or chat_template.jinja); regenerate prompts the target as it was "
                           "trained to chat, so it needs one")
        self.tok.padding_side = "left"
        self.torch = torch
        self.device = torch.device(device)
        self.model = load_target(Path(model_dir), device, getattr(torch, DTYPES[dtype]))
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_prompt_tokens = max_prompt_tokens
        eos = self.model.generation_config.eos_token_id
        eos = eos if eos is not None else self.tok.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos]) - {None}
        if not self.eos:
            raise BadInput(f"--model {model_dir}: neither generation_config.json nor the tokenizer names an end token")
        pad = self.tok.pad_token_id
        self.pad = pad if pad is not None else next(iter(self.eos))
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        self.cache_kw = cache_kwarg(self.model)

    def _sample(self, logits, generators):
        torch = self.torch
        if self.temperature == 0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(dim=-1) - sorted_p > self.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        rows = [torch.multinomial(probs[i].cpu(), 1, generator=g) for i, g in enumerate(generators)]
        return torch.cat(rows).to(logits.device)

    def generate(self, prompts: list[list[dict[str, str]]], seeds: list[int]) -> list[tuple[str, int] | Failure]:
        """One answer per prompt, or the Failure that prompt met."""
        torch = self.torch
        results: list[tuple[str, int] | Failure | None] = [None] * len(prompts)
        texts = [self.tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
        ids = self.tok(texts, add_special_tokens=False)["input_ids"]
        live = []
        for i, seq in enumerate(ids):
            if self.max_positions and len(seq) + self.max_new_tokens > self.max_positions:
                results[i] = Failure("prompt_too_long", f"the prompt is {len(seq)} tokens; with --max-new-tokens "
                                     f"{self.max_new_tokens} it exceeds the target's {self.max_positions} positions")
            elif self.max_prompt_tokens is not None and len(seq) > self.max_prompt_tokens:
                results[i] = Failure("prompt_too_long", f"the prompt is {len(seq)} tokens, more than "
                                     f"--max-prompt-tokens {self.max_prompt_tokens}")
            else:
                live.append(i)
        if live:
            with torch.inference_mode():
                for i, out in zip(live, self._decode([ids[i] for i in live], [seeds[i] for i in live])):
                    results[i] = out
        return results  # type: ignore[return-value]

    def _decode(self, batch: list[list[int]], seeds: list[int]) -> list[tuple[str, int]]:
        torch = self.torch
        width = max(len(s) for s in batch)
        input_ids = torch.tensor([[self.pad] * (width - len(s)) + s for s in batch], device=self.device)
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in batch], device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        out = [[] for _ in batch]
        finished = [False] * len(batch)
        past = None
        step_ids, step_pos = input_ids, positions
        for _ in range(self.max_new_tokens):
            res = self.model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos, use_cache=True,
                             logits_to_keep=1, **{self.cache_kw: past})
            past = res.get(self.cache_kw)
            nxt = self._sample(res.logits[:, -1, :], generators)
            for i, t in enumerate(nxt.tolist()):
                if finished[i]:
                    continue
                if t in self.eos:
                    finished[i] = True
                else:
                    out[i].append(t)
            if all(finished):
                break
            step_ids = nxt[:, None]
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, mask.new_ones((len(batch), 1))], dim=-1)
        return [(self.tok.decode(o, skip_special_tokens=True), len(o) + (1 if finished[i] else 0))
                for i, o in enumerate(out)]
