"""Both regenerate backends, opened from the stage's options and run through the one `Backend`
protocol into the shared in-memory sink: the hf backend on a tiny local target, the server
backend against the stand-in SGLang server. Each answers every user turn of every chat as its
reference does (plain `model.generate`, the stand-in's answer), hands every record to the sink
once and in input order, and a prompt too long for the target comes back as that record's
failure in its place, the records after it answered."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from standin_sglang import StandIn, answer
from tiny_chat_target import build_chat_target, greedy_answers

from pipeline.regenerate.backends import Backend, open_backend
from pipeline.regenerate.conversation import Chat, seed_for
from pipeline.regenerate.options import Options
from pipeline.regenerate.sink import MemorySink

MAX_NEW = 8
SEED = 5
TOO_LONG = "TOO-LONG"
MODEL = "/models/tiny-target"


def _conv(i: int) -> list[dict[str, str]]:
    conv = [{"role": "user", "content": f"question {i} " + "words " * (i % 4)}, {"role": "assistant", "content": "x"}]
    for t in range(i % 3):  # one, two or three user turns
        conv += [{"role": "user", "content": f"and {t} more {i}?"}, {"role": "assistant", "content": "x"}]
    if i == 4:  # past both backends' bound on a prompt
        conv[0]["content"] = f"{TOO_LONG} " + "words and more words " * 40
    return conv


def _options(tmp_path: Path, **kw) -> Options:
    return Options(sources=(), out=tmp_path / "out.jsonl", stats=tmp_path / "out.stats.json", seed=SEED,
                   max_new_tokens=MAX_NEW, **kw)


@pytest.fixture(params=["hf", "server"])
def opened(request, tmp_path) -> Iterator[tuple[Backend, Callable[[list[dict[str, str]], str], list[str]]]]:
    """A backend opened as the stage opens it, and what it must have answered in a chat: its
    reference's answer to each turn's prompt, the answers before it included."""
    if request.param == "hf":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        target = build_chat_target(tmp_path / "target")
        backend = open_backend(_options(tmp_path, backend="hf", model=target, temperature=0.0, batch_size=3,
                                        max_prompt_tokens=100, threads=1))
        tok = AutoTokenizer.from_pretrained(target)
        model = AutoModelForCausalLM.from_pretrained(target, attn_implementation="sdpa").eval()
        yield backend, lambda conv, rid: greedy_answers(model, tok, conv, MAX_NEW, set(backend.eos))
        return
    with StandIn(MODEL, None, hidden=8, too_long_marker=TOO_LONG) as server:
        backend = open_backend(_options(tmp_path, backend="server", servers=(server.url,), served_model=MODEL,
                                        concurrency=2, retries=0))
        yield backend, _stand_in_answers


def _stand_in_answers(conv: list[dict[str, str]], rid: str) -> list[str]:
    """The stand-in's answer to each assistant turn's prompt (the chat before it)."""
    turns = [k for k, m in enumerate(conv) if m["role"] == "assistant"]
    return [answer(conv[:k], seed_for(SEED, rid, turn), MAX_NEW)[0] for turn, k in enumerate(turns)]


def test_each_backend_answers_every_turn_through_the_protocol_in_input_order_with_failures_in_place(opened):
    backend, reference = opened
    convs = [_conv(i) for i in range(8)]
    chats = [Chat.start(i, f"r{i}", conv) for i, conv in enumerate(convs)]
    sink = MemorySink()
    backend.run(iter(chats), sink)

    assert sink.next == len(chats) and len(sink.results) == len(chats)
    for i, (chat, result) in enumerate(zip(chats, sink.results)):
        if i == 4:
            assert isinstance(result, tuple) and result[0] is chat, result
            assert result[1].reason == "prompt_too_long", result[1].detail
            continue
        assert result is chat, (chat.id, result)
        said = [m["content"] for m in chat.messages if m["role"] == "assistant"]
        assert len(said) == 1 + i % 3
        assert said == reference(chat.messages, chat.id), chat.id  # each turn asked with the answers before it
