"""Tree drafts verified as SGLang verifies them: one target forward under a tree mask, the
longest accepted path plus the bonus token committed, output always equal to greedy.

A tree here is either built by hand (so the accepted path is known from a brute-force
check: plain forwards over each branch, no mask, no cache) or by the exported drafter.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pipeline.evaluate.drafter import ChainDrafter, load_exported
from pipeline.evaluate.speculative import greedy, speculate, speculate_tree
from pipeline.evaluate.tree import Candidates, Setting, Tree, accept, build_tree, parse_setting
from pipeline.evaluate.tree_drafter import TreeDrafter
from pipeline.evaluate.verifier import Target

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_evaluate as base  # noqa: E402
from test_evaluate import MAX_NEW, VOCAB, Oracle  # noqa: E402

one_thread, tiny, target = base.one_thread, base.tiny, base.target  # the same fixtures, one definition

PROMPT = [50, 3, 100, 7]  # its greedy answer varies (some prompts' answer repeats one token, which hides bugs)


@pytest.fixture(scope="module")
def ref(target) -> list[int]:
    tokens = greedy(target, PROMPT, MAX_NEW).tokens
    assert len(set(tokens)) > MAX_NEW // 2, f"the greedy answer {tokens} repeats itself: pick another PROMPT"
    return tokens


def plain_next(target: Target, ids: list[int]) -> int:
    """The target's greedy token after `ids` from one full forward: no cache, no mask."""
    with torch.inference_mode():
        logits = target.model(input_ids=torch.tensor([ids]), use_cache=False).logits
    return int(logits[0, -1].argmax())


def path_to(tree: Tree, node: int) -> list[int]:
    nodes = []
    while node > 0:
        nodes.append(node)
        node = tree.parent[node]
    return nodes[::-1]


def brute_force(target: Target, seq: list[int], tree: Tree) -> tuple[list[int], int]:
    """The deepest node whose whole branch is the target's greedy continuation, by forwards
    over each branch on its own; and the target's token after it."""
    best: list[int] = []
    for node in range(1, len(tree.tokens)):
        nodes = path_to(tree, node)
        if not nodes or tree.parent[nodes[0]] != 0:
            continue
        branch = [tree.tokens[i] for i in nodes]
        if all(plain_next(target, seq + branch[:j]) == branch[j] for j in range(len(branch))) and len(nodes) > len(best):
            best = nodes
    return best, plain_next(target, seq + [tree.tokens[i] for i in best])


class OracleTree:
    """Trees around the target's greedy continuation: the right token sits among `width`
    wrong siblings at each depth (at rank `rank`), and goes wrong from depth `right` on."""

    def __init__(self, reference: list[int], right: int, width: int = 0, rank: int = 0) -> None:
        self.ref, self.right, self.width, self.rank = reference, right, width, rank

    def reset(self) -> None:
        pass

    def propose_tree(self, seq, aux, s: Setting) -> Tree:
        assert aux.shape[0] == len(seq) - 1
        done = len(seq) - len(PROMPT)
        want = (self.ref + [0] * (s.num_steps + 1))[done:done + s.num_steps]
        tokens, parent, depth = [seq[-1]], [-1], [0]
        on_path = 0
        for d, t in enumerate(want, 1):
            good = t if d <= self.right else (t + 1) % VOCAB
            siblings = [(t + 2 + j) % VOCAB for j in range(self.width)]
            siblings.insert(min(self.rank, len(siblings)), good)
            here = on_path
            for tok in siblings:
                tokens.append(tok)
                parent.append(here)
                depth.append(d)
                if tok == good:
                    on_path = len(tokens) - 1
        return Tree(tokens, parent, depth)


@pytest.mark.parametrize("right", [0, 1, 3])
def test_a_topk_1_tree_accepts_and_outputs_exactly_what_the_chain_does(target, ref, right):
    chain = speculate(target, Oracle(PROMPT, ref, right), PROMPT, MAX_NEW, 3)
    tree = speculate_tree(target, OracleTree(ref, right), PROMPT, MAX_NEW, Setting(3, 1, 4))
    assert tree.tokens == chain.tokens == ref
    assert tree.accepted == chain.accepted and tree.forwards == chain.forwards
    assert set(chain.accepted[:-1]) == {right}


@pytest.mark.parametrize("width,rank,right", [(2, 0, 3), (3, 2, 2), (1, 1, 1)])
def test_a_wide_tree_commits_its_right_branch_and_output_stays_greedy(target, ref, width, rank, right):
    got = speculate_tree(target, OracleTree(ref, right, width, rank), PROMPT, MAX_NEW, Setting(3, width + 1, 12))
    assert got.tokens == ref
    assert set(got.accepted[:-1]) == {right}


def test_trees_decode_the_same_with_full_forwards_as_with_the_kv_cache(tiny, target, ref):
    full = Target(tiny["target"], "cpu", torch.float32, kv_cache=False)
    oracle = OracleTree(ref, 2, width=2, rank=1)
    cached = speculate_tree(target, oracle, PROMPT, MAX_NEW, Setting(3, 3, 10))
    uncached = speculate_tree(full, oracle, PROMPT, MAX_NEW, Setting(3, 3, 10))
    assert uncached.tokens == cached.tokens == ref and uncached.accepted == cached.accepted


