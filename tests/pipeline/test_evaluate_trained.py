"""The whole drafter path on a target with something to learn: extract -> train -> export ->
evaluate. The untrained baseline accepts about nothing; the trained one clearly more, and
the same with the target's KV cache as with full forwards.

The target is a tiny Llama taught to count (token t is followed by t+1, modulo the
vocabulary) in a few seconds, so its greedy continuation is predictable and a drafter can
learn it quickly. Acceptance goes up only if every seam is right: the captured layers and
the next-token pairing in the store, training, the exported names and vocabulary map, and
evaluate's chain drafting with the KV cache.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from stage_call import call_stage

from pipeline.evaluate.__main__ import main as evaluate
from pipeline.export import __main__ as export
from pipeline.records.evaluate_report import read_report

VOCAB = 48
SEQ = 32


def counting_from(start: int, n: int) -> list[int]:
    return [(start + i) % VOCAB for i in range(n)]


def teach_counting(path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=8,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      eos_token_id=VOCAB + 1)  # never generated: every answer runs to --max-new-tokens
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(80):
        starts = torch.randint(0, VOCAB, (8,), generator=g).tolist()
        batch = torch.tensor([counting_from(s, SEQ) for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert loss.item() < 0.1, f"the tiny target did not learn to count (loss {loss.item():.3f})"
    model.save_pretrained(path)


@pytest.fixture(scope="module")
def counting(tmp_path_factory) -> dict:
    """The counting target, its extracted store, and a drafter trained and exported for it."""
    tmp_path = tmp_path_factory.mktemp("counting")
    torch.set_num_threads(1)
    target = tmp_path / "target"
    teach_counting(target)
    data = tmp_path / "train.jsonl"
    with open(data, "w") as f:
        for i in range(16):
            ids = counting_from(i * 2, SEQ)
            f.write(json.dumps({"id": f"c{i}", "input_ids": ids, "loss_mask": [0] * 4 + [1] * (SEQ - 4)}) + "\n")
    store = tmp_path / "store"
    r = call_stage("extract", ["--backend", "hf", "--model", target, "--data", data, "--out", store, "--reserve", "0",
                               "--device", "cpu", "--writers", "1"])
    assert r.returncode == 0, r.stderr

    from pipeline.train.loop import Options, run

    def train(out: Path, steps: int, lr: float, init_head: str) -> Path:
        run(Options(store=store, target=target, out=out, steps=steps, batch_size=8, max_len=SEQ, lr=lr,
                    ttt_length=3, draft_vocab=VOCAB, log_every=steps, save_every=steps, workers=0,
                    warmup_ratio=0.1, checksums="none", init_head=init_head), log=lambda _s: None)
        return out

    prompts = tmp_path / "prompts.jsonl"
    with open(prompts, "w") as f:
        for s in (1, 23, 40):  # prompts are the answer's first tokens, so exclusion would drop them all
            f.write(json.dumps({"id": f"p{s}", "input_ids": counting_from(s, 6) + [0], "loss_mask": [0] * 6 + [1]}) + "\n")

    drafter = tmp_path / "drafter"
    run_dir = train(tmp_path / "run", 40, 1e-2, "target")
    assert export.main(["--checkpoint", str(run_dir), "--target", str(target), "--out", str(drafter)]) == 0
    return {"target": target, "drafter": drafter, "prompts": prompts}


def test_a_trained_drafter_accepts_clearly_more_than_an_untrained_one_with_or_without_the_cache(counting, tmp_path,
                                                                                                capsys):
    torch.set_num_threads(1)
    target, drafter, prompts = counting["target"], counting["drafter"], counting["prompts"]
    report = tmp_path / "report.json"
    assert evaluate(["--drafter", str(drafter), "--target", str(target), "--prompts", str(prompts), "--baseline",
                     "--num-steps", "3", "--max-new-tokens", "16", "--device", "cpu",
                     "--report", str(report)]) == 0, capsys.readouterr().err
    trained = read_report(report)
    untrained = trained.baseline
    print(f"acceptance length at 3 draft steps: untrained {untrained.acceptance_length}, "
          f"trained {trained.acceptance_length} (accept rate {trained.accept_rate})")
    assert f"trained {trained.acceptance_length:.3f} vs untrained {untrained.acceptance_length:.3f}" \
        in capsys.readouterr().out
    assert untrained.acceptance_length < 1.2
    assert trained.acceptance_length > 2.5
    assert trained.speedup_forwards > 2.0

    full = tmp_path / "full.json"
    assert evaluate(["--drafter", str(drafter), "--target", str(target), "--prompts", str(prompts), "--no-kv-cache",
                     "--num-steps", "3", "--max-new-tokens", "16", "--device", "cpu", "--report", str(full)]) == 0
    full = read_report(full)
    for key in ("acceptance_length", "accept_rate", "target_forwards", "tokens"):
        assert getattr(full, key) == getattr(trained, key), key
    assert full.per_prompt == tuple(replace(p, baseline_acceptance_length=None) for p in trained.per_prompt)


def chain_figures(report) -> dict:
    return {k: getattr(report, k) for k in ("acceptance_length", "accept_rate", "target_forwards", "tokens", "verify_rounds")}


def test_batched_swept_and_tree_evaluations_keep_the_chain_figures_with_a_drafter_that_accepts(counting, tmp_path,
                                                                                                capsys):
    """--batch decodes the prompts in lockstep, --configs N,1,N+1 is --num-steps N, a kept
    greedy reference changes nothing: the same figures, for a drafter that accepts most drafts."""
    torch.set_num_threads(1)
    common = ["--drafter", str(counting["drafter"]), "--target", str(counting["target"]), "--prompts",
              str(counting["prompts"]), "--max-new-tokens", "16", "--device", "cpu"]
    refs = ["--references", str(tmp_path / "refs")]
    runs = {}
    for name, more in [("one", ["--num-steps", "3", "--batch", "1"]), ("batch", ["--num-steps", "3", "--batch", "3"]),
                       ("sweep", ["--configs", "3,1,4", "3,2,6", "--batch", "2", *refs]),
                       ("kept", ["--configs", "3,1,4", "3,2,6", "--batch", "2", *refs])]:
        out = tmp_path / f"{name}.json"
        assert evaluate([*common, *more, "--report", str(out)]) == 0, capsys.readouterr().err
        runs[name] = read_report(out)
    assert runs["one"].acceptance_length > 2.5
    assert runs["batch"].batch == 3 and runs["batch"].redecoded_one_by_one == 0
    for name in ("batch", "sweep", "kept"):
        assert chain_figures(runs[name]) == chain_figures(runs["one"]), name
        assert runs[name].per_prompt == runs["one"].per_prompt, name
    assert runs["sweep"].batch == 1  # a tree in the sweep: one prompt at a time
    assert runs["kept"].greedy_references_kept == 3 and runs["sweep"].greedy_references_kept == 0
    chain, tree = runs["kept"].settings
    assert chain_figures(chain) == chain_figures(runs["one"])
    assert tree.setting == "3,2,6" and tree.acceptance_length > 2.5
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("--speculative-algorithm EAGLE3 --speculative-num-steps 3")
