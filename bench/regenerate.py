"""Generated tokens per second of regenerate's hf backend (slots refilled per record, a KV
cache behind the attention interface, CUDA graphs) against a plain batched `model.generate`
on the same prompts: the first user turn of each record, rendered with the target's chat
template. Under greedy decoding it also counts how many answers the two agree on (bf16
batches round differently, so a few may part ways after a near-tie).

    .venv/bin/python bench/regenerate.py --model TARGET_DIR --prompts SHAREGPT.json --device cuda
        [--limit 1024] [--batch-size 256] [--max-new-tokens 512] [--temperature 0]
        [--baseline-limit N] [--no-graphs] [--multi-turn N] [--max-prompt-tokens N] [--profile FILE]
        [--synthesize N [--max-question-tokens 256]] --result FILE
    .venv/bin/python bench/regenerate.py --small --result FILE   # a tiny random target on the CPU

--prompts reads what regenerate and merge read (ShareGPT, OpenAI messages, our chat JSONL, a
merged dataset). --baseline-limit runs the baseline on the first N of the same prompts only
(it is the slow one), and the ratio compares rates. --multi-turn N also times the fast
backend on the first N whole chats, every user turn answered in order, the way regenerate
runs; there is no baseline for it. --synthesize N also times `regenerate --synthesize`'s work
on the same slots: N records whose questions the target writes (at temperature 1, bounded by
--max-question-tokens) and then answers as above, compared with the first turns' rate (the
questions are filtered as the stage filters them, but no duplicate is dropped). --batch-size takes several values: the first is the
baseline's batch, and the fast backend is timed at each. --profile FILE writes torch.profiler's
table of one more fast run (the device kernels by time), to see where a step goes. Each
timed run of the fast backend follows an untimed one on the same prompts and slots, which
captures the CUDA graphs the timed run replays (the backend keeps its decoder between runs);
each prints the graphs it still captured, and the split of its wall between waiting on the
device, launching prefills and the host's own work. This prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.chat.sources import DEFAULT_ROLE_MAP, SourcePolicy  # noqa: E402
from pipeline.regenerate import sources  # noqa: E402
from pipeline.regenerate.conversation import Chat  # noqa: E402
from pipeline.regenerate.sink import MemorySink  # noqa: E402


def small_target(folder: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.demo.tokenizer import build_tokenizer

    tok = build_tokenizer([f"question {i} about topic {i % 17} with words {i * 3}" for i in range(400)], vocab_size=400)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def small_chats(n: int) -> list[tuple[str, list[dict[str, str]]]]:
    out = []
    for i in range(n):
        conv = [{"role": "user", "content": f"question {i} about topic {i % 17} " + "with words " * (i % 9)},
                {"role": "assistant", "content": "old"}]
        if i % 2:
            conv += [{"role": "user", "content": f"and {i * 3}?"}, {"role": "assistant", "content": "old"}]
        out.append((f"s{i}", conv))
    return out


def read_chats(path: Path, n: int) -> list[tuple[str, list[dict[str, str]]]]:
    pol = SourcePolicy(strict=False, max_invalid=1.0, role_map=dict(DEFAULT_ROLE_MAP), on_assistant_first="drop")
    out = []
    for rec in sources.records((path,), pol):
        out.append((rec.id, rec.conversations))
        if len(out) >= n:
            break
    return out


def first_turn(conv: list[dict[str, str]]) -> list[dict[str, str]]:
    k = next(i for i, m in enumerate(conv) if m["role"] == "user")
    return [m for m in conv[: k + 1] if m["role"] != "assistant"]


def run_fast(backend, chats: list[tuple[str, list[dict[str, str]]]], slots: int, graphs: bool):
    import torch

    work = [Chat.start(i, rid, conv) for i, (rid, conv) in enumerate(chats)]
    sink = MemorySink()
    t0 = time.perf_counter()
    backend.run(iter(work), sink, slots=slots, graphs=graphs)
    if backend.device.type == "cuda":
        torch.cuda.synchronize()
    took = time.perf_counter() - t0
    answers = {rid: [m["content"] for m in c.messages if m["role"] == "assistant"]
               for (rid, _), c in zip(chats, sink.results) if isinstance(c, Chat)}
    failed = sum(1 for r in sink.results if not isinstance(r, Chat))
    return sum(c.tokens for c in work), took, answers, failed


def run_synth(model_dir, a, device: str, dtype: str, max_new: int, slots: int, graphs: bool):
    """(records answered, question tokens, all tokens generated, seconds) of a synthesis of
    --synthesize records, after an untimed run that captures the graphs."""
    import torch

    from pipeline.regenerate.synthesis.backend import SynthBackend
    from pipeline.regenerate.synthesis.chat import Questions, SynthChat
    from pipeline.regenerate.synthesis.dedup import Seen

    backend = SynthBackend(model_dir, device, dtype, max(max_new, a.max_question_tokens), a.temperature, 1.0,
                           a.max_prompt_tokens, False, (), seed=a.seed)
    for timed in (False, True):
        judge = Questions(backend.controls, 8, a.max_question_tokens, 1.0, Seen(0))
        work = [SynthChat.start(i, i, a.seed, (), 1, max_new, judge) for i in range(a.synthesize)]
        t0 = time.perf_counter()
        backend.run(iter(work), MemorySink(), slots=slots, graphs=graphs)
        if backend.device.type == "cuda":
            torch.cuda.synchronize()
    took = time.perf_counter() - t0
    return sum(c.answered for c in work), sum(c.question_tokens for c in work), sum(c.tokens for c in work), took


def steps_kind(backend) -> str:
    """How the last run's decode steps ran: graphs can fall back to eager steps with a warning."""
    return "CUDA graphs" if backend.graphs_used else "eager steps"


