"""The fused, chunked objective is the EAGLE-3 objective written out: the same loss, accuracy
and gradients on every TTT step, whatever the chunk size, with the drafter compiled or not,
with or without the loader's precomputed positions; and what fails to compile runs eagerly."""

from __future__ import annotations

import pytest
import torch

from pipeline.drafter import vocab as dvocab
from pipeline.drafter.config import DrafterConfig
from pipeline.drafter.model import Eagle3Drafter, TTTCache

TARGET = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 8,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
          "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
DRAFT_VOCAB = 40
STEPS = 4


def _setup(dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    cfg = DrafterConfig.from_target(TARGET, DRAFT_VOCAB)
    torch.manual_seed(seed)
    drafter = Eagle3Drafter(cfg)
    v, h = TARGET["vocab_size"], TARGET["hidden_size"]
    drafter.load_embeddings(torch.randn(v, h, generator=g))
    vocab = dvocab.from_counts(torch.randint(0, 50, (v,), generator=g), DRAFT_VOCAB)
    drafter.set_vocab(vocab)
    with torch.no_grad():
        for p in drafter.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)  # norms away from 1: their gradients count too
    head_w = torch.randn(v, h, generator=g) * 0.6
    b, t = 3, 29
    mask = torch.rand(b, t, generator=g) < 0.6
    mask[2, 20:] = False  # a padded row
    batch = {"input_ids": torch.randint(0, v, (b, t), generator=g), "loss_mask": mask.to(torch.uint8),
             "hidden_state": torch.randn(b, t, h, generator=g), "aux_hidden_state": torch.randn(b, t, 3 * h, generator=g)}
    return drafter.to(dtype), vocab, head_w.to(dtype), {k: (v.to(dtype) if v.is_floating_point() else v)
                                                        for k, v in batch.items()}


def written_out(drafter: Eagle3Drafter, vocab, head_w: torch.Tensor, batch: dict, steps: int):
    """The objective as its docstring states it, over whole [B,T,V] tensors: (KL sums [n], correct [n],
    loss rows [n], accuracy rows [n])."""
    ids, mask, final = batch["input_ids"], batch["loss_mask"].bool(), batch["hidden_state"]
    b, t = ids.shape
    full = final @ head_w.T
    probs = torch.softmax((final @ head_w[vocab.ids].T).double(), -1)
    entropy = -(probs * probs.log()).sum(-1)
    top = full.argmax(-1)
    in_draft = vocab.t2d[top]
    cache, hidden = TTTCache(), batch["aux_hidden_state"]
    pos = torch.arange(t).expand(b, t)
    sums, correct, loss_rows, acc_rows = [], [], [], []
    for i in range(steps):
        shifted = torch.zeros_like(ids)
        shifted[:, :t - 1 - i] = ids[:, 1 + i:]
        logits, hidden = drafter(shifted, hidden, pos + i, cache)
        n = t - 2 - i  # rows t whose token t+2+i exists
        p, z = probs[:, 1 + i:1 + i + n], logits[:, :n].double()
        acc = mask[:, 2 + i:2 + i + n]
        counted = acc & in_draft[:, 1 + i:1 + i + n]
        row = -(p * torch.log_softmax(z, -1)).sum(-1) - entropy[:, 1 + i:1 + i + n]
        sums.append((row * counted).sum())
        pred = drafter.draft_to_target(logits[:, :n].argmax(-1))
        correct.append(((pred == top[:, 1 + i:1 + i + n]) & acc).sum())
        loss_rows.append(counted.sum())
        acc_rows.append(acc.sum())
    return torch.stack(sums), torch.stack(correct), torch.stack(loss_rows), torch.stack(acc_rows)


