"""The fast hf backend (slots refilled per record, a KV cache a chat's next turn reuses,
seeded draws on the device) answers as plain `model.generate` does under greedy decoding;
its seeded draws follow the target's distribution whatever the batch; `--samples-per-prompt`
writes each sample as its own resumable record; progress comes per answered turn."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from stage_call import StageResult, call_stage
from tiny_chat_target import build_chat_target, greedy_answers

from pipeline.records import regenerate_stats
from pipeline.records.regenerate_estimate import parse_estimate
from pipeline.regenerate.sink import MemorySink

MAX_NEW = 10


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    """The tiny target, with end tokens chosen among what it says greedily, so that its
    answers end at different lengths and slots free up at different steps."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    path = build_chat_target(tmp_path_factory.mktemp("fast-target") / "tiny", layers=3)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    ends = {tok.eos_token_id}
    for i, k in ((0, 2), (3, 5), (5, 7)):
        ids = tok.apply_chat_template(_conv(i)[:1], add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"]
        with torch.inference_mode():
            seq = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=tok.pad_token_id)
        ends.add(int(seq[0, ids.shape[1] + k]))
    GenerationConfig(eos_token_id=sorted(ends), pad_token_id=tok.pad_token_id).save_pretrained(path)
    return path


def _conv(i: int) -> list[dict[str, str]]:
    words = " ".join(f"words {j}" for j in range(1 + (i * 7) % 13))  # prompts of mixed lengths
    conv = [{"role": "user", "content": f"question {i} {words}"}, {"role": "assistant", "content": "old"}]
    for t in range(i % 3):  # one, two or three user turns
        conv += [{"role": "user", "content": f"and {t} more {i * 7}?"}, {"role": "assistant", "content": "old"}]
    return conv


def test_greedy_answers_equal_model_generate_for_mixed_lengths_and_turns_with_slots_refilled(target, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.regenerate.backends import decoder as decoder_mod
    from pipeline.regenerate.backends.hf import HFBackend
    from pipeline.regenerate.conversation import Chat

    fed: list[tuple[int, int]] = []  # (tokens in the prompt, tokens the slot already held) per prefilled turn
    real_prefill = decoder_mod.Decoder.prefill

    def prefill(self, group):
        fed.extend((len(a.tokens), a.start) for a in group)
        return real_prefill(self, group)

    monkeypatch.setattr(decoder_mod.Decoder, "prefill", prefill)
    backend = HFBackend(target, "cpu", "fp32", MAX_NEW, 0.0, 1.0)
    chats = [Chat.start(i, f"r{i}", _conv(i)) for i in range(9)]
    sink = MemorySink()
    backend.run(iter(chats), sink, slots=3)

    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, attn_implementation="sdpa").eval()
    ends = set(backend.eos)
    lengths = set()
    for i, chat in enumerate(chats):
        assert sink.results[i] is chat, (chat.id, sink.results[i])
        got = [m["content"] for m in chat.messages if m["role"] == "assistant"]
        assert len(got) == 1 + i % 3
        assert got == greedy_answers(model, tok, chat.messages, MAX_NEW, ends), chat.id
        lengths.update(len(tok(g)["input_ids"]) for g in got)
    assert len(lengths) > 2  # answers ended at different lengths: slots were refilled mid-run
    later_turns = sum(i % 3 for i in range(9))
    reused = [(n, start) for n, start in fed if start > 0]
    # each later turn fed only what its slot did not hold: at least the record's first prompt is kept
    assert len(fed) == 9 + later_turns and len(reused) == later_turns, fed
    assert sink.answers == sum(1 + i % 3 for i in range(9))


def _mixed(i: int) -> list[dict[str, str]]:
    """Every fourth chat a long one-turn prompt (~90 tokens), the rest short, some of several turns."""
    if i % 4 == 0:
        return [{"role": "user", "content": f"question {i} " + " ".join(["words and more words"] * 20)},
                {"role": "assistant", "content": "old"}]
    return _conv(i)


