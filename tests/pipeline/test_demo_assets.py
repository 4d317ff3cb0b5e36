"""pipeline.demo: the offline, seeded build of the demo's datasets, tokenizer and target."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from stage_call import call_stage

from pipeline.chat.records import parse_record
from pipeline.chat.synthetic import LONG_SOURCE, generate
from pipeline.demo.__main__ import main as demo_main
from pipeline.events import read_events

REPO = Path(__file__).resolve().parents[2]


OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _build(out: Path) -> list[str]:
    return ["--out", str(out), "--quick", "--seed", "0"]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Two quick builds with the same seed, run side by side on different thread counts (as
    an idle and a busy machine would give them): a program on three threads, and the stage's
    main() on this worker's one (stage_call.py), which writes events."""
    root = tmp_path_factory.mktemp("demo")
    a, b, events = root / "a", root / "b", root / "events.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "EAGLE3_EVENTS"}
    busy = subprocess.Popen([sys.executable, "-m", "pipeline.demo", *_build(b)], cwd=REPO, text=True,
                            env={**env, **OFFLINE, "OMP_NUM_THREADS": "3", "RAYON_NUM_THREADS": "3"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    idle = call_stage("demo", _build(a), env={**OFFLINE, "RAYON_NUM_THREADS": "1", "EAGLE3_EVENTS": str(events)})
    stdout, stderr = busy.communicate(timeout=180)
    assert busy.returncode == 0, f"demo failed:\n{stdout}\n{stderr}"
    assert idle.returncode == 0, f"demo failed:\n{idle.stdout}\n{idle.stderr}"
    return a, b, events, idle.stdout


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_gives_identical_bytes(builds):
    a, b, _, _ = builds
    fa, fb = _files(a), _files(b)
    assert fa.keys() == fb.keys()
    differing = [name for name in fa if fa[name] != fb[name]]
    assert differing == []
    assert "target/model.safetensors" in fa


def test_seed_changes_the_data():
    assert generate(0, quick=True) != generate(1, quick=True)
    assert generate(0, quick=True) == generate(0, quick=True)


def test_layout_and_assets_summary(builds):
    out = builds[0]
    assets = json.loads((out / "assets.json").read_text())
    raw = sorted(p.stem for p in (out / "raw").glob("*.jsonl"))
    assert len(raw) >= 3 and LONG_SOURCE in raw
    assert sorted(assets["sources"]) == raw
    for name, info in assets["sources"].items():
        path = out / info["path"]
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) == info["records"] > 0
        for n, line in enumerate(lines, 1):
            rec = parse_record(line, str(path), n)
            assert rec.id.startswith(name)
            assert any(m["role"] == "assistant" and m["content"] for m in rec.conversations)
    assert assets["seed"] == 0
    assert assets["target"]["num_hidden_layers"] >= 7  # three distinct capture layers
    hidden = [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert hidden == [".eagle3-writer"], "temporary folders left behind"


def test_target_and_tokenizer_load_offline_and_chat(builds, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    target = builds[0] / "target"
    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target)
    cfg = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert cfg.num_hidden_layers >= 7
    assert cfg.max_position_embeddings >= 1024
    assert cfg.tie_word_embeddings is False
    assert model.dtype == torch.float32
    assert cfg.vocab_size == len(tok)

    chat = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5."}]
    text = tok.apply_chat_template(chat, tokenize=False)
    assert text == "<|begin|><|user|>\nWhat is 2 + 3?<|end|>\n<|assistant|>\n2 + 3 = 5.<|end|>\n"
    prompt = tok.apply_chat_template(chat[:1], add_generation_prompt=True, return_dict=True, return_tensors="pt")
    assert tok.decode(prompt["input_ids"][0]).endswith("<|assistant|>\n")
    with torch.no_grad():
        logits = model(**prompt).logits
    assert logits.shape[-1] == len(tok) and torch.isfinite(logits).all()
    assert tok.decode(tok("Convert 5 km to meters.")["input_ids"]) == "Convert 5 km to meters."

    standalone = AutoTokenizer.from_pretrained(builds[0] / "tokenizer")
    assert standalone.apply_chat_template(chat, tokenize=False) == text


def test_long_source_exceeds_default_max_len(builds):
    from transformers import AutoTokenizer

    out = builds[0]
    tok = AutoTokenizer.from_pretrained(out / "tokenizer")
    recs = [json.loads(line) for line in (out / "raw" / f"{LONG_SOURCE}.jsonl").read_text().splitlines()]
    lengths = [len(tok.apply_chat_template(r["conversations"])["input_ids"]) for r in recs]
    assert sum(n > 512 for n in lengths) > len(lengths) / 2


def test_training_lowers_loss_and_reports_it(builds):
    out, _, events_path, stdout = builds
    target = json.loads((out / "assets.json").read_text())["target"]
    assert target["final_loss"] < target["initial_loss"] - 0.5
    assert "loss" in stdout and "step" in stdout
    import hashlib

    weights = hashlib.sha256((out / "target" / "model.safetensors").read_bytes()).hexdigest()
    assert target["weights_sha256"] == weights and f"target weights sha256 {weights[:16]}" in stdout
    assert target["cpu_kernels"] and f"(CPU kernels {target['cpu_kernels']})" in stdout

    events, _ = read_events(events_path)
    steps = [e for e in events if e.kind == "progress" and e.get("unit") == "steps"]
    assert steps and steps[-1].get("done") == steps[-1].get("total") == target["train_steps"]
    losses = [e for e in events if e.kind == "metric" and e.get("name") == "loss"]
    assert len(losses) == target["train_steps"]
    artifacts = {Path(e.get("path")).name for e in events if e.kind == "artifact"}
    assert {"raw", "tokenizer", "target", "assets.json"} <= artifacts


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["--train-steps", "0"], "--train-steps"), (["--out", "FILE"], "not a folder")],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, argv, needle):
    afile = tmp_path / "afile"
    afile.write_text("x")
    args = ["--out", str(tmp_path / "o"), "--quick"] + [str(afile) if a == "FILE" else a for a in argv]
    assert demo_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()
