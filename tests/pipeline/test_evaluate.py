"""pipeline.evaluate: speculative output is greedy output, and acceptance is counted right."""

from __future__ import annotations

import json
import sys
import threading
import typing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from pipeline.evaluate.__main__ import main
from pipeline.evaluate.report import summarize
from pipeline.evaluate.speculative import greedy, speculate
from pipeline.evaluate.verifier import Target
from pipeline.events import iter_events
from pipeline.records.evaluate_report import read_report

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_export import make_checkpoint, make_drafter

VOCAB = 128
MAX_NEW = 16


def build_tiny(root: Path) -> dict:
    """A random 8-layer Llama target, merged-record prompts, and an untrained drafter exported for it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.export import __main__ as export

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=8,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      eos_token_id=VOCAB + 5)  # out of vocabulary: every prompt runs to MAX_NEW tokens
    target = root / "target"
    LlamaForCausalLM(cfg).save_pretrained(target)
    gen = torch.Generator().manual_seed(1)
    prompts = root / "prompts.jsonl"
    with open(prompts, "w") as f:
        for i in range(4):
            ids = torch.randint(3, VOCAB, (int(torch.randint(5, 30, (1,), generator=gen)),), generator=gen).tolist()
            f.write(json.dumps({"id": f"p{i}", "input_ids": ids + [7, 8], "loss_mask": [0] * len(ids) + [1, 1]}) + "\n")
    run = make_checkpoint(root / "run", make_drafter(target, seed=3))
    drafter = root / "drafter"
    assert export.main(["--checkpoint", str(run), "--target", str(target), "--out", str(drafter)]) == 0
    return {"root": root, "target": target, "prompts": prompts, "drafter": drafter}


@pytest.fixture(scope="module")
def tiny(evaluation_tiny) -> dict:
    return evaluation_tiny


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A tiny model on a shared 2-core machine runs fastest on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def target(tiny) -> Target:
    return Target(tiny["target"], "cpu", torch.float32)


@pytest.fixture(scope="module")
def reference(target) -> tuple[list[int], list[int]]:
    prompt = [5, 9, 17, 33, 2, 64]
    ref = greedy(target, prompt, MAX_NEW)
    assert len(ref.tokens) == MAX_NEW and ref.forwards == MAX_NEW
    return prompt, ref.tokens


class Oracle:
    """Proposes the target's own greedy continuation, wrong from draft `right` on."""

    def __init__(self, prompt: list[int], reference: list[int], right: int) -> None:
        self.prompt, self.ref, self.right = prompt, reference, right

    def reset(self) -> None:
        pass

    def propose(self, seq, aux, k):
        assert aux.shape[0] == len(seq) - 1
        done = len(seq) - len(self.prompt)
        want = (self.ref + [0] * (k + 1))[done:done + k]
        return [t if j < self.right else (t + 1) % VOCAB for j, t in enumerate(want)]