def test_lanes_attend_narrower_than_the_longest_chat_and_answer_as_model_generate(target):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.regenerate.backends.hf import HFBackend
    from pipeline.regenerate.conversation import Chat

    backend = HFBackend(target, "cpu", "fp32", MAX_NEW, 0.0, 1.0)
    chats = [Chat.start(i, f"r{i}", _mixed(i)) for i in range(12)]
    sink = MemorySink()
    backend.run(iter(chats), sink, slots=6, lane_slots=2)  # three lanes of two slots

    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, attn_implementation="sdpa").eval()
    for i, chat in enumerate(chats):
        assert sink.results[i] is chat, (chat.id, sink.results[i])
        got = [m["content"] for m in chat.messages if m["role"] == "assistant"]
        assert got == greedy_answers(model, tok, chat.messages, MAX_NEW, set(backend.eos)), chat.id
    read = backend.step_stats
    # the long chats gather in one lane: the others read far fewer key columns than the longest needs
    assert read.columns < 0.75 * read.columns_one_width, read


def test_a_second_run_on_the_same_backend_keeps_its_decoder_and_answers_the_same(target):
    from pipeline.regenerate.backends.hf import HFBackend
    from pipeline.regenerate.conversation import Chat

    backend = HFBackend(target, "cpu", "fp32", MAX_NEW, 0.0, 1.0)
    runs = []
    for _ in range(2):
        chats = [Chat.start(i, f"r{i}", _mixed(i)) for i in range(8)]
        backend.run(iter(chats), MemorySink(), slots=4, lane_slots=2)
        runs.append(([[m["content"] for m in c.messages] for c in chats], backend.step_stats, backend._kept[1]))
    (first, stats1, dec1), (second, stats2, dec2) = runs
    assert dec2 is dec1  # kept: on CUDA its graphs are not captured again
    assert second == first  # nothing of the first run leaks into the second
    assert stats2.columns == stats1.columns and stats2 is not stats1  # each run counts its own steps
    backend.run(iter([Chat.start(0, "r0", _mixed(0))]), MemorySink(), slots=3)
    assert backend._kept[1] is not dec1  # other slots: a new decoder


def test_slots_that_would_not_fit_in_memory_stop_with_what_to_lower(target, monkeypatch):
    import torch

    from pipeline.regenerate.backends import kv_slots
    from pipeline.regenerate.backends.hf import HFBackend
    from pipeline.regenerate.conversation import Chat
    from pipeline.regenerate.errors import BadInput

    backend = HFBackend(target, "cpu", "fp32", MAX_NEW, 0.0, 1.0)
    monkeypatch.setattr(kv_slots, "free_bytes", lambda device: kv_slots.HEADROOM + 100_000)
    with pytest.raises(BadInput, match=r"^--batch-size 4: the slots' KV cache needs 198.1 KB more to hold 128 "
                                       r"positions a slot, and 1.1 GB beside it for the forward; 1.1 GB are free on "
                                       r"cpu; lower --batch-size, or bound the prompts with --max-prompt-tokens"):
        backend.run(iter([Chat.start(0, "r0", _conv(0))]), MemorySink(), slots=4)
    assert backend._kept is None

    bounded = HFBackend(target, "cpu", "fp32", MAX_NEW, 0.0, 1.0, max_prompt_tokens=40)
    monkeypatch.setattr(kv_slots, "free_bytes", lambda device: 1 << 40)
    bounded.run(iter([Chat.start(i, f"r{i}", _conv(i)) for i in range(4)]), MemorySink(), slots=4)
    assert bounded._kept[1].kv.capacity == 40 + MAX_NEW + 1  # the most a slot can need, not 256

    monkeypatch.setattr(kv_slots, "free_bytes", lambda device: kv_slots.HEADROOM + 100_000)
    kv = kv_slots.SlotKV(layers=2, slots=4, kv_heads=2, head_dim=8, capacity=32, dtype=torch.float32,
                         device=torch.device("cpu"))  # 33 kB: fits
    kv.k[0][:, :, :32] = 1.0
    with pytest.raises(kv_slots.CacheTooLarge, match="needs 4.2 MB more to hold 4,096 positions"):
        kv.grow(4096)  # the cache must grow mid-run past what is free
    assert kv.capacity == 32 and bool((kv.k[0][:, :, :32] == 1.0).all())  # what the slots hold is untouched
    monkeypatch.setattr(kv_slots, "free_bytes", lambda device: kv_slots.HEADROOM + 10_000_000)
    kv.grow(4096)
    assert kv.capacity == 4096 and bool((kv.k[0][:, :, :32] == 1.0).all())


