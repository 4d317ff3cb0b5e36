"""Answers from a local HF model at serving speed: a fixed set of slots decoding together,
each slot refilled with the next chat the moment its record is done, and one random stream
per answer.

The target runs through its own transformers forward, with a slot KV cache behind its
attention interface (kv_slots.py); the per-token work stays on the device and the host
looks every few steps (decoder.py, hf_schedule.py). transformers' continuous batching
(`generate_batch`) was the first candidate; it is left aside because it draws from one
generator shared by the batch (an answer would depend on its batch-mates, and a resumed run
would not repeat itself), and its API, prefix sharing included, moves between the 5.x
releases the project runs on (5.17 on the GPU image, 5.24 here); the attention interface the
slots plug into does not.

Each answer's draws depend on its own seed (conversation.seed_for) and token index only
(sampler.py), so a resumed run, or one with another batch size, gives the same answers.
Temperature 0 is greedy. The prompt is the target's own chat template with
`add_generation_prompt`, as the target saw chats in training.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import torch

from pipeline.regenerate.backends.decoder import Decoder, StepStats
from pipeline.regenerate.backends.hf_schedule import Scheduler
from pipeline.regenerate.backends.kv_slots import NAME, CacheTooLarge, UnsupportedAttention, register
from pipeline.regenerate.backends.lanes import LANE_SLOTS
from pipeline.regenerate.backends.sampler import Sampler
from pipeline.regenerate.conversation import Answering, C, seed_for
from pipeline.regenerate.errors import BadInput, Failure
from pipeline.regenerate.sink import Sink
from pipeline.target.model import load_target

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
SYNC_EVERY_CUDA = 16  # decode steps between the host's looks: a finished slot idles at most this many
SYNC_EVERY_CPU = 4
WINDOW_PER_SLOT = 8  # records admitted ahead of the oldest unwritten one, per slot


class HFBackend:
    def __init__(self, model_dir: Path, device: str, dtype: str, max_new_tokens: int, temperature: float,
                 top_p: float, max_prompt_tokens: int | None = None, trim_loops: bool = False, *, seed: int = 0,
                 slots: int = 16) -> None:
        from transformers import AutoTokenizer

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
        self.model_dir = Path(model_dir)
        self.device = torch.device(device)
        self.model = load_target(Path(model_dir), device, getattr(torch, DTYPES[dtype]))
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_prompt_tokens = max_prompt_tokens
        self.trim_loops = trim_loops
        self.seed, self.slots = seed, slots
        self.per_row_temperature = False  # whether a chat may set its own (Chat.temperature)
        eos = self.model.generation_config.eos_token_id
        eos = eos if eos is not None else self.tok.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos]) - {None}
        if not self.eos:
            raise BadInput(f"--model {model_dir}: neither generation_config.json nor the tokenizer names an end token")
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        self._kept: tuple[tuple, Decoder] | None = None  # (slots, graphs, lane_slots), the decoder
        self._use_slots()

    @property
    def graphs_used(self) -> bool:
        """Whether the last run's decode steps replayed CUDA graphs (capture can fail)."""
        return self._kept is not None and self._kept[1].graphs is not None

    @property
    def step_stats(self) -> StepStats | None:
        """The last run's counts (decoder.StepStats)."""
        return self._kept[1].stats if self._kept is not None else None

    def _use_slots(self) -> None:
        """Route the target's attention to the slot cache (kv_slots.py)."""
        register()
        try:
            self.model.set_attn_implementation(NAME)
        except (ValueError, ImportError, AttributeError):
            self.model.config._attn_implementation = NAME  # a release whose setter refuses registered names
        if getattr(self.model.config, "_attn_implementation", None) != NAME:
            raise BadInput(f"--model {self.model_dir}: this transformers release does not let the target use a "
                           "registered attention function; use --backend server")

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt's tokens, or the Failure of a prompt past today's bounds."""
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.bounded_ids(cast(str, text))  # tokenize=False: the rendered text

    def bounded_ids(self, text: str) -> list[int]:
        """A rendered prompt's tokens, or the Failure of a prompt past today's bounds."""
        seq = self.tok(text, add_special_tokens=False)["input_ids"]
        if self.max_positions and len(seq) + self.max_new_tokens > self.max_positions:
            raise Failure("prompt_too_long", f"the prompt is {len(seq)} tokens; with --max-new-tokens "
                          f"{self.max_new_tokens} it exceeds the target's {self.max_positions} positions")
        if self.max_prompt_tokens is not None and len(seq) > self.max_prompt_tokens:
            raise Failure("prompt_too_long", f"the prompt is {len(seq)} tokens, more than "
                          f"--max-prompt-tokens {self.max_prompt_tokens}")
        return seq

    def _slot_positions(self) -> int:
        """The most positions a slot can need (0: unbounded): a prompt past --max-prompt-tokens
        or the target's positions is refused, so the cache never grows past the bound, where
        doubling alone takes the next power of two (4,096 positions a slot for prompts of 2,000
        and 256 new tokens: 43 GB more at 1,024 slots of SmolLM2-135M)."""
        bounds = [b for b in (self.max_positions,
                              self.max_prompt_tokens and self.max_prompt_tokens + self.max_new_tokens + 1) if b]
        return min(bounds, default=0)

    def _decoder(self, slots: int, graphs: bool, lane_slots: int) -> Decoder:
        """The last run's decoder when it has the same slots and every slot came back free: its
        cache and its CUDA graphs are kept, so a second run (the bench's timed one after its
        warm-up) captures no graph the first one did. Its counts start again."""
        key = (slots, graphs, lane_slots)
        if self._kept is None or self._kept[0] != key or not self._kept[1].idle():
            self._kept = None  # the old cache goes before the new one is allocated
            vocab = self.model.get_output_embeddings().weight.shape[0]
            sampler = Sampler(vocab, self.device, self.temperature, self.top_p, self.per_row_temperature)
            self._kept = (key, Decoder(self.model, slots, self.max_new_tokens, self.eos, sampler, self.device,
                                       graphs, self._slot_positions(), lane_slots, self.trim_loops))
        decoder = self._kept[1]
        decoder.stats = StepStats()
        return decoder

    def decode(self, tokens: list[int]) -> str:
        return cast(str, self.tok.decode(tokens, skip_special_tokens=True))  # one sequence: one text

    def seed_of(self, chat: Answering) -> int:
        return seed_for(self.seed, chat.id, chat.turn)

    def run(self, chats: Iterator[C], sink: Sink[C], *, slots: int | None = None, graphs: bool = True,
            lane_slots: int = LANE_SLOTS) -> None:
        """Answer every turn of every chat, handing each finished record to `sink`. A bench
        times other `slots` on the same loaded target, and a test narrower lanes."""
        slots = self.slots if slots is None else slots
        sync = SYNC_EVERY_CUDA if self.device.type == "cuda" else SYNC_EVERY_CPU
        try:
            decoder = self._decoder(slots, graphs, lane_slots)
            scheduler = Scheduler(decoder, self.prompt_ids, self.decode, self.seed_of, sink, sync,
                                  WINDOW_PER_SLOT * slots)
            with torch.inference_mode():
                scheduler.run(chats)
        except UnsupportedAttention as e:
            raise BadInput(f"--model {self.model_dir}: {e}; use --backend server for this target") from None
        except CacheTooLarge as e:
            self._kept = None
            raise BadInput(f"--batch-size {slots}: {e} on {self.device}; lower --batch-size, or bound the prompts "
                           "with --max-prompt-tokens (what was answered is kept: rerun to resume)") from None