def ours(drafter, vocab, head_w, batch, steps, kernels=None, with_positions=False, merge=None):
    from pipeline.drafter.ttt_attention import EAGER_MERGE
    from pipeline.train.loss import TargetHead, TTTObjective, prepare, scored_positions
    from pipeline.train.loss_kernels import EAGER_KERNELS

    kernels, merge = kernels or EAGER_KERNELS, merge or EAGER_MERGE
    head = TargetHead(head_w, vocab.ids, vocab.t2d, torch.device("cpu"), head_w.dtype, kernels)
    if with_positions:
        batch = {**batch, "scored": scored_positions(batch["loss_mask"])}
    prep = prepare(head, batch, steps, head_w.dtype)
    sums, correct = TTTObjective(drafter, steps, kernels, merge)(prep)
    return sums, correct, prep


def broken_compile(fn, **_kw):
    """torch.compile where it cannot compile (no Triton): the compiled function raises when called."""
    def run(*_a):
        raise RuntimeError("triton not found\nsecond line")
    return run


def close(got: torch.Tensor, want: torch.Tensor, rel: float) -> bool:
    """Equal to within `rel` of the largest value, elementwise."""
    return float((got.detach() - want.detach()).abs().max()) <= rel * float(want.detach().abs().max())


def grads(drafter: Eagle3Drafter, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    drafter.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in drafter.named_parameters()}


@pytest.mark.parametrize("chunk", [1 << 27, 3 * DRAFT_VOCAB], ids=["one-chunk", "chunks-of-3-rows"])
def test_the_objective_equals_the_written_out_definition_on_every_ttt_step(chunk, monkeypatch):
    """In fp64, so a difference is another objective, not rounding (a row more or less moves a sum
    by about 1): every step's KL sum, correct count, row counts, and every parameter's gradient of
    the trainer's weighted loss."""
    from pipeline.train import head_loss
    from pipeline.train.loss import weights

    monkeypatch.setattr(head_loss, "CHUNK_ELEMENTS", chunk)
    drafter, vocab, head_w, batch = _setup(torch.float64)
    want_sums, want_correct, want_rows, want_acc = written_out(drafter, vocab, head_w, batch, STEPS)
    w = weights(STEPS, torch.device("cpu")).double()
    want_grads = grads(drafter, (w * want_sums / want_rows.clamp(min=1)).sum())
    sums, correct, prep = ours(drafter, vocab, head_w, batch, STEPS, with_positions=chunk < 1000)
    assert torch.equal(prep.loss_count, want_rows.float()) and torch.equal(prep.acc_count, want_acc.float())
    assert want_rows.min() > 0 and (want_acc > want_rows).any()  # rows whose target top is outside the vocab
    assert close(sums, want_sums, 1e-12)
    assert torch.equal(correct, want_correct)
    got_grads = grads(drafter, (w * sums / prep.loss_count.double().clamp(min=1)).sum())
    assert set(got_grads) == set(want_grads)
    for name, g in want_grads.items():
        assert close(got_grads[name], g, 1e-10), name


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fp32_objective_matches_the_definition_and_validation_reports_the_same_loss(compiled, monkeypatch):
    """The dtype CPU training runs in, with every part CUDA compiles compiled (the loss's passes,
    the TTT attention's merge, the layer around it): the definition's sums, counts and gradients;
    under no_grad (validation) the same sums and counts, with no gradient work.

    Compiled here means traced by dynamo and split into forward and backward by AOT autograd,
    as on CUDA, then run by aot_eager: the CPU's C++ code generation is not what CUDA runs, and
    for these dozen graphs it took 230 s of a loaded 2-core machine (inductor's own kernels are
    held to eager by test_compiled_kernels_match_eager_on_bf16_rows_of_every_count)."""
    import functools

    from pipeline.train.drafter_compile import training_kernels
    from pipeline.train.loss import weights

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))

    drafter, vocab, head_w, batch = _setup(torch.float32, seed=1)
    lines: list[str] = []
    kernels, merge = training_kernels(drafter, compiled, torch.float32, lines.append)
    want_sums, want_correct, want_rows, _ = written_out(drafter, vocab, head_w, batch, STEPS)
    w = weights(STEPS, torch.device("cpu"))
    want_grads = grads(drafter, (w * want_sums.float() / want_rows.clamp(min=1)).sum())
    sums, correct, prep = ours(drafter, vocab, head_w, batch, STEPS, kernels, merge=merge)
    assert close(sums, want_sums.float(), 1e-5)
    assert torch.equal(correct, want_correct)
    got_grads = grads(drafter, (w * sums / prep.loss_count.clamp(min=1)).sum())
    for name, g in want_grads.items():
        assert close(got_grads[name], g, 1e-4), name
    with torch.no_grad():
        v_sums, v_correct, _ = ours(drafter, vocab, head_w, batch, STEPS, kernels, merge=merge)
    assert not v_sums.requires_grad
    assert torch.allclose(v_sums, sums.detach(), rtol=1e-6, atol=1e-6) and torch.equal(v_correct, correct)
    assert kernels.compiled == merge.compiled == compiled and not lines  # nothing fell back to eager
    assert ("before_attention" in vars(drafter.midlayer)) == compiled  # the layer runs compiled too