def test_a_hand_built_tree_accepts_the_path_a_brute_force_check_finds(target, ref):
    seq = PROMPT + ref[:3]
    good = ref[3:7]
    # root -> [wrong, good0 -> [good1 -> [wrong, good2 -> [good3]], wrong], wrong-deep chain]
    tokens = [seq[-1], (good[0] + 5) % VOCAB, good[0], good[1], (good[1] + 1) % VOCAB, (good[2] + 3) % VOCAB, good[2],
              good[3], (good[0] + 9) % VOCAB, good[1]]
    parent = [-1, 0, 0, 2, 2, 3, 3, 6, 0, 8]
    depth = [0, 1, 1, 2, 2, 3, 3, 4, 1, 2]
    tree = Tree(tokens, parent, depth)
    want = brute_force(target, seq, tree)
    assert want[0] == [2, 3, 6, 7]  # the hand-built right branch
    target.forget()
    target.step(seq, keep=1)  # the cache holds the sequence, as it does mid-decoding
    choice = target.verify_tree(seq, tree).tolist()
    # every node, accepted or not, is scored as if its branch alone followed the sequence
    assert choice == [plain_next(target, seq + [tokens[i] for i in path_to(tree, n)]) for n in range(len(tokens))]
    got = accept(tree, choice)
    assert got == want
    target.commit(got[0])
    after = seq + [tokens[i] for i in got[0]] + [got[1]]
    assert int(target.step(after, keep=1).next_ids[-1]) == plain_next(target, after)
    target.forget()


@pytest.fixture(scope="module")
def sharp_target(tmp_path_factory) -> Target:
    """A random target whose attention is sharp enough that a token's position changes its
    prediction (the evaluation target's small init barely looks at positions)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("sharp") / "target"
    LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=8,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                 initializer_range=0.3, eos_token_id=VOCAB + 5)).save_pretrained(folder)
    return Target(folder, "cpu", torch.float32)


@pytest.mark.parametrize("which", ["target", "sharp_target"])
@pytest.mark.parametrize("cut", [0, 3, 9])
def test_every_tree_node_is_scored_as_if_its_branch_alone_followed_the_sequence(request, ref, cut, which):
    target = request.getfixturevalue(which)
    seq = PROMPT + ref[:cut]
    tree = Tree([seq[-1], 40, 41, 42, 43, 44, 45, 46, 47, 48], [-1, 0, 0, 1, 2, 3, 3, 6, 0, 8],
                [0, 1, 1, 2, 2, 3, 3, 4, 1, 2])
    target.forget()
    target.step(seq, keep=1)
    choice = target.verify_tree(seq, tree).tolist()
    target.forget()
    assert choice == [plain_next(target, seq + [tree.tokens[i] for i in path_to(tree, n)]) for n in range(10)]


def test_the_exported_drafter_builds_a_topk_1_tree_that_is_its_chain(tiny, target, ref):
    model = load_exported(tiny["drafter"], tiny["target"], target.capture, "cpu", torch.float32)
    chain, tree = ChainDrafter(model), TreeDrafter(model)
    for cut in (0, 4, 9):
        seq = PROMPT + ref[:cut]
        aux = target.step(seq, keep=1).aux[: len(seq) - 1].clone()
        want = chain.propose(seq, aux, 5)
        got = tree.propose_tree(seq, aux, Setting(5, 1, 6))
        assert got.tokens[1:] == want and got.parent == [-1, 0, 1, 2, 3, 4]


@pytest.mark.parametrize("label", ["2,2,4", "3,4,8", "5,4,16", "4,8,32"])
def test_drafter_trees_of_every_shape_decode_to_the_greedy_output(tiny, target, ref, label):
    model = load_exported(tiny["drafter"], tiny["target"], target.capture, "cpu", torch.float32)
    s = parse_setting(label, 16, 16, 64)
    got = speculate_tree(target, TreeDrafter(model), PROMPT, MAX_NEW, s)
    assert got.tokens == ref


def test_selection_keeps_the_best_nodes_and_links_each_to_its_parent():
    # top-2 over 3 steps: step 0 [a .6, b .3]; step 1 children of a then b; frontier picks a's two
    cand = Candidates(
        scores=[torch.tensor([0.6, 0.3]), torch.tensor([0.36, 0.12, 0.03, 0.27]), torch.tensor([0.3, 0.02, 0.1, 0.05])],
        tokens=[torch.tensor([10, 11]), torch.tensor([20, 21, 22, 23]), torch.tensor([30, 31, 32, 33])],
        parents=[torch.tensor([-1, 0, 1]), torch.tensor([2, 5]), torch.tensor([7, 8])],
    )
    tree = build_tree(99, cand, topk=2, num_draft_tokens=6)
    # kept: a .6, b .3, 20 .36, 23 .27, 30 .3 (child of frontier 0 = candidate 2, token 20)
    assert tree.tokens == [99, 10, 11, 20, 23, 30]
    assert tree.parent == [-1, 0, 0, 1, 2, 3]
    assert tree.depth == [0, 1, 1, 2, 2, 3]


def test_settings_follow_sglangs_rules():
    assert parse_setting("7,8,32", 16, 16, 64) == Setting(7, 8, 32)
    for bad, why in [("3,1,6", "write 3,1,4"), ("1,2,9", "between 2 and 3"), ("3,1", "STEPS,TOPK"),
                     ("0,1,1", "num_steps")]:
        with pytest.raises(ValueError, match=why):
            parse_setting(bad, 16, 16, 64)
