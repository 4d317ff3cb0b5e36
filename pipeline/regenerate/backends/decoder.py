"""The device half of the hf backend: a fixed number of slots, each decoding one answer, with
every per-token decision (the draw, the end token, the length bound) taken on the device.

The host looks only every `sync_every` steps, when it copies the finished slots' tokens
out and gives those slots their next prompt; between looks nothing waits for the device.
A finished slot keeps stepping until then, on its last token at its last position, which
writes nothing another answer reads. On CUDA each decode step at each attention width is
captured once as a CUDA graph and replayed, so a step costs one launch instead of a few
hundred; where capture fails the step runs eagerly, with a warning. The slots are cut into
lanes (lanes.py), each attending as wide as its own longest chat: a graph is captured per
combination of lane widths. With `stop_loops` an answer also ends at the token that completes
an exact loop (LoopWatch, loops.py's rule).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from pipeline.events import warn
from pipeline.regenerate.backends.kv_slots import SlotKV, active
from pipeline.regenerate.backends.lanes import LANE_SLOTS, MAX_GRAPHS, covering, layout
from pipeline.regenerate.backends.sampler import Sampler
from pipeline.regenerate.loops import MAX_PERIOD, MIN_LOOP_TOKENS, REPEATS

WIDTH_STEP = 256  # attention widths are rounded up to this with graphs, so few distinct ones are captured
WIDTH_STEP_EAGER = 32  # without graphs a narrower width costs nothing to change


def round_up(n: int, step: int = WIDTH_STEP) -> int:
    return -(-n // step) * step


@dataclass
class Admit:
    """One slot's next prompt: the tokens to feed from `start` (what the slot already holds
    before it stays), and the answer's seed."""

    slot: int
    tokens: list[int]
    start: int
    seed: int
    limit: int = 0  # the answer's bound in tokens (0, or more than the decoder's: its max_new)
    temperature: float | None = None  # its sampling temperature (None: the sampler's); needs a per_row sampler


@dataclass
class StepStats:
    """What the decode steps read and cost, for the bench: key columns read with lanes, and
    with one width for every slot; graphs captured and the seconds it took; the seconds the
    host spent blocked on the device at its looks, and launching prefills (on CUDA the device
    works while the host launches; the rest of a run's wall is the host's own work)."""

    columns: int = 0
    columns_one_width: int = 0
    graphs: int = 0
    capture_s: float = 0.0
    waited_s: float = 0.0
    prefill_s: float = 0.0