def test_a_drafter_that_fails_to_compile_trains_eagerly_with_one_warning(monkeypatch):
    from pipeline.train import drafter_compile

    monkeypatch.setattr(drafter_compile.torch, "compile", broken_compile)
    drafter, vocab, head_w, batch = _setup(torch.float32, seed=1)
    lines: list[str] = []
    kernels, merge = drafter_compile.training_kernels(drafter, True, torch.float32, lines.append)
    assert not merge.compiled and "before_attention" not in vars(drafter.midlayer)
    assert len(lines) == 1 and "the drafter's layer" in lines[0] and "--no-compile-loss" in lines[0]
    sums, _correct, _prep = ours(drafter, vocab, head_w, batch, STEPS, kernels, merge=merge)
    want_sums, *_ = written_out(drafter, vocab, head_w, batch, STEPS)
    assert close(sums, want_sums.float(), 1e-5)


def test_compiled_kernels_match_eager_on_bf16_rows_of_every_count():
    """What CUDA runs by default: one dynamic-shape graph for every chunk's row count, equal to the
    eager math to fp32 rounding on bf16 logits."""
    from pipeline.train.loss_kernels import EAGER_KERNELS, LossKernels

    fused = LossKernels(compile=True)
    torch.manual_seed(0)
    for rows in (40, 33, 7):
        z = (torch.randn(rows, 300) * 3).bfloat16()
        tl = (torch.randn(rows, 300) * 2).bfloat16()
        w = (torch.rand(rows) < 0.7).float()
        (lse, ent), (lse_e, ent_e) = fused.target_stats(tl), EAGER_KERNELS.target_stats(tl)
        assert lse.dtype == torch.float32 and torch.allclose(lse, lse_e, atol=1e-5) and torch.allclose(ent, ent_e,
                                                                                                       atol=1e-5)
        got, want = fused.head_grad(z, tl, lse, w), EAGER_KERNELS.head_grad(z, tl, lse_e, w)
        assert torch.allclose(got[0], want[0], atol=1e-4, rtol=1e-5) and torch.equal(got[1], want[1])
        assert got[2].dtype == torch.bfloat16 and torch.allclose(got[2].float(), want[2].float(), atol=1e-3)
        assert not got[2][w == 0].any()  # rows outside the loss get no gradient
        fwd = fused.head_forward(z, tl, lse)
        assert torch.allclose(fwd[0], want[0], atol=1e-4, rtol=1e-5) and torch.equal(fwd[1], want[1])
    assert fused.compiled


def test_loss_kernels_that_fail_to_compile_fall_back_to_eager_with_one_warning(monkeypatch):
    from pipeline.train import loss_kernels

    monkeypatch.setattr(loss_kernels.torch, "compile", broken_compile)
    lines: list[str] = []
    kernels = loss_kernels.LossKernels(compile=True, log=lines.append)
    z = torch.randn(3, 5)
    for _ in range(3):
        lse, entropy = kernels.target_stats(z)
    assert torch.allclose(lse, torch.logsumexp(z, -1))
    assert not kernels.compiled
    assert len(lines) == 1 and "RuntimeError: triton not found" in lines[0] and "--no-compile-loss" in lines[0]