def test_a_new_chat_takes_the_narrowest_lane_already_wide_enough_else_the_widest():
    from pipeline.regenerate.backends.lanes import FreeSlots, covering, layout

    lanes = layout(1024)
    assert [(r.start, r.stop) for r in lanes] == [(0, 256), (256, 512), (512, 768), (768, 1024)]
    assert [len(r) for r in layout(300)] == [128, 128, 44] and len(layout(64)) == 1
    free = FreeSlots(layout(8, lane_slots=2))
    bounds = [0, 0, 0, 0]
    first = [free.take(need, bounds) for need in sorted([300, 300, 300, 2000, 300, 1900])]
    assert first == [0, 1, 2, 3, 4, 5] and bounds == [300, 300, 2000, 0]  # shortest first, in lane order
    free.give(1)
    free.give(4)
    assert free.take(1800, bounds) == 4  # the lane already 2,000 wide, not the 300-wide one
    assert free.take(250, bounds) == 1  # the 300-wide lane, not the empty one
    assert free.take(2100, bounds) == 6 and bounds[3] == 2100  # none is wide enough and only the empty lane is open
    assert len(free) == 1
    sizes = [2, 2, 2, 2]
    have = [(512, 512, 2048, 256), (1024, 512, 2048, 512), (2048, 2048, 2048, 2048)]
    assert covering((256, 512, 1024, 256), have, sizes) == (512, 512, 2048, 256)
    assert covering((1024, 256, 256, 256), have, sizes) == (1024, 512, 2048, 512)
    assert covering((4096, 256, 256, 256), have, sizes) is None


def test_seeded_draws_follow_the_softmax_and_do_not_depend_on_batch_mates():
    import torch

    from pipeline.regenerate.backends.sampler import Sampler

    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0, 1.5, 0.2])
    sampler = Sampler(len(logits), torch.device("cpu"), temperature=0.8, top_p=1.0)
    n = 20000
    seeds = torch.arange(n, dtype=torch.int64) * 7919 + 12345
    draws = sampler(logits.expand(n, -1), seeds, torch.full((n,), 3, dtype=torch.int64))
    freq = torch.bincount(draws, minlength=len(logits)).double() / n
    want = torch.softmax(logits.double() / 0.8, dim=-1)
    assert (freq - want).abs().max() < 0.015, (freq, want)
    alone = [int(sampler(logits[None], seeds[i:i + 1], torch.tensor([3]))) for i in range(0, 200, 7)]
    assert alone == draws[0:200:7].tolist()
    other = sampler(logits.expand(n, -1), seeds, torch.full((n,), 4, dtype=torch.int64))
    assert (other != draws).float().mean() > 0.3  # the next token index draws afresh
    nucleus = Sampler(len(logits), torch.device("cpu"), temperature=1.0, top_p=0.5)
    kept = set(nucleus(logits.expand(n, -1), seeds, torch.zeros(n, dtype=torch.int64)).tolist())
    assert kept == {0, 6}  # the smallest set of probability >= 0.5: 2.0 and 1.5