@pytest.mark.parametrize("right", [0, 2, 4])
def test_speculative_output_is_greedy_output_and_accepts_exactly_the_right_drafts(target, reference, right):
    k = 4
    prompt, ref = reference
    got = speculate(target, Oracle(prompt, ref, right), prompt, MAX_NEW, k)
    assert got.tokens == ref
    assert got.accepted[:-1] == [right] * (len(got.accepted) - 1)  # the last round may run past MAX_NEW
    assert got.forwards == 1 + len(got.accepted)
    if right == k:
        assert got.forwards <= 1 + -(-(MAX_NEW - 1) // (k + 1))


def test_an_untrained_exported_drafter_accepts_about_nothing_and_output_stays_greedy(tiny, tmp_path, capsys,
                                                                                      monkeypatch):
    report = tmp_path / "r.json"
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("EAGLE3_EVENTS", str(events))
    rc = main(["--drafter", str(tiny["drafter"]), "--target", str(tiny["target"]), "--prompts",
               str(tiny["prompts"]), "--num-steps", "3", "--max-new-tokens", str(MAX_NEW), "--report", str(report),
               "--device", "cpu"])
    assert rc == 0, capsys.readouterr().err
    r = read_report(report)
    print(f"untrained drafter: acceptance length {r.acceptance_length}")
    assert r.output_equals_greedy is True and r.prompts == 4 and r.tokens == 4 * MAX_NEW
    assert 1.0 <= r.acceptance_length < 1.1
    assert r.target_forwards.greedy == 4 * MAX_NEW
    assert len(r.accept_rate) == 3
    names = {e.get("name") for e in iter_events(events) if e.kind == "metric"}
    assert {"acceptance_length", "accept_rate_1", "accept_rate_2", "accept_rate_3", "speedup_forwards"} <= names


def test_evaluate_refuses_to_report_when_speculative_output_differs(tiny, tmp_path, monkeypatch, capsys):
    from pipeline.evaluate import speculative, sweep  # sweep decodes the greedy reference

    real = speculative.greedy

    def off_by_one(target, prompt, max_new):
        d = real(target, prompt, max_new)
        d.tokens[-1] = (d.tokens[-1] + 1) % VOCAB
        return d

    monkeypatch.setattr(sweep, "greedy", off_by_one)
    report = tmp_path / "r.json"
    rc = main(["--drafter", str(tiny["drafter"]), "--target", str(tiny["target"]), "--prompts", str(tiny["prompts"]),
               "--limit", "1", "--max-new-tokens", "8", "--report", str(report), "--device", "cpu"])
    assert rc == 3
    err = capsys.readouterr().err
    assert "differs from greedy at new token 7" in err and "refusing" in err and "Traceback" not in err
    assert not report.exists()


def test_exclude_drops_prompts_seen_in_training(tiny, tmp_path, capsys):
    rc = main(["--drafter", str(tiny["drafter"]), "--target", str(tiny["target"]), "--prompts", str(tiny["prompts"]),
               "--exclude", str(tiny["prompts"]), "--device", "cpu"])
    assert rc == 2
    assert "4 also in --exclude" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--exclude", "--prompts"])
def test_json_nested_past_the_decoder_is_exit_2_naming_the_line(flag, tiny, tmp_path, capsys):
    """A line of `[[[[...` 100,000 deep: the decoder's RecursionError was exit 1 with a
    traceback's name; it is bad input, named by file and line."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text(tiny["prompts"].read_text().splitlines()[0] + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    files = {"--prompts": tiny["prompts"], "--exclude": tiny["prompts"], flag: deep}
    rc = main(["--drafter", str(tiny["drafter"]), "--target", str(tiny["target"]), "--prompts", str(files["--prompts"]),
               "--exclude", str(files["--exclude"]), "--limit", "4", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{deep}:2: JSON nested too deeply" in err and "RecursionError" not in err


def test_a_drafter_exported_for_another_capture_is_refused(tiny, tmp_path, capsys):
    import shutil

    bad = tmp_path / "drafter"
    shutil.copytree(tiny["drafter"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 4, 5]  # capture layers, not SGLang's ids
    (bad / "config.json").write_text(json.dumps(cfg))
    rc = main(["--drafter", str(bad), "--target", str(tiny["target"]), "--prompts", str(tiny["prompts"]),
               "--device", "cpu"])
    assert rc == 2
    assert "eagle_aux_hidden_state_layer_ids is [2, 4, 5]" in capsys.readouterr().err


def test_summary_counts_rates_per_position():
    s = summarize(3, accepted=[3, 1, 0, 2], tokens=10, prompts=1, spec_forwards=5, greedy_forwards=10)
    assert s.acceptance_length == pytest.approx((3 + 1 + 0 + 2 + 4) / 4)
    assert s.accept_rate == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    assert s.accept_prob == pytest.approx([3 / 4, 2 / 4, 1 / 4])
    assert s.speedup_forwards == 2.0


class _Sglang(BaseHTTPRequestHandler):
    """Answers /generate like SGLang with a speculative algorithm (or without, when told)."""

    drafting = True
    seen: typing.ClassVar[list] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        n = body["sampling_params"]["max_new_tokens"]
        meta = {"completion_tokens": n, "prompt_tokens": len(body["input_ids"])}
        if self.drafting:
            verify = 4 + len(body["input_ids"]) % 3
            meta.update(spec_verify_ct=verify, spec_accept_length=n / verify)
        data = json.dumps({"text": "x", "output_ids": [1] * n, "meta_info": meta}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def sglang_standin():
    _Sglang.seen = []
    _Sglang.drafting = True
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Sglang)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_server_mode_reports_the_mean_spec_accept_length_of_the_responses(tiny, tmp_path, sglang_standin):
    _srv, url = sglang_standin
    report = tmp_path / "server.json"
    assert main(["--server", url, "--prompts", str(tiny["prompts"]), "--max-new-tokens", "12",
                 "--report", str(report)]) == 0
    r = read_report(report)
    prompts = [json.loads(line)["input_ids"][:-2] for line in tiny["prompts"].read_text().splitlines()]
    lengths = [12 / (4 + len(p) % 3) for p in prompts]
    sent = sorted(b["input_ids"] for b in _Sglang.seen)
    assert sent == sorted(prompts)
    assert all(b["sampling_params"]["temperature"] == 0.0 for b in _Sglang.seen)
    assert r.mode == "server"
    assert r.mean_spec_accept_length == pytest.approx(sum(lengths) / len(lengths), abs=1e-3)
    assert r.prompts == 4 and r.completion_tokens == 48 and len(r.per_prompt) == 4


def test_server_mode_says_when_the_server_is_not_drafting(tiny, sglang_standin, capsys):
    _srv, url = sglang_standin
    _Sglang.drafting = False
    assert main(["--server", url, "--prompts", str(tiny["prompts"]), "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert "no spec_accept_length" in err and "--speculative-algorithm EAGLE3" in err


def test_server_mode_names_an_unreachable_server(tiny, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["--server", f"http://127.0.0.1:{port}", "--prompts", str(tiny["prompts"]), "--timeout", "5"]) == 2
    assert "cannot reach the server" in capsys.readouterr().err


def test_a_transformers_that_names_the_cache_past_key_values_scores_the_same_as_full_forwards(tiny, reference,
                                                                                            monkeypatch):
    """The GPU image's transformers (5.17) takes `past_key_values`, 5.24 takes `cache`: a cache
    passed under the other name was silently ignored, and every cached forward lost its context."""
    from transformers import LlamaForCausalLM

    real = LlamaForCausalLM.forward
    if "cache" not in __import__("inspect").signature(real).parameters:
        pytest.skip("this transformers already names it past_key_values: the other tests cover it")

    def forward(self, input_ids=None, past_key_values=None, use_cache=None, logits_to_keep=0, **kw):
        return real(self, input_ids=input_ids, cache=past_key_values, use_cache=use_cache,
                    logits_to_keep=logits_to_keep)

    monkeypatch.setattr(LlamaForCausalLM, "forward", forward)
    old = Target(tiny["target"], "cpu", torch.float32)
    assert old.cache_kw == "past_key_values"
    prompt, ref = reference
    assert greedy(old, prompt, len(ref)).tokens == ref


def test_a_forward_that_ignores_the_cache_is_refused_not_scored(tiny, reference):
    ignoring = Target(tiny["target"], "cpu", torch.float32)
    real = ignoring.model.forward
    ignoring.model.forward = lambda input_ids=None, cache=None, use_cache=None, logits_to_keep=0, **kw: real(
        input_ids=input_ids, use_cache=False, logits_to_keep=logits_to_keep)
    prompt, ref = reference
    with pytest.raises(RuntimeError, match="did not extend its KV cache"):
        greedy(ignoring, prompt, len(ref))


def test_the_first_draft_at_every_position_is_what_training_scored_there(tiny, target, reference, monkeypatch):
    """Validation accuracy and acceptance at the first draft position count the same thing: the
    evaluation's first draft after each prefix equals the trainer's step-0 prediction for that
    row (its capture, objective and drafter on the whole sequence), so a gap between the two
    figures is the data's, not a misalignment."""
    from pipeline.capture import Capturer
    from pipeline.evaluate.drafter import ChainDrafter, load_exported
    from pipeline.target.model import load_target
    from pipeline.target.tensors import read_lm_head
    from pipeline.train import loss
    from pipeline.train.loss import TargetHead, TTTObjective, prepare

    prompt, ref = reference
    seq = prompt + ref
    model = load_exported(tiny["drafter"], tiny["target"], target.capture, "cpu", torch.float32)
    aux = target.step(seq, keep=1).aux.clone()
    chain = ChainDrafter(model)
    drafted = {n: chain.propose(seq[:n], aux[: n - 1], 3)[0] for n in range(len(prompt) + 1, len(seq))}

    m = load_target(tiny["target"], "cpu", torch.float32, "--target")
    final, states, _ = Capturer(m, target.capture, target.num_layers, "cpu", compile=False).forward(
        torch.tensor([seq]), [len(seq)])
    ids = torch.tensor([seq])
    mask = torch.zeros_like(ids, dtype=torch.uint8)
    mask[0, len(prompt):] = 1
    draft_ids = torch.arange(model.config.draft_vocab_size) + model.d2t
    head = TargetHead(read_lm_head(tiny["target"]), draft_ids, model.t2d, torch.device("cpu"), torch.float32)
    prep = prepare(head, {"input_ids": ids, "loss_mask": mask, "hidden_state": final, "aux_hidden_state": states},
                   3, torch.float32)
    tops: list[torch.Tensor] = []
    scored = loss.head_soft_cross_entropy
    monkeypatch.setattr(loss, "head_soft_cross_entropy", lambda *a: tops.append(scored(*a)[1]) or scored(*a))
    with torch.no_grad():
        TTTObjective(model, 3)(prep)
    # step 0 scores row t = p - 1 at target position p: the token after seq[t + 1]
    trained = {int(p) - 1: int(t) for p, t in zip(prep.pos, model.draft_to_target(tops[0]))}
    assert [trained[n - 2] for n in drafted] == list(drafted.values())
    assert len(set(drafted.values())) > 1  # a drafter that says one token everywhere would prove nothing
