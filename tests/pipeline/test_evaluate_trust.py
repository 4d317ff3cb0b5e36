"""pipeline.evaluate's figures can be trusted: the KV cache changes nothing but the cost, the
untrained baseline is scored beside the drafter, a drafter that changed under the run or
is damaged is refused, progress is reported per prompt, and a stop stops."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pipeline.evaluate.__main__ import main
from pipeline.evaluate.speculative import greedy, speculate
from pipeline.evaluate.verifier import Target
from pipeline.events import iter_events
from pipeline.records.evaluate_report import FileFingerprint, read_report

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_evaluate import VOCAB

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(evaluation_tiny) -> dict:
    return evaluation_tiny


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _args(tiny, *extra: str) -> list[str]:
    return ["--target", str(tiny["target"]), "--prompts", str(tiny["prompts"]), "--num-steps", "3",
            "--max-new-tokens", "16", "--device", "cpu", *extra]


class Patterned:
    """Proposes the target's greedy continuation with the first `pattern[r]` drafts of round r
    right and the rest wrong, so every length of rejection (and a full acceptance) happens."""

    def __init__(self, prompt: list[int], reference: list[int], pattern: list[int]) -> None:
        self.prompt, self.ref, self.pattern, self.round = prompt, reference, pattern, 0

    def reset(self) -> None:
        self.round = 0

    def propose(self, seq, aux, k):
        done = len(seq) - len(self.prompt)
        want = (self.ref + [0] * (k + 1))[done:done + k]
        right = self.pattern[self.round % len(self.pattern)]
        self.round += 1
        return [t if j < right else (t + 1) % VOCAB for j, t in enumerate(want)]


def test_the_kv_cache_gives_the_same_output_and_acceptance_as_full_forwards_for_fewer_positions(tiny):
    cached = Target(tiny["target"], "cpu", torch.float32)
    full = Target(tiny["target"], "cpu", torch.float32, kv_cache=False)
    prompt = [5, 9, 17, 33, 2, 64, 11]
    ref_full = greedy(full, prompt, 24)
    ref_cached = greedy(cached, prompt, 24)
    assert ref_cached.tokens == ref_full.tokens
    k = 4
    for target in (cached, full):
        target.positions_run = 0
    results = {}
    for name, target in (("cached", cached), ("full", full)):
        results[name] = speculate(target, Patterned(prompt, ref_full.tokens, [2, 0, 4, 1, 3]), prompt, 24, k)
    assert results["cached"].tokens == results["full"].tokens == ref_full.tokens
    assert results["cached"].accepted == results["full"].accepted
    assert set(results["cached"].accepted) >= {0, 1, 2}  # rejections of several lengths were cut back
    print(f"positions computed by the target: {cached.positions_run} cached, {full.positions_run} full")
    assert cached.positions_run * 3 < full.positions_run


def test_the_cached_target_hands_the_drafter_the_same_states_as_a_full_forward(tiny):
    cached = Target(tiny["target"], "cpu", torch.float32)
    full = Target(tiny["target"], "cpu", torch.float32, kv_cache=False)
    seq = [5, 9, 17, 33, 2, 64, 11, 40, 41, 42]
    cached.step(seq[:6], keep=1)
    cached.step(seq[:6] + [99, 98, 97], keep=4)  # three drafts, all rejected
    got = cached.step(seq, keep=5)  # cut back to seq[:6], then the accepted continuation
    want = full.step(seq, keep=5)
    assert torch.equal(got.next_ids, want.next_ids)
    torch.testing.assert_close(got.aux, want.aux, atol=1e-5, rtol=1e-5)


def test_a_real_drafter_scores_the_same_with_and_without_the_cache(tiny, tmp_path, capsys):
    reports = {}
    for name, extra in (("cached", []), ("full", ["--no-kv-cache"])):
        out = tmp_path / f"{name}.json"
        assert main(_args(tiny, "--drafter", str(tiny["drafter"]), "--report", str(out), *extra)) == 0, \
            capsys.readouterr().err
        reports[name] = read_report(out)
    c, f = reports["cached"], reports["full"]
    assert c.kv_cache is True and f.kv_cache is False
    for key in ("acceptance_length", "accept_rate", "tokens", "target_forwards", "verify_rounds"):
        assert getattr(c, key) == getattr(f, key), key
    assert [p.acceptance_length for p in c.per_prompt] == [p.acceptance_length for p in f.per_prompt]
    assert c.target_positions_run * 3 < f.target_positions_run


def test_baseline_scores_the_untrained_drafter_beside_the_given_one(tiny, tmp_path, monkeypatch, capsys):
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(events))
    out = tmp_path / "r.json"
    assert main(_args(tiny, "--drafter", str(tiny["drafter"]), "--baseline", "--report", str(out))) == 0
    said = capsys.readouterr().out
    r = read_report(out)
    b = r.baseline
    assert b.drafter.startswith("untrained")
    assert b.prompts == r.prompts == 4 and b.tokens == r.tokens
    assert 1.0 <= b.acceptance_length < 1.1 and len(b.accept_rate) == 3
    assert f"vs untrained {b.acceptance_length:.3f}" in said
    assert all(p.baseline_acceptance_length is not None for p in r.per_prompt)
    names = {e.get("name") for e in iter_events(events) if e.kind == "metric"}
    assert {"acceptance_length", "baseline_acceptance_length", "baseline_accept_rate_3"} <= names


def test_baseline_without_a_drafter_is_built_from_the_target_and_is_the_same_every_time(tiny, tmp_path, capsys):
    got = []
    for i in range(2):
        out = tmp_path / f"b{i}.json"
        assert main(_args(tiny, "--baseline", "--report", str(out))) == 0, capsys.readouterr().err
        got.append(read_report(out))
    assert got[0].drafter.startswith("untrained") and got[0].baseline is None
    assert 1.0 <= got[0].acceptance_length < 1.1
    assert got[0].per_prompt == got[1].per_prompt


def test_evaluate_without_drafter_or_baseline_says_what_to_pass(tiny, capsys):
    assert main(_args(tiny)) == 2
    assert "--drafter, --baseline or both" in capsys.readouterr().err


def test_a_drafter_replaced_by_a_new_export_mid_evaluation_is_not_reported(tiny, tmp_path, monkeypatch, capsys):
    from test_export import make_checkpoint, make_drafter

    from pipeline.evaluate import speculative, sweep  # sweep decodes the greedy reference
    from pipeline.export import __main__ as export

    drafter = tmp_path / "drafter"
    shutil.copytree(tiny["drafter"], drafter)
    newer = tmp_path / "newer"
    run = make_checkpoint(tmp_path / "run", make_drafter(tiny["target"], seed=4))
    assert export.main(["--checkpoint", str(run), "--target", str(tiny["target"]), "--out", str(newer)]) == 0
    real = speculative.greedy
    swapped = []

    def export_lands(target, prompt, max_new):
        if not swapped:  # as export's rename would: the old folder goes, the new one takes its name
            drafter.rename(tmp_path / "old")
            newer.rename(drafter)
            swapped.append(True)
        return real(target, prompt, max_new)

    monkeypatch.setattr(sweep, "greedy", export_lands)
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(events))
    report = tmp_path / "r.json"
    assert main(_args(tiny, "--drafter", str(drafter), "--report", str(report))) == 2
    err = capsys.readouterr().err
    assert "changed while it was evaluated" in err and "model.safetensors changed" in err and "rerun" in err
    assert not report.exists()
    assert not [e for e in iter_events(events) if e.kind == "metric"]


def test_the_report_names_the_files_it_scored(tiny, tmp_path, capsys):
    import hashlib

    out = tmp_path / "r.json"
    assert main(_args(tiny, "--drafter", str(tiny["drafter"]), "--limit", "1", "--report", str(out))) == 0
    files = read_report(out).drafter_files
    weights = (tiny["drafter"] / "model.safetensors").read_bytes()
    assert files["model.safetensors"] == FileFingerprint(bytes=len(weights), sha256=hashlib.sha256(weights).hexdigest())


def test_a_drafter_with_nan_weights_is_refused(tiny, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "drafter"
    shutil.copytree(tiny["drafter"], bad)
    state = load_file(str(bad / "model.safetensors"))
    state["lm_head.weight"].view(-1)[:64] = float("nan")
    save_file(state, str(bad / "model.safetensors"))
    report = tmp_path / "r.json"
    assert main(_args(tiny, "--drafter", str(bad), "--report", str(report))) == 2
    err = capsys.readouterr().err
    assert "lm_head.weight holds 64 NaN/Inf values" in err and "export it again" in err and "Traceback" not in err
    assert not report.exists()


def test_a_truncated_drafter_exits_2_naming_the_file(tiny, tmp_path, capsys):
    bad = tmp_path / "drafter"
    shutil.copytree(tiny["drafter"], bad)
    weights = bad / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(size * 2 // 3)
    assert main(_args(tiny, "--drafter", str(bad))) == 2
    err = capsys.readouterr().err
    assert f"{weights}: cannot be read" in err and "truncated or damaged" in err and "Traceback" not in err


def test_progress_counts_prompts_from_zero_once_the_models_are_loaded(tiny, tmp_path, monkeypatch):
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(events))
    assert main(_args(tiny, "--drafter", str(tiny["drafter"]))) == 0
    seen = [e for e in iter_events(events) if e.kind in ("progress", "message")]
    loaded = next(i for i, e in enumerate(seen) if e.kind == "message" and "held-out prompts" in e.get("text"))
    progress = [(e.get("done"), e.get("total"), e.get("unit")) for e in seen[loaded:] if e.kind == "progress"]
    assert progress == [(i, 4, "prompts") for i in range(5)]
    assert not [e for e in seen[:loaded] if e.kind == "progress"]


def test_sigterm_inside_a_prompt_stops_at_once_and_says_what_was_scored(tiny, tmp_path, monkeypatch, capsys):
    from pipeline.evaluate import speculative, sweep  # sweep decodes the greedy reference

    real = speculative.greedy
    calls = []

    def stop_during_third(target, prompt, max_new):
        calls.append(1)
        ref = real(target, prompt, max_new)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # what `eagle3 stop` sends, between two forwards
        return ref

    monkeypatch.setattr(sweep, "greedy", stop_during_third)
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(events))
    report = tmp_path / "r.json"
    before = signal.getsignal(signal.SIGTERM)
    assert main(_args(tiny, "--drafter", str(tiny["drafter"]), "--report", str(report))) == 143
    assert signal.getsignal(signal.SIGTERM) is before
    err = capsys.readouterr().err
    assert "evaluate: stopped by SIGTERM; 2 of 4 prompts were scored" in err and "prompt p2 was dropped mid-way" in err
    assert "no report was written" in err and "Traceback" not in err
    assert not report.exists()
    warnings = [e.get("text") for e in iter_events(events) if e.kind == "message" and e.get("level") == "warning"]
    assert any("2 of 4 prompts were scored" in w for w in warnings)


def test_eagle3_stop_ends_an_evaluation_within_the_grace(tiny, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    gen = torch.Generator().manual_seed(7)
    with open(prompts, "w") as f:
        for i in range(40):
            ids = torch.randint(3, VOCAB, (12,), generator=gen).tolist()
            f.write(json.dumps({"id": f"q{i}", "input_ids": ids + [7], "loss_mask": [0] * 12 + [1]}) + "\n")
    events = tmp_path / "events.jsonl"
    report = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE3_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="", EAGLE3_EVENTS=str(events))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.evaluate", "--drafter", str(tiny["drafter"]),
                             "--target", str(tiny["target"]), "--prompts", str(prompts), "--limit", "40",
                             "--max-new-tokens", "200", "--device", "cpu", "--report", str(report)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if events.exists() and any(e.kind == "progress" and e.get("done", 0) >= 1 for e in iter_events(events)):
                break
            time.sleep(0.05)  # wait-ok: polls for the first scored prompt, under a deadline
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    print(f"evaluate ended {took:.2f} s after SIGTERM")
    assert proc.returncode == 143, err
    assert took < 10
    assert " of 40 prompts were scored" in err and "no report was written" in err
    assert not report.exists()


def test_sigterm_once_the_report_is_written_keeps_it_and_exits_0(tiny, tmp_path, monkeypatch, capsys):
    from pipeline.evaluate import evaluation as program

    real = program.write_report

    def then_stop(path, obj):
        real(path, obj)
        # the handler runs in the main thread wherever Python next looks for signals, which can be
        # right here when another thread took the SIGTERM: run it here, as that moment would
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)

    monkeypatch.setattr(program, "write_report", then_stop)
    report = tmp_path / "r.json"
    assert main(_args(tiny, "--drafter", str(tiny["drafter"]), "--limit", "1", "--report", str(report))) == 0
    assert read_report(report).prompts == 1
    assert "no report was written" not in capsys.readouterr().err