class LoopWatch:
    """Which slots' answers have just entered an exact loop (loops.py's rule, one token at a
    time on the device): for every unit length p, the run of newest tokens equal to the token
    p before them. A looping answer stops there instead of generating to --max-new-tokens; the
    host then cuts it to the loop's first two periods."""

    def __init__(self, slots: int, device: torch.device) -> None:
        self.periods = torch.arange(1, MAX_PERIOD + 1, device=device)
        # run + p >= max(REPEATS * p, MIN_LOOP_TOKENS), as loops.loop_tail counts it
        self.need = torch.maximum((REPEATS - 1) * self.periods, MIN_LOOP_TOKENS - self.periods)
        self.run = torch.zeros(slots, MAX_PERIOD, dtype=torch.int32, device=device)

    def see(self, out: torch.Tensor, gen: torch.Tensor, nxt: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        """Count `nxt` (about to be answer token `gen` of each slot); True where a loop is complete."""
        back = gen[:, None] - self.periods[None, :]
        earlier = out.gather(1, back.clamp(min=0))
        same = (earlier == nxt[:, None]) & (back >= 0) & live[:, None]
        self.run.add_(1).mul_(same)  # in place: a captured graph replays on these buffers
        return (self.run >= self.need).any(1)


class Decoder:
    def __init__(self, model: Any, slots: int, max_new: int, eos: set[int], sampler: Sampler, device: torch.device,
                 graphs: bool, max_positions: int = 0, lane_slots: int = LANE_SLOTS, stop_loops: bool = False) -> None:
        cfg = model.config
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        dtype = next(model.parameters()).dtype
        self.model, self.slots, self.max_new, self.sampler, self.device = model, slots, max_new, sampler, device
        self.max_positions = max_positions  # the most a slot can need (0: the target does not say)
        first = min(WIDTH_STEP, max_positions) if max_positions else WIDTH_STEP
        self.kv = SlotKV(cfg.num_hidden_layers, slots, kv_heads, head_dim, first, dtype, device)
        z: dict[str, Any] = dict(device=device, dtype=torch.int64)
        self.ids, self.pos, self.seeds, self.gen = (torch.zeros(slots, **z) for _ in range(4))
        self.done = torch.ones(slots, dtype=torch.bool, device=device)
        self.limit = torch.full((slots,), max_new, **z)
        self.temps = torch.full((slots,), float(sampler.temperature), dtype=torch.float32, device=device)
        self.out = torch.zeros(slots, max_new, **z)
        self.eos = torch.tensor(sorted(eos), **z)
        self.eos_set = set(eos)
        self.rows = torch.arange(slots, device=device)
        self.loops = LoopWatch(slots, device) if stop_loops else None
        self.lanes = layout(slots, lane_slots)
        self.stats = StepStats()
        self.graphs: dict[tuple[int, ...], torch.cuda.CUDAGraph] | None = (
            {} if graphs and device.type == "cuda" else None)
        self.width_step = WIDTH_STEP if self.graphs is not None else WIDTH_STEP_EAGER
        self._pool: Any = None  # torch's graph memory pool, shared by every graph captured

    def reserve(self, positions: int) -> None:
        """Room for `positions` per slot; graphs captured for the old buffers are dropped, and
        their memory pool with them: torch's allocator refuses a capture into a pool whose
        graphs are all gone (an internal assert), which turned graphs off for the rest of a run
        whose first prompts were short (synthesis: a template, then a question)."""
        if positions > self.kv.capacity:
            grown = max(round_up(positions), 2 * self.kv.capacity)
            self.kv.grow(min(grown, max(self.max_positions, positions)) if self.max_positions else grown)
            if self.graphs:
                self.graphs.clear()
                self._pool = None

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, position_ids=pos, use_cache=False, logits_to_keep=1)
        return out.logits[:, -1, :]

    def prefill(self, group: list[Admit]) -> None:
        """Feed each slot's new tokens (left-padded together) and draw its first answer token."""
        width = round_up(max(len(a.tokens) for a in group), self.width_step)
        self.reserve(width)
        longest = max(len(a.tokens) - a.start for a in group)
        ids, pos = [], []
        for a in group:
            new = a.tokens[a.start:]
            pad = longest - len(new)
            ids.append([0] * pad + new)
            pos.append([-1] * pad + list(range(a.start, len(a.tokens))))
        ids_t = torch.tensor(ids, device=self.device)
        pos_t = torch.tensor(pos, device=self.device)
        rows = torch.tensor([a.slot for a in group], device=self.device)
        seeds = torch.tensor([a.seed for a in group], device=self.device, dtype=torch.int64)
        limits = torch.tensor([min(a.limit or self.max_new, self.max_new) for a in group], device=self.device)
        with active(self.kv):
            self.kv.set_prefill(rows, pos_t, width)
            logits = self._forward(ids_t, pos_t.clamp(min=0))
        temps = torch.tensor([self.sampler.temperature if a.temperature is None else a.temperature for a in group],
                             dtype=torch.float32, device=self.device)
        first = self.sampler(logits, seeds, torch.zeros_like(seeds), temps if self.sampler.per_row else None)
        self.temps[rows] = temps
        self.ids[rows] = first
        self.pos[rows] = torch.tensor([len(a.tokens) for a in group], device=self.device)
        self.seeds[rows] = seeds
        self.gen[rows] = 1
        self.out[rows, 0] = first
        self.limit[rows] = limits
        self.done[rows] = torch.isin(first, self.eos) | (limits <= 1)
        if self.loops is not None:
            self.loops.run[rows] = 0

    def _step(self, widths: tuple[int, ...]) -> None:
        live = ~self.done
        self.kv.set_decode(self.pos, [(lane.start, lane.stop, w) for lane, w in zip(self.lanes, widths)])
        logits = self._forward(self.ids[:, None], self.pos[:, None])
        nxt = self.sampler(logits, self.seeds, self.gen, self.temps if self.sampler.per_row else None)
        at = self.gen.clamp(max=self.max_new - 1)
        looped = self.loops.see(self.out, self.gen, nxt, live) if self.loops is not None else False
        self.out[self.rows, at] = torch.where(live, nxt, self.out[self.rows, at])
        self.gen.add_(live.long())
        self.pos.add_(live.long())
        self.ids.copy_(torch.where(live, nxt, self.ids))
        self.done.logical_or_(live & (torch.isin(nxt, self.eos) | (self.gen >= self.limit) | looped))

    def steps(self, n: int, widths: list[int]) -> None:
        """`n` decode steps of every slot, each lane attending over its first `widths[i]` positions."""
        key = tuple(min(round_up(max(w, 1), self.width_step), self.kv.capacity) for w in widths)
        with active(self.kv):
            graph = None
            if self.graphs is not None:
                key, graph = self._graph(key)
            for _ in range(n):
                if graph is not None:
                    graph.replay()
                else:
                    self._step(key)
        one = min(round_up(max(widths), self.width_step), self.kv.capacity)
        self.stats.columns += n * sum(len(lane) * w for lane, w in zip(self.lanes, key))
        self.stats.columns_one_width += n * self.slots * one

    def _graph(self, key: tuple[int, ...]) -> tuple[tuple[int, ...], torch.cuda.CUDAGraph | None]:
        """The graph for these lane widths (or for a wider combination already captured, once
        `MAX_GRAPHS` are), captured on first use; (key used, graph), or (key, None) if capture failed."""
        graphs = self.graphs
        if graphs is None:
            raise RuntimeError("a CUDA graph asked for with graphs off")
        if key not in graphs and len(graphs) >= MAX_GRAPHS:
            wider = covering(key, graphs, [len(lane) for lane in self.lanes])
            key = wider or tuple(self.kv.capacity for _ in self.lanes)
        if key in graphs:
            return key, graphs[key]
        t0 = time.perf_counter()
        graph = self._capture(key)
        if graph is not None:
            graphs[key] = graph
            self.stats.graphs += 1
            self.stats.capture_s += time.perf_counter() - t0
        return key, graph

    def _state(self) -> list[torch.Tensor]:
        return [self.ids, self.pos, self.gen, self.done, self.out] + ([self.loops.run] if self.loops is not None else [])

    def _capture(self, key: tuple[int, ...]) -> torch.cuda.CUDAGraph | None:
        saved = [t.clone() for t in self._state()]
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._step(key)  # warm-up, outside the graph, as capture needs
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self._pool):
                self._step(key)
        except Exception as e:  # noqa: BLE001 - capture is an optimisation; eager steps give the same answers
            warn("regenerate", f"CUDA graph capture failed ({type(e).__name__}: {str(e)[:200]}); decoding without "
                 "graphs, slower")
            self.graphs = None
            graph = None
        finally:
            for t, s in zip(self._state(), saved):
                t.copy_(s)  # the warm-up and capture steps must not count
        return graph

    def finished(self) -> tuple[list[int], list[list[int]], list[bool], int]:
        """(slots whose answer ended, their tokens, whether each ended on an end token, tokens of
        the answers still going): the host's one look at the device per round."""
        ended = self.done & (self.gen > 0)
        t0 = time.perf_counter()
        count, total = torch.stack([ended.sum(), self.gen.sum()]).tolist()
        self.stats.waited_s += time.perf_counter() - t0
        if count == 0:
            return [], [], [], total
        idx = ended.nonzero().flatten()
        gen = self.gen[idx]
        rows = self.out[idx, : int(gen.max())].tolist()
        lens = gen.tolist()
        toks = [r[:n] for r, n in zip(rows, lens)]
        hit = [t[-1] in self.eos_set for t in toks]
        return idx.tolist(), toks, hit, total - sum(lens)

    def idle(self) -> bool:
        """Every slot finished and released: nothing a next run could find half done."""
        return bool(self.done.all()) and not bool(self.gen.any())

    def release(self, slots: list[int]) -> None:
        """Slots with nothing to do: they stay finished, and `finished` stops naming them."""
        if slots:
            idx = torch.tensor(slots, device=self.device)
            self.gen[idx] = 0
