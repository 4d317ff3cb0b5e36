"""`python -m pipeline.regenerate --synthesize N`: the target writes the questions too. On a tiny
local target that ends a turn now and then (tiny_chat_target.build_talking_target): its
questions are its own draws from its chat template cut where a user turn begins, and stop
at the token that ends the turn; each filter drops what it names and counts it with an
example; a run killed with SIGKILL and rerun writes the same file as one that never stopped,
whatever the batch size; another seed writes other records; and merge reads the output as one
more source."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stage_call import call_stage
from test_loss_mask_templates import SHAPES, _look_alike
from tiny_chat_target import build_talking_target, greedy_answers

from pipeline.records import merge_stats, synthesis_stats

pytestmark = pytest.mark.timeout(900)  # the module's target and first run load a loaded 2-core machine for minutes

REPO = Path(__file__).resolve().parents[2]
N = 24
QUESTION_TOKENS = 16
ANSWER_TOKENS = 8
SYSTEM_PROMPTS = ["", "be short", "you answer in numbers"]


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return build_talking_target(tmp_path_factory.mktemp("synth-target") / "talking")


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("synth-prompts") / "system.json"
    path.write_text(json.dumps(SYSTEM_PROMPTS))
    return path


def synth(target: Path, out: Path, *more: str, records: int = N, wait: bool = True):
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin",
           "EAGLE3_EVENTS": str(out.with_suffix(".events.jsonl"))}
    argv = [sys.executable, "-m", "pipeline.regenerate", "--synthesize", str(records), "--out", str(out),
            "--model", str(target), "--max-question-tokens", str(QUESTION_TOKENS), "--max-new-tokens",
            str(ANSWER_TOKENS), "--temperature", "0", "--min-question-chars", "3", "--max-dropped-share", "0.8",
            "--seed", "0", *more]
    if not wait:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return call_stage("regenerate", argv[3:], env={"EAGLE3_EVENTS": env["EAGLE3_EVENTS"]})


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def first_run(target, prompts, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth-a") / "synth.jsonl"
    p = synth(target, out, "--batch-size", "4", "--system-prompts", str(prompts))
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def test_questions_are_the_targets_draws_from_its_template_up_to_a_user_turn_and_stop_at_its_end(target, first_run):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.regenerate.backends.sampler import Sampler
    from pipeline.regenerate.conversation import seed_for

    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, attn_implementation="sdpa").eval()
    end = tok.convert_tokens_to_ids("<|end|>")
    sampler = Sampler(model.lm_head.weight.shape[0], torch.device("cpu"), 0.0, 1.0, per_row=True)
    records = lines(first_run)
    assert [r["id"] for r in records] == sorted((r["id"] for r in records), key=lambda i: int(i.split("-")[2]))
    assert len(records) == N
    systems = set()
    for rec in records:
        conv = rec["conversations"]
        system = conv[0]["content"] if conv[0]["role"] == "system" else ""
        systems.add(system)
        # the demo template's own text up to a user turn's content, written here from its format
        prefix = "<|begin|>" + (f"<|system|>\n{system}<|end|>\n" if system else "") + "<|user|>\n"
        ids = tok(prefix, add_special_tokens=False)["input_ids"]
        seed = torch.tensor([seed_for(0, rec["id"], 0)])
        drawn: list[int] = []
        with torch.inference_mode():
            while len(drawn) < QUESTION_TOKENS:
                logits = model(torch.tensor([ids + drawn])).logits[:, -1, :]
                drawn.append(int(sampler(logits, seed, torch.tensor([len(drawn)]), torch.tensor([1.0]))[0]))
                if drawn[-1] == end:
                    break
        assert drawn[-1] == end, rec["id"]  # the target closed its turn, and the question stops there
        question = next(m for m in conv if m["role"] == "user")["content"]
        assert question == tok.decode(drawn[:-1], skip_special_tokens=True).strip(), rec["id"]
        assert [m["role"] for m in conv if m["role"] != "system"] == ["user", "assistant"]
        assert [m["content"] for m in conv if m["role"] == "assistant"] == \
            greedy_answers(model, tok, conv, ANSWER_TOKENS, {end}), rec["id"]
    assert systems == set(SYSTEM_PROMPTS)  # each record drew its system prompt, "" for none
    stats = synthesis_stats.read_stats(first_run.with_name("synth.stats.json"))
    assert stats.status == "done" and stats.records_out == N
    assert sum(stats.dropped.values()) + N + stats.surplus == stats.asked
    events = [json.loads(x) for x in first_run.with_suffix(".events.jsonl").read_text().splitlines()]
    last = [e for e in events if e["kind"] == "progress"][-1]
    assert (last["done"], last["total"]) == (N, N) and last["tokens_per_s"] > 0


def test_a_run_killed_mid_way_and_rerun_writes_the_same_records_whatever_the_batch_size(target, prompts, first_run,
                                                                                         tmp_path):
    out = tmp_path / "synth.jsonl"
    proc = synth(target, out, "--batch-size", "1", "--system-prompts", str(prompts), wait=False)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.05)  # wait-ok: a poll under the 300 s deadline above
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert 3 <= out.read_bytes().count(b"\n") < N, "the run was not killed mid-way"
    again = synth(target, out, "--batch-size", "3", "--system-prompts", str(prompts))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already in" in again.stdout
    assert out.read_bytes() == first_run.read_bytes()
    stats = synthesis_stats.read_stats(out.with_name("synth.stats.json"))
    assert stats.records_out == N and stats.resumed >= 3


def test_another_seed_writes_other_records_and_a_rerun_of_a_full_output_writes_nothing(target, prompts, first_run,
                                                                                         tmp_path):
    out = tmp_path / "seed1.jsonl"
    p = synth(target, out, "--batch-size", "4", "--system-prompts", str(prompts), "--seed", "1", records=6)
    assert p.returncode == 0, p.stdout + p.stderr
    got = lines(out)
    assert len(got) == 6 and all(r["id"].startswith("synth-1-") for r in got)
    theirs = {json.dumps(r["conversations"]) for r in lines(first_run)}
    assert not theirs & {json.dumps(r["conversations"]) for r in got}
    before = out.read_bytes()
    p = synth(target, out, "--batch-size", "4", "--system-prompts", str(prompts), "--seed", "1", records=6)
    assert p.returncode == 0 and out.read_bytes() == before, p.stdout + p.stderr
    changed = synth(target, out, "--batch-size", "4", "--system-prompts", str(prompts), "--seed", "2", records=6)
    assert changed.returncode == 2 and "other options" in changed.stderr and out.read_bytes() == before


def merge(target: Path, out: Path, *sources: Path) -> Path:
    p = call_stage("merge", ["--tokenizer", target, "--out", out, "--workers", "1", *sources])
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def test_the_records_merge_as_one_more_source_and_none_leave_the_merged_set_as_it_was(target, first_run, tmp_path):
    chats = tmp_path / "chats.jsonl"
    chats.write_text("".join(json.dumps({"id": f"c{i}", "conversations": [
        {"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i * 7}"}]}) + "\n"
        for i in range(5)))
    merged = merge(target, tmp_path / "merged" / "train.jsonl", first_run, chats)
    stats = merge_stats.read_stats(merged.with_name("train.stats.json"))
    assert stats.sources["synth"].records == N and stats.sources["chats"].records == 5
    rows = lines(merged)
    assert sum(r["source"] == "synth" for r in rows) == N
    assert all(sum(r["loss_mask"]) > 0 for r in rows)  # the target's answers are learnt
    # switched off (--synthesize 0): an empty output at once, no target loaded, and the same merged set
    off = tmp_path / "off" / "synth.jsonl"
    p = synth(tmp_path / "no-such-target", off, records=0)
    assert p.returncode == 0 and off.read_bytes() == b"", p.stdout + p.stderr
    assert synthesis_stats.read_stats(off.with_name("synth.stats.json")).status == "done"
    alone = merge(target, tmp_path / "alone" / "train.jsonl", chats)
    beside = merge(target, tmp_path / "beside" / "train.jsonl", chats, off)
    assert alone.read_bytes() == beside.read_bytes()


@pytest.mark.parametrize("shape, end", [("llama3", "<|eot_id|>"), ("chatml", "<|im_end|>"),
                                        ("deepseek-v3", "<｜Assistant｜>"), ("kimi-k2", "<|im_end|>"),
                                        ("glm-4.5", "<|assistant|>")])
def test_the_question_prompt_and_the_turns_end_come_from_any_template_shape(shape, end):
    from pipeline.chat.user_turn import question_prompt, user_turn

    template, specials, bos, eos, _ = SHAPES[shape]
    tok = _look_alike(template, specials, bos, eos)
    turn = user_turn(tok, shape, system="be brief")
    assert turn.end_text == end
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 2 plus 3?"},
            {"role": "assistant", "content": "5."}]
    full = tok.apply_chat_template([*chat, {"role": "user", "content": "And 4?"}], tokenize=False,
                                   add_generation_prompt=True)
    prompt = question_prompt(tok, chat, shape)
    assert full.startswith(prompt + "And 4?")  # the question is written where the real one stands
    assert full[len(prompt + "And 4?"):].lstrip().startswith(end)


@pytest.mark.parametrize("template, why", [
    ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] | upper }}\n{% endfor %}", "verbatim"),
    ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }} [/{{ m['role'] }}]{% endfor %}", "not by a special"),
    ("{% for m in messages %}{% if m['role'] == 'user' %}{{ raise_exception('no users') }}{% endif %}{% endfor %}",
     "cannot render"),
])
def test_a_template_a_user_turn_cannot_be_cut_from_is_refused_saying_why(template, why):
    from pipeline.chat.user_turn import UserTurnError, user_turn

    tok = _look_alike(template, ["<|endoftext|>"], None, "<|endoftext|>")
    with pytest.raises(UserTurnError, match=why):
        user_turn(tok, "--model X")


CONTROL = 3  # a control token id of the make-believe tokenizer below
FILTERED = [  # (tokens, ended, loop cut, the question's text, the filter that drops it or None)
    ([10, 11, 12], True, 0, "What is the capital of France?", None),
    ([], True, 0, "", "too_short"),
    ([13], True, 0, " Hi? ", "too_short"),
    (list(range(20, 36)), False, 0, "A question that never ends and goes on", "unfinished"),
    ([1, 2, 3, 1, 2, 3], False, 18, "Why why why why why", "loop"),
    ([4, 5] * 10, True, 0, "so so so so so so so so so so", "loop"),
    ([10, CONTROL, 11], True, 0, "Tell me a story about the sea", "not_text"),
    ([14], True, 0, "What is \ufffd this thing?", "not_text"),
    ([15], True, 0, "What\x07 is this thing?", "not_text"),
    ([16], True, 0, "12 + 34 = ?? 56 * 78 ->", "not_text"),
    ([17], True, 0, "what is the capital of FRANCE", "duplicate"),
    ([18], True, 0, "What is the capital of France, please?", "near_duplicate"),
    ([19], True, 0, "Explain quantum computing to a child.", None),
]


def test_each_filter_drops_what_it_names_and_counts_it_with_an_example(tmp_path):
    from pipeline.events import EventWriter
    from pipeline.regenerate.conversation import Generated
    from pipeline.regenerate.errors import Failure
    from pipeline.regenerate.output import Appender
    from pipeline.regenerate.synthesis.chat import Questions, SynthChat
    from pipeline.regenerate.synthesis.dedup import Seen
    from pipeline.regenerate.synthesis.sink import SynthSink
    from pipeline.regenerate.synthesis.stats import SynthStats

    said: dict[tuple[int, ...], str] = {}

    def gen(tokens, ended, cut, text):
        said[tuple(tokens)] = text
        return Generated(tokens, len(tokens) + cut + ended, ended, cut)

    judge = Questions(frozenset({CONTROL}), min_chars=8, bound=16, temperature=1.0, seen=Seen(0.8))
    stats = SynthStats(options={}, wanted=4, max_asked=100)
    out = tmp_path / "out.jsonl"
    sink = SynthSink(Appender(out, os.open(out, os.O_RDWR | os.O_CREAT | os.O_APPEND)), stats, tmp_path / "s.json",
                     EventWriter(None), judge.seen)
    decode = lambda toks: said[tuple(toks)]  # noqa: E731
    chats = [SynthChat.start(i, i, 0, (), 2 if i == len(FILTERED) + 2 else 1, 8, judge)
             for i in range(len(FILTERED) + 4)]

    def ask(chat, *generated) -> Failure | None:
        try:
            for g in generated:
                chat.take(gen(*g), decode)
        except Failure as f:
            return f
        return None

    for chat, (tokens, ended, cut, text, reason) in zip(chats, FILTERED):
        failure = ask(chat, (tokens, ended, cut, text), ([50 + chat.index], True, 0, f"answer {chat.index}"))
        assert (failure.reason if failure else None) == reason, text
        sink.put(chat.index, (chat, failure) if failure else chat)
    twin, other, two_turns, late = chats[len(FILTERED):]
    # two records written at once ask the same question: the later one goes when it is committed
    for chat in (twin, other):
        assert ask(chat, ([60], True, 0, "Name three rivers in Europe."), ([61], True, 0, "The Rhine.")) is None
    sink.put(twin.index, twin)
    sink.put(other.index, other)
    # a later turn's question that a filter drops ends the record after the turns it has
    assert ask(two_turns, ([62], True, 0, "Which is the longest river in Asia?"), ([63], True, 0, "The Yangtze."),
               (list(range(70, 86)), False, 0, "And which one after that and then")) is None
    assert two_turns.done and two_turns.answered == 1
    sink.put(two_turns.index, two_turns)
    assert ask(late, ([64], True, 0, "A fine question that comes too late?"), ([65], True, 0, "Yes.")) is None
    sink.put(late.index, late)  # the output already holds --synthesize records: surplus
    sink.flush()

    kept = [json.loads(x)["id"] for x in out.read_text().splitlines()]
    assert kept == ["synth-0-0", "synth-0-12", "synth-0-13", "synth-0-15"]
    expected = {}
    for *_, reason in FILTERED:
        if reason:
            expected[reason] = expected.get(reason, 0) + 1
    expected["duplicate"] += 1  # the twin
    assert dict(stats.dropped) == expected
    assert dict(stats.ended_early) == {"unfinished": 1}
    for reason, n in expected.items():  # each shows its first drops (at most 3), the question in each
        shown = stats.examples[reason]
        assert len(shown) == min(n + stats.ended_early[reason], 3), shown
        for example in shown:
            i = int(example.split(":")[0].split(" ")[0].rsplit("-", 1)[1])
            text = FILTERED[i][3] if i < len(FILTERED) else {13: "Name three rivers", 14: "Name three rivers",
                                                             15: "And which one"}[i]
            assert FILTERED[i][4] == reason if i < len(FILTERED) else True
            assert repr(text.strip())[1:12] in example, example
    assert any("synth-0-14:" in e and "synth-0-13's" in e for e in stats.examples["duplicate"])
    assert any(e.startswith("synth-0-15 (turn 2):") for e in stats.examples["unfinished"])
    assert stats.surplus == 1 and sink.kept == 4
    assert stats.to_record().dropped == expected


def test_rows_of_their_own_temperature_draw_from_their_softmax_and_greedy_rows_take_the_argmax():
    import torch

    from pipeline.regenerate.backends.sampler import Sampler

    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0, 1.5, 0.2])
    sampler = Sampler(len(logits), torch.device("cpu"), 0.0, 1.0, per_row=True)
    n = 20000
    seeds = torch.arange(n, dtype=torch.int64) * 7919 + 12345
    temps = torch.where(torch.arange(n) % 4 == 0, 0.0, 0.8)  # every fourth row greedy (an answer)
    draws = sampler(logits.expand(n, -1), seeds, torch.full((n,), 3, dtype=torch.int64), temps)
    assert set(draws[temps == 0].tolist()) == {0}
    sampled = draws[temps > 0]
    freq = torch.bincount(sampled, minlength=len(logits)).double() / len(sampled)
    want = torch.softmax(logits.double() / 0.8, dim=-1)
    assert (freq - want).abs().max() < 0.015, (freq, want)
    alone = [int(sampler(logits[None], seeds[i:i + 1], torch.tensor([3]), temps[i:i + 1])) for i in range(1, 200, 7)]
    assert alone == draws[1:200:7].tolist()  # a row's draw is its own: seed, token index and logits
    other = sampler(logits.expand(n, -1), seeds, torch.full((n,), 4, dtype=torch.int64), temps)
    assert (other[temps > 0] != sampled).float().mean() > 0.3