def _regen(model: Path, src: Path, out: Path, *more: str, events: Path | None = None) -> StageResult:
    return call_stage("regenerate", [src, "--out", out, "--backend", "hf", "--model", model, "--max-new-tokens",
                                     MAX_NEW, *more], env={"EAGLE3_EVENTS": str(events)} if events else None)


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "conversations": _conv(i)}) + "\n" for i in range(4)))
    return path


def test_samples_per_prompt_writes_each_sample_as_its_own_record_and_resume_completes_them(tmp_path, target, source):
    a = _regen(target, source, tmp_path / "a.jsonl", "--temperature", "1.0", "--samples-per-prompt", "3")
    assert a.returncode == 0, a.stderr
    recs = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [r["id"] for r in recs] == [f"r{i}#s{k}" for i in range(4) for k in range(3)]
    answers = {r["id"]: [m["content"] for m in r["conversations"] if m["role"] == "assistant"] for r in recs}
    for i in range(4):
        assert len({json.dumps(answers[f"r{i}#s{k}"]) for k in range(3)}) > 1, answers  # samples differ
    stats = regenerate_stats.read_stats(tmp_path / "a.stats.json")
    assert stats.wanted == 12 and stats.records_out == 12
    b = _regen(target, source, tmp_path / "b.jsonl", "--temperature", "1.0", "--samples-per-prompt", "3",
               "--limit", "2", "--batch-size", "2")
    assert b.returncode == 0, b.stderr
    b = _regen(target, source, tmp_path / "b.jsonl", "--temperature", "1.0", "--samples-per-prompt", "3")
    assert b.returncode == 0, b.stderr
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()
    c = _regen(target, source, tmp_path / "b.jsonl", "--temperature", "1.0", "--samples-per-prompt", "2")
    assert c.returncode == 2 and "samples_per_prompt: 3 then, 2 now" in c.stderr, c.stderr
    g = _regen(target, source, tmp_path / "g.jsonl", "--temperature", "0", "--samples-per-prompt", "2")
    assert g.returncode == 2 and "needs --temperature above 0" in g.stderr, g.stderr
    assert not (tmp_path / "g.jsonl").exists()
    e = call_stage("regenerate", ["--estimate", source, "--samples-per-prompt", "3", "--max-new-tokens", MAX_NEW,
                                  "--json"])
    assert e.returncode == 0, e.stderr
    figures = parse_estimate(e.stdout, "pipeline.regenerate --estimate --json")  # the console's free-space check sizes every sample
    assert figures.records == 12 and figures.answers == 3 * (1 + 2 + 3 + 1)
    assert figures.bytes >= (tmp_path / "a.jsonl").stat().st_size


def test_progress_reports_the_first_answered_turn_before_any_record_is_done(tmp_path, target):
    from pipeline.events import iter_events

    source = tmp_path / "chats.jsonl"  # r1 first: two turns, then r2 with three, r3 with one, r4 with two
    source.write_text("".join(json.dumps({"id": f"r{i}", "conversations": _conv(i)}) + "\n" for i in range(1, 5)))
    events = tmp_path / "events.jsonl"
    p = _regen(target, source, tmp_path / "out.jsonl", "--temperature", "0", "--batch-size", "1", events=events)
    assert p.returncode == 0, p.stderr
    progress = [e for e in iter_events(events) if e.kind == "progress"]
    first_done = next(k for k, e in enumerate(progress) if e.get("done", 0) >= 1)
    early = [e for e in progress[:first_done] if e.get("answers", 0) >= 1]
    assert early, [e.data for e in progress]  # r0's first turn was reported while r0 still had a turn to go
    assert early[0].get("generated", 0) >= 1 and early[0].get("total") == 4
    assert progress[-1].get("answers") == 2 + 3 + 1 + 2 and progress[-1].get("done") == 4
    assert os.path.getsize(tmp_path / "out.jsonl") > 0
