"""Every stage program, run as the console runs it, answers a bad input with its documented
exit code and one `<stage>: error:` line that names what to fix, never a traceback. The
inputs are picked so that each refusal comes from a different module (a target's config,
a drafter's config, a source, a record, a size, the patcher's recipes): whichever module
raises it, the operator reads the same kind of line and the console the same code.

Each stage's first case runs as the program, through the interpreter, as the console starts
it; its other cases call the stage's `main()` in the worker (stage_call.py, whose code and
output tests/pipeline/test_stage_call.py holds equal to the program's), where torch and
transformers are loaded once: a program that loads them before it refuses spends seconds of a
core on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import make_records, write_merged
from stage_call import call_stage

REPO = Path(__file__).resolve().parents[2]
STAGES = ("merge", "regenerate", "extract", "train", "export", "evaluate", "serve", "patch", "demo", "prepare")
SHALLOW = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-5}


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE3_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    return env


def _folder(tmp: Path, name: str, config: object | None = None, text: str | None = None) -> Path:
    d = tmp / name
    d.mkdir()
    if config is not None or text is not None:
        (d / "config.json").write_text(text if text is not None else json.dumps(config))
    return d


def _bad_record(tmp: Path) -> Path:
    path = tmp / "bad.jsonl"
    path.write_text('{"id": 1, "conversations": 5}\n')
    return path


def _export_bad_drafter(tmp: Path) -> list[str]:
    ckpt = _folder(tmp, "ckpt", {"architectures": ["LlamaForCausalLMEagle3"]})
    (ckpt / "model.safetensors").write_bytes(b"")
    return ["--checkpoint", str(ckpt), "--target", str(_folder(tmp, "t", SHALLOW)), "--out", str(tmp / "e")]


def _train_target_without_weights(tmp: Path) -> list[str]:
    data = write_merged(tmp / "merged.jsonl", make_records(4))
    target = _folder(tmp, "t", {"model_type": "llama", "num_hidden_layers": 8})
    return ["--data", str(data), "--target", str(target), "--out", str(tmp / "run")]


def _server(tmp: Path) -> list[str]:
    return ["--out", str(tmp / "r"), "--backend", "server", "--server", "http://127.0.0.1:9", "--served-model", "m"]


# (stage, argv from a fresh folder, exit code, words the error line holds)
CASES: list[tuple[str, Callable[[Path], list[str]], int, str]] = [
    ("merge", lambda t: ["--tokenizer", str(_folder(t, "tok")), "--out", str(t / "m.jsonl"), str(t / "nope.jsonl")],
     2, "nope.jsonl does not exist"),
    ("merge", lambda t: ["--tokenizer", str(_folder(t, "tok")), "--out", str(t / "m.jsonl"), str(_bad_record(t))],
     2, "cannot load a tokenizer"),
    ("regenerate", lambda t: [*_server(t), "--role-map", "foo", str(_bad_record(t))], 2, "--role-map entry 'foo'"),
    ("regenerate", lambda t: [*_server(t), str(_bad_record(t))], 4, "is not answering"),
    ("regenerate", lambda t: ["--synthesize", "4", "--out", str(t / "s.jsonl"), "--model", str(_folder(t, "m")),
                              "--system-prompts", str(_bad_record(t))], 2, "a non-empty JSON array of strings"),
    ("extract", lambda t: ["--model", str(_folder(t, "m")), "--data", str(_bad_record(t)), "--out", str(t / "x")],
     2, "config.json: missing; --model"),
    ("extract", lambda t: ["--model", str(_folder(t, "m", text="{")), "--data", str(_bad_record(t)), "--out",
                           str(t / "x")], 2, "config.json: not valid JSON"),
    ("extract", lambda t: ["--model", str(_folder(t, "m", {"model_type": "llama", "num_hidden_layers": 8})),
                           "--data", str(_bad_record(t)), "--out", str(t / "x")], 2, "'hidden_size'"),
    ("train", lambda t: ["--store", str(t / "nope"), "--target", str(_folder(t, "t")), "--out", str(t / "run")],
     2, "not a folder"),
    ("train", lambda t: ["--data", str(_bad_record(t)), "--target", str(_folder(t, "t", SHALLOW)), "--out",
                         str(t / "run")], 2, "key 'id' must be a string"),
    ("train", _train_target_without_weights, 2, "has no weight files"),
    ("export", lambda t: ["--checkpoint", str(t / "nope"), "--target", str(_folder(t, "t", SHALLOW)), "--out",
                          str(t / "e")],
     2, "is not a folder"),
    ("export", _export_bad_drafter, 2, "config.json: key 'num_hidden_layers'"),
    ("evaluate", lambda t: ["--target", str(t), "--demo-prompts", "2"], 2, "--drafter, --baseline or both"),
    ("evaluate", lambda t: ["--target", str(_folder(t, "t", {})), "--baseline", "--demo-prompts", "2"],
     2, "(--target)"),
    ("serve", lambda t: ["--mode", "extract", "--model", str(_folder(t, "m")), "--dump-dir", str(t / "d"), "--dry-run"],
     2, "no config.json"),
    ("serve", lambda t: ["--mode", "extract", "--model", str(_folder(t, "m", SHALLOW)), "--dump-dir", str(t / "d"),
                         "--dump-budget", "lots", "--dry-run"], 2, "'lots' is not a size"),
    ("patch", lambda t: ["apply", "--file", str(t / "nope.py")], 2, "does not exist"),
    ("patch", lambda t: ["apply", "--file", str(_folder(t, "src"))], 2, "src"),
    ("demo", lambda t: ["--out", str(_bad_record(t)), "--quick"], 2, "exists and is not a folder"),
    ("prepare", lambda t: ["split", "--sharegpt", str(_bad_record(t)), "--out", str(t / "s")], 2,
     "no training record is left"),
    ("prepare", lambda t: ["target", "--from", str(_folder(t, "m")), "--out", str(t / "t")], 2,
     "a folder without config.json"),
]


def _unknown_source(tmp: Path) -> list[str]:
    path = tmp / "llama.py"
    path.write_text("x = 1\n")
    return ["apply", "--file", str(path)]


CASES.append(("patch", _unknown_source, 3, "not an original this patcher knows"))


def _run(stage: str, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"pipeline.{stage}", *argv], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=300)


FIRST = {stage: i for i, (stage, *_) in reversed(list(enumerate(CASES)))}


@pytest.mark.parametrize(("stage", "make_argv", "code", "words", "program"),
                         [(*c, FIRST[c[0]] == i) for i, c in enumerate(CASES)],
                         ids=[f"{c[0]}-{i}-{'program' if FIRST[c[0]] == i else 'main'}" for i, c in enumerate(CASES)])
def test_a_bad_input_is_one_line_and_its_code(tmp_path, stage, make_argv, code, words, program):
    done = _run(stage, make_argv(tmp_path)) if program else call_stage(stage, make_argv(tmp_path))
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith(f"{stage}: error: ")]
    assert len(lines) == 1, done.stderr
    assert words in lines[0], lines[0]
    assert done.returncode == code, done.stderr


@pytest.mark.parametrize("stage", STAGES)
def test_help_lists_the_options_and_exits_0(stage):
    done = _run(stage, ["--help"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m pipeline.{stage} "), done.stdout[:200]
    assert "Traceback" not in done.stderr