def lanes_line(backend, took: float) -> str:
    """What the lanes saved in the last run, what capturing their graphs cost, and where the
    host's time went: blocked on the device at its looks, launching prefills, or its own work."""
    s = backend.step_stats
    own = took - s.waited_s - s.prefill_s - s.capture_s
    return (f"  decode attention read {s.columns / max(s.columns_one_width, 1):.0%} of the key columns one width "
            f"for every slot would; {s.graphs} graphs captured in {s.capture_s:.1f} s (inside the time above)\n"
            f"  of the {took:.2f} s the host waited on the device {s.waited_s:.2f} s, launched prefills "
            f"{s.prefill_s:.2f} s, captured graphs {s.capture_s:.2f} s, and worked {own:.2f} s on its own "
            "(scheduling, tokenizing, detokenizing, launching decode steps; on a CPU, running them)")


def profile(backend, chats, slots: int, graphs: bool, out: Path) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if backend.device.type == "cuda" else [])
    with torch_profile(activities=acts) as prof:
        run_fast(backend, chats, slots, graphs)
    key = "cuda_time_total" if backend.device.type == "cuda" else "cpu_time_total"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(prof.key_averages().table(sort_by=key, row_limit=40) + "\n")


def run_baseline(model, tok, prompts: list[list[int]], batch: int, max_new: int, temperature: float, eos: set[int]):
    import torch

    pad = tok.pad_token_id if tok.pad_token_id is not None else min(eos)
    tokens, texts = 0, []
    t0 = time.perf_counter()
    for s in range(0, len(prompts), batch):
        group = prompts[s: s + batch]
        width = max(len(p) for p in group)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in group], device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group], device=model.device)
        sample = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, pad_token_id=pad,
                                 eos_token_id=sorted(eos), **sample)
        for row in out[:, width:].tolist():
            n = next((k + 1 for k, t in enumerate(row) if t in eos), len(row))
            tokens += n
            texts.append(tok.decode(row[: n - 1] if row[n - 1] in eos else row[:n], skip_special_tokens=True))
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return tokens, time.perf_counter() - t0, texts


def header(argv: list[str], given: str | None) -> list[str]:
    import torch
    import transformers

    try:
        commit = given or subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                         timeout=10).stdout.strip() or "unknown (no .git here; pass --commit)"
    except OSError:
        commit = "unknown (no git here; pass --commit)"
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return [f"command: {shlex.join([sys.executable, 'bench/regenerate.py', *argv])}", f"commit: {commit}",
            f"torch {torch.__version__}, transformers {transformers.__version__}, {device}"]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="the target's save_pretrained folder (safetensors, chat template)")
    p.add_argument("--small", action="store_true", help="a tiny random target and synthetic chats, for the CPU")
    p.add_argument("--prompts", type=Path, help="chat records (ShareGPT, messages, chat JSONL, merged JSONL)")
    p.add_argument("--limit", type=int, default=None, help="prompts timed (default 1024, 48 with --small)")
    p.add_argument("--baseline-limit", type=int, default=None, help="of them, the first N for the baseline")
    p.add_argument("--batch-size", type=int, nargs="+", default=None,
                   help="slots, and the baseline's batch; more values time the fast backend at each (default 256, 16)")
    p.add_argument("--max-prompt-tokens", type=int, help="regenerate's bound on a prompt (default: the target's "
                   "positions less --max-new-tokens); every slot attends as wide as the longest one")
    p.add_argument("--profile", type=Path, help="write a torch.profiler table of one fast run here")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 512, 24 with --small")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--device", default=None, help="default cuda when there is one")
    p.add_argument("--dtype", default=None, choices=["bf16", "fp16", "fp32"], help="default bf16 on cuda")
    p.add_argument("--no-graphs", action="store_true", help="decode without CUDA graphs")
    p.add_argument("--multi-turn", type=int, default=0, metavar="N", help="also time N whole chats, every turn")
    p.add_argument("--synthesize", type=int, default=0, metavar="N", help="also time the synthesis of N records")
    p.add_argument("--max-question-tokens", type=int, default=256, help="synthesis: longest question (default 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--commit", help="the commit named at the top, where the tree has no .git")
    p.add_argument("--result", type=Path, required=True, help="write the figures here too")
    a = p.parse_args(argv)
    if not a.small and (a.model is None or a.prompts is None):
        p.error("give --model and --prompts, or --small")
    return a


