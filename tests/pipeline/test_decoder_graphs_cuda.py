"""CUDA graphs through a growing key-value cache, on a CUDA device only (skipped without one):
run it on the device with `python -m pytest -q tests/pipeline/test_decoder_graphs_cuda.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_chat_target import build_chat_target

from pipeline.regenerate.sink import MemorySink

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def _chat(i: int, words: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"question {i} " + " ".join(["words and more"] * words)},
            {"role": "assistant", "content": "old"}]


def test_graphs_are_captured_again_after_the_cache_grows_and_answers_match_eager_steps(tmp_path: Path, capfd):
    from pipeline.regenerate.backends.decoder import WIDTH_STEP
    from pipeline.regenerate.backends.hf import HFBackend
    from pipeline.regenerate.conversation import Chat

    path = build_chat_target(tmp_path / "tiny")
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = 4 * WIDTH_STEP  # room for the cache to grow past its first width
    (path / "config.json").write_text(json.dumps(config))
    backend = HFBackend(path, "cuda", "fp32", 12, 0.0, 1.0)
    long_words = WIDTH_STEP // 2  # about 3 tokens a repeat: a prompt past the first width
    convs = [_chat(i, 2) for i in range(4)] + [_chat(i, long_words) for i in range(4, 6)]

    def answers(graphs: bool) -> list[list[str]]:
        chats = [Chat.start(i, f"r{i}", c) for i, c in enumerate(convs)]
        backend.run(iter(chats), MemorySink(), slots=2, graphs=graphs)
        return [[m["content"] for m in c.messages] for c in chats]

    replayed = answers(True)
    stats, used = backend.step_stats, backend.graphs_used
    err = capfd.readouterr().err
    assert "CUDA graph capture failed" not in err, err
    assert used, "graphs were turned off during the run"
    assert stats is not None and stats.graphs >= 2, stats  # one before the cache grew for the long prompts, one after
    assert replayed == answers(False)
