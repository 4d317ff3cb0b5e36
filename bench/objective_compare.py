"""Our EAGLE-3 objective against SpecForge 0.2.0's, on the same weights and the same batch.

One tiny Llama-shaped drafter (random weights) is loaded into both `pipeline.drafter`'s
`Eagle3Drafter` and SpecForge's `LlamaForCausalLMEagle3`; one batch (random captured states,
a target head, assistant spans) goes through our `prepare` + `TTTObjective` and through
SpecForge's `TargetHead.preprocess` + `OnlineEagle3Model` (sdpa backend) with its
`Eagle3TrainStrategy` weights (0.8^i). It prints, per TTT step:

  - both losses on SpecForge's scale (cross-entropy summed over the step's rows / (B*T)),
  - both accuracies (top-1 agreement with the target over the step's rows),
  - the relative difference of every gradient with the two losses made equal, and
  - how our own normalisation (KL per counted row of each step) differs from SpecForge's
    (per row of the batch, padding and prompt included): the per-step weights each implies
    and the cosine between the two gradients.

Then `--overfit N` trains both on that one batch for N AdamW steps at `--lr`, each with its
own normalisation and optimiser settings, and prints acc_0 along the way (learning speed).

The loss masks are aligned first: SpecForge counts row t when the token at t (the state's
own token) is an answer token, we count it when the predicted token (t+2+i at step i) is;
the bench gives ours SpecForge's mask shifted by two so both count the same rows.

    python bench/objective_compare.py [--device cuda] [--ttt 7] [--overfit 200]

SpecForge comes from its wheel: unzip specforge-0.2.0-py3-none-any.whl to a folder and pass
`--specforge FOLDER` (or have it installed); it imports triton (`pip install --target DIR
triton` and put DIR on PYTHONPATH on a CPU-only machine). On CPU its triton loss kernel
cannot run, so its reference `_compute_loss` (same file) takes its place, and torch.compile
is disabled (eager).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch

CFG = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 4,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048,
       "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
       "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
DRAFT_VOCAB = 192
DECAY = 0.8


def make_batch(b: int, t: int, seed: int, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(seed)
    v, h = CFG["vocab_size"], CFG["hidden_size"]
    ids = torch.randint(0, v, (b, t), generator=g)
    mask = torch.zeros(b, t, dtype=torch.int64)
    for r in range(b):  # two answer spans per row, like a two-turn chat
        for lo, hi in ((t // 8, t // 2), (5 * t // 8, t)):
            mask[r, lo:hi] = 1
    mask[:, -2:] = 0  # SpecForge's normaliser zeroes the last; the last two make both masks count the same rows
    aux = torch.randn(b, t, 3 * h, generator=g)
    final = torch.randn(b, t, h, generator=g)
    head = torch.randn(v, h, generator=g) * 0.25  # target logits of std ~2: a peaked, learnable target
    embed = torch.randn(v, h, generator=g) * 0.5
    return {k: x.to(device) for k, x in
            {"input_ids": ids, "loss_mask": mask, "aux": aux, "final": final, "head": head, "embed": embed}.items()}


def ours_model(batch: dict, vocab, device: torch.device, seed: int):
    from pipeline.drafter.config import DrafterConfig
    from pipeline.drafter.model import Eagle3Drafter

    dcfg = DrafterConfig.from_target(CFG, DRAFT_VOCAB)
    torch.manual_seed(seed)
    m = Eagle3Drafter(dcfg)
    m.set_vocab(vocab)
    m.load_embeddings(batch["embed"].cpu())
    return m.to(device)


def sf_model(ours, batch: dict, device: torch.device):
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from transformers import LlamaConfig

    cfg = LlamaConfig(**{k: v for k, v in CFG.items() if k not in ("num_hidden_layers", "tie_word_embeddings")},
                      num_hidden_layers=1, draft_vocab_size=DRAFT_VOCAB, pad_token_id=0, tie_word_embeddings=False)
    m = LlamaForCausalLMEagle3(cfg, attention_backend="sdpa")
    with torch.no_grad():
        m.embed_tokens.weight.copy_(batch["embed"].cpu())
        got = m.load_state_dict({k: v.detach().cpu() for k, v in ours.state_dict().items()}, strict=False)
    m.freeze_embedding()
    missing = [k for k in got.missing_keys if k != "embed_tokens.weight"]
    if missing or got.unexpected_keys:
        raise SystemExit(f"weights do not map one to one: missing {missing}, unexpected {got.unexpected_keys}")
    return m.to(device)


def ours_forward(model, batch: dict, vocab, ttt: int, device: torch.device):
    """(CE per step on SpecForge's scale [n], our loss as the trainer forms it, acc per step [n])."""
    from pipeline.train.loss import TargetHead, TTTObjective, prepare

    head = TargetHead(batch["head"], vocab.ids, vocab.t2d, device, torch.float32)
    ours_mask = torch.zeros_like(batch["loss_mask"])
    ours_mask[:, 2:] = batch["loss_mask"][:, :-2]  # our row t counts the token at t+2 (see the module docstring)
    prep = prepare(head, {"input_ids": batch["input_ids"], "loss_mask": ours_mask, "hidden_state": batch["final"],
                          "aux_hidden_state": batch["aux"]}, ttt, torch.float32)
    sums, correct = TTTObjective(model, ttt)(prep)
    b, t = batch["input_ids"].shape
    ce = (sums + prep.entropy_sums()) / (b * t)
    counts = prep.loss_count
    w = DECAY ** torch.arange(ttt, dtype=torch.float32, device=device)
    trainer_loss = (w * sums / counts.clamp(min=1)).sum()
    acc = correct.float() / prep.acc_count.clamp(min=1)
    return ce, trainer_loss, acc, counts


def sf_forward(model, batch: dict, ttt: int):
    """(SpecForge's plosses [n], its weighted loss, its accuracies [n])."""
    from specforge.algorithms.eagle3.model import OnlineEagle3Model
    from specforge.utils import padding

    wrapper = OnlineEagle3Model(draft_model=model, length=ttt, attention_backend="sdpa")
    input_ids = padding(batch["input_ids"], left=False)  # TargetHead.preprocess
    target = padding(batch["final"], left=False) @ batch["head"].T
    loss_mask = batch["loss_mask"][..., None]
    plosses, _rates, acces, *_ = wrapper(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                         target=target, loss_mask=loss_mask, hidden_states=batch["aux"])
    loss = sum(DECAY ** i * p for i, p in enumerate(plosses))
    return torch.stack([p.detach() for p in plosses]), loss, torch.stack([a.detach() for a in acces])


def grads(model, loss) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _flat(g: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([g[n].flatten().double() for n in names])


def overfit(kind: str, model, batch: dict, vocab, ttt: int, steps: int, lr: float, device: torch.device) -> list:
    """acc_0 every few steps of AdamW on this one batch, each trainer with its own settings."""
    params = [p for p in model.parameters() if p.requires_grad]
    betas = (0.9, 0.95) if kind == "ours" else (0.9, 0.999)  # ours: loop.py; SpecForge: BF16Optimizer's AdamW
    opt = torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=0.0)
    trail = []
    for s in range(steps + 1):
        if kind == "ours":
            _ce, loss, acc, _n = ours_forward(model, batch, vocab, ttt, device)
        else:
            _p, loss, acc = sf_forward(model, batch, ttt)
        if s % max(1, steps // 10) == 0 or s == steps:
            trail.append((s, float(acc[0]), float(acc[-1])))
        if s == steps:
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
    return trail


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--specforge", type=Path, default=None, help="folder holding the unzipped specforge package")
    p.add_argument("--ttt", type=int, default=7)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overfit", type=int, default=0, help="AdamW steps on the one batch for each trainer (0: skip)")
    p.add_argument("--lr", type=float, default=1e-3)
    return p.parse_args()


def import_specforge(device: torch.device) -> bool:
    """SpecForge made importable and runnable on `device`; False (the reason printed) when it is not there."""
    if device.type == "cpu":
        import torch._dynamo as dynamo

        dynamo.config.disable = True  # SpecForge's torch.compile'd helpers run eagerly
    try:
        import specforge.algorithms.eagle3.model as sfm
        from specforge.core.loss import _compute_loss
    except Exception as e:  # noqa: BLE001 - the reason is the result
        print(f"specforge not importable: {type(e).__name__}: {e}")
        return False
    if device.type == "cpu":
        class ReferenceLoss:  # its triton kernel needs a GPU; the reference is the same file's definition
            @staticmethod
            def apply(logits, target_p, position_mask):  # noqa: ANN001, ANN205
                return _compute_loss(logits, target_p, position_mask)

        sfm.LogSoftmaxLoss = ReferenceLoss
    return True


def compare(ours, sf, batch: dict, vocab, ttt: int, device: torch.device) -> torch.Tensor:
    """Both objectives on the one batch: losses, accuracies and gradients per TTT step, printed;
    returns SpecForge's loss."""
    ce, trainer_loss, acc, n_rows = ours_forward(ours, batch, vocab, ttt, device)
    w = DECAY ** torch.arange(ttt, dtype=torch.float32, device=device)
    g_ours_sf_scale = grads(ours, (w * ce).sum())
    g_ours = grads(ours, ours_forward(ours, batch, vocab, ttt, device)[1])
    plosses, sf_loss, sf_acc = sf_forward(sf, batch, ttt)
    g_sf = grads(sf, sf_loss)

    print("\nstep  ours CE/(B*T)  SpecForge ploss  rel.diff   ours acc  SF acc   rows counted")
    for i in range(ttt):
        rd = abs(float(ce[i]) - float(plosses[i])) / max(abs(float(plosses[i])), 1e-12)
        print(f"{i:>4}  {float(ce[i]):>13.6f}  {float(plosses[i]):>15.6f}  {rd:>8.1e}   {float(acc[i]):>8.4f}  "
              f"{float(sf_acc[i]):>6.4f}   {int(n_rows[i])}")
    print(f"weighted loss: ours (SpecForge's scale) {float((w * ce).sum()):.6f}, SpecForge {float(sf_loss):.6f}")

    names = [n for n in g_sf if n in g_ours_sf_scale]
    worst = max(names, key=lambda n: float((g_ours_sf_scale[n] - g_sf[n]).norm() / g_sf[n].norm().clamp(min=1e-30)))
    x, y = _flat(g_ours_sf_scale, names), _flat(g_sf, names)
    print(f"gradients, same loss scale: relative difference {float((x - y).norm() / y.norm()):.2e} over "
          f"{len(names)} tensors (worst {worst}: "
          f"{float((g_ours_sf_scale[worst] - g_sf[worst]).norm() / g_sf[worst].norm()):.2e})")
    z = _flat(g_ours, names)
    cos = float(torch.dot(z, y) / (z.norm() * y.norm()))
    print(f"our trainer's normalisation (KL per counted row of each step) vs SpecForge's (per row of the batch): "
          f"gradient norm ratio {float(z.norm() / y.norm()):.2f}, cosine {cos:.4f}")
    b, t = batch["input_ids"].shape
    per_step = [(b * t) / max(int(r), 1) for r in n_rows.tolist()]
    print("  i.e. ours weighs step i by 0.8^i x (B*T)/rows_i relative to SpecForge: "
          + " ".join(f"{s:.2f}" for s in per_step))
    return sf_loss


def overfit_figures(a: argparse.Namespace, batch: dict, vocab, device: torch.device) -> None:
    """Both trainers from the same initial weights on the one batch, acc_0 and the last step's side by side."""
    print(f"\noverfit one batch, {a.overfit} AdamW steps at lr {a.lr} (clip 0.5), acc_0 / acc_{a.ttt - 1}:")
    trails = {}
    for kind, model in (("ours", ours_model(batch, vocab, device, a.seed)), ("specforge", None)):
        if model is None:
            model = sf_model(ours_model(batch, vocab, device, a.seed), batch, device)
        trails[kind] = overfit(kind, model, batch, vocab, a.ttt, a.overfit, a.lr, device)
    for (s, a0, al), (_s, b0, bl) in zip(trails["ours"], trails["specforge"]):
        print(f"  step {s:>5}: ours {a0:.3f} / {al:.3f}   specforge {b0:.3f} / {bl:.3f}")


def main() -> int:
    a = parse_args()
    if a.specforge:
        sys.path.insert(0, str(a.specforge))
    device = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if not import_specforge(device):
        return 2
    from pipeline.drafter import vocab as dvocab

    batch = make_batch(a.batch, a.tokens, a.seed, device)
    counts = torch.bincount(batch["input_ids"][batch["loss_mask"].bool()].cpu(), minlength=CFG["vocab_size"])
    top = (batch["final"] @ batch["head"].T).argmax(-1).flatten().cpu()
    counts += torch.bincount(top, minlength=CFG["vocab_size"])  # most target top tokens in the draft vocabulary
    vocab = dvocab.from_counts(counts, DRAFT_VOCAB)
    ours = ours_model(batch, vocab, device, a.seed)
    sf = sf_model(ours, batch, device)
    b, t = batch["input_ids"].shape
    print(f"device {device}, batch {b} x {t} tokens, TTT {a.ttt}, drafter H {CFG['hidden_size']}, "
          f"vocab {CFG['vocab_size']} -> draft {DRAFT_VOCAB}; answer-token share {batch['loss_mask'].float().mean():.2f}")
    sf_loss = compare(ours, sf, batch, vocab, a.ttt, device)
    if a.overfit:
        overfit_figures(a, batch, vocab, device)
    return 0 if math.isfinite(float(sf_loss)) else 1


if __name__ == "__main__":
    sys.exit(main())