def main(argv: list[str] | None = None) -> int:
    import torch

    from pipeline.regenerate.backends.hf import HFBackend
    from pipeline.regenerate.errors import Failure
    from pipeline.target.model import load_target

    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse(argv)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = a.dtype or ("fp32" if device == "cpu" else "bf16")
    limit = a.limit or (48 if a.small else 1024)
    batches = a.batch_size or [16 if a.small else 256]
    batch = batches[0]
    max_new = a.max_new_tokens or (24 if a.small else 512)
    lines = header(argv, a.commit)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = small_target(Path(tmp) / "small") if a.small else a.model
        chats = small_chats(limit) if a.small else read_chats(a.prompts, limit)
        t0 = time.perf_counter()
        fast = HFBackend(model_dir, device, dtype, max_new, a.temperature, 1.0, a.max_prompt_tokens, seed=a.seed)
        base = load_target(Path(model_dir), device, getattr(torch, {"bf16": "bfloat16", "fp16": "float16",
                                                                   "fp32": "float32"}[dtype]))
        lines.append(f"target {model_dir} ({sum(p.numel() for p in base.parameters()) / 1e6:.1f}M parameters, "
                     f"{dtype}) loaded twice in {time.perf_counter() - t0:.1f} s")
        singles, prompts = [], []
        for rid, conv in chats:
            try:
                prompts.append(fast.prompt_ids(first_turn(conv)))
                singles.append((rid, first_turn(conv)))
            except Failure:
                pass
        nbase = min(a.baseline_limit or len(prompts), len(prompts))
        lines.append(f"{len(prompts)} prompts (first user turns; {len(chats) - len(prompts)} past the bounds "
                     f"skipped), mean {sum(map(len, prompts)) / max(len(prompts), 1):.0f} tokens; "
                     f"max_new_tokens {max_new}, max prompt tokens {a.max_prompt_tokens or 'the target bound'}, "
                     f"temperature {a.temperature:g}, batch {batch}; baseline on {nbase}")
        graphs = not a.no_graphs
        run_fast(fast, singles, batch, graphs)  # warm-up: the graphs the timed run replays, captured
        run_baseline(base, fast.tok, prompts[:min(batch, nbase)], batch, 8, a.temperature, fast.eos)  # warm-up
        ftok, fsec, fans, ffail = run_fast(fast, singles, batch, graphs)
        btok, bsec, btexts = run_baseline(base, fast.tok, prompts[:nbase], batch, max_new, a.temperature, fast.eos)
        frate, brate = ftok / fsec, btok / bsec
        lines.append(f"fast hf backend ({steps_kind(fast)}): "
                     f"{ftok} tokens in {fsec:.2f} s = {frate:,.0f} generated tokens/s ({ffail} failed)")
        lines.append(lanes_line(fast, fsec))
        lines.append(f"plain batched model.generate: {btok} tokens in {bsec:.2f} s = {brate:,.0f} generated tokens/s")
        lines.append(f"ratio fast / generate: {frate / brate:.1f}x")
        if a.temperature == 0:
            same = sum(1 for (rid, _), t in zip(singles[:nbase], btexts) if fans.get(rid, [None])[0] == t)
            lines.append(f"greedy answers identical to model.generate's: {same} of {nbase}")
        for more in batches[1:]:
            run_fast(fast, singles, more, graphs)  # warm-up: this batch's graphs
            mtok, msec, _, mfail = run_fast(fast, singles, more, graphs)
            lines.append(f"fast hf backend at batch {more} ({steps_kind(fast)}): {mtok} tokens in {msec:.2f} s = "
                         f"{mtok / msec:,.0f} generated tokens/s ({mfail} failed)")
            lines.append(lanes_line(fast, msec))
        if a.profile:
            profile(fast, singles[:batch], batch, graphs, a.profile)
            lines.append(f"profile of one fast run of {min(batch, len(singles))} prompts: {a.profile}")
        if a.multi_turn:
            mtok, msec, mans, mfail = run_fast(fast, chats[: a.multi_turn], batch, graphs)
            turns = sum(len(v) for v in mans.values())
            lines.append(f"fast hf backend, whole chats: {len(chats[: a.multi_turn])} records, {turns} answers, "
                         f"{mtok} tokens in {msec:.2f} s = {mtok / msec:,.0f} generated tokens/s ({mfail} failed)")
            lines.append(lanes_line(fast, msec))
        if a.synthesize:
            del fast  # its slot cache (48 GB at 1,024 slots of 2,049 positions) goes before synthesis makes its own
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            kept, qtok, stok, ssec = run_synth(model_dir, a, device, dtype, max_new, batch, graphs)
            lines.append(f"synthesis: {a.synthesize} records asked, {kept} answered; {qtok} question and "
                         f"{stok - qtok} answer tokens in {ssec:.2f} s = {stok / ssec:,.0f} generated tokens/s; "
                         f"ratio synthesis / first turns above: {stok / ssec / frate:.2f}x")
    text = "\n".join(lines) + "\n"
    print(text, end="", flush=True)
    a.result.parent.mkdir(parents=True, exist_ok=True)
    a.result.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
