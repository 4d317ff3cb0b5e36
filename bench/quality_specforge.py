"""bench/quality's SpecForge arm: SpecForge 0.2.0's own EAGLE-3 training on our store, saved for our export.

Run under torch.distributed.run (SpecForge's trainer needs a process group), one process:

    python -m torch.distributed.run --nproc-per-node 1 bench/quality_specforge.py \
        --store STORE --target TARGET --out RUN --steps N --batch-tokens B --max-len L \
        --lr LR --warmup-ratio W --ttt-length 7 --draft-vocab V --seed S

The step is SpecForge's, assembled as bench/train.py's `role_specforge` assembles it
(`OnlineEagle3Model` over its `LlamaForCausalLMEagle3`, `Eagle3TrainStrategy` with the frozen
`TargetHead` over stored final hidden states, `BF16Optimizer` with its cosine warmup schedule,
FSDP under `TrainerCore`). What it is fed is ours, so the two trainers differ only in their
objective, model code and optimiser: the same batches in the same order (pipeline.train's own
batch plan over the same store and seed), the same draft vocabulary (pipeline.train's
selection from the store's loss tokens) and the same initial lm_head (the target's rows of
that vocabulary). SpecForge's weight names are SGLang's, which are also our checkpoint's, so
RUN/checkpoint/ (config.json from our DrafterConfig, model.safetensors) is what
`pipeline.export --checkpoint` reads. Prints one `RESULT {json}` line last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

import torch  # noqa: E402

import train as bench_train  # noqa: E402  (bench/train.py: rank, device and port helpers)

RESULT = "RESULT "
SF_CONFIG_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                  "head_dim", "max_position_embeddings", "rms_norm_eps", "hidden_act", "rope_theta",
                  "rope_scaling", "rope_parameters")


def _cpu_loss_stand_in() -> str:
    """On a CPU, SpecForge's one GPU-only piece, its Triton loss kernel, becomes its own PyTorch reference.

    `specforge/core/loss.py` imports triton at the top and computes the soft cross-entropy in a
    Triton kernel; beside it sits `_compute_loss`, the same formula in PyTorch. A stand-in
    `triton` module lets the file import, and the kernel's autograd Function is swapped for that
    reference, so --small runs the rest of SpecForge's step (model, TTT, masks, optimiser) as is.
    """
    import types

    import importlib.util

    if importlib.util.find_spec("triton") is None:
        import torch._dynamo.repro.after_dynamo  # noqa: F401  (torch.compile's imports, made first: no triton)
        import torch._inductor.compile_fx  # noqa: F401

        class _Any(types.ModuleType):
            def __getattr__(self, name):
                return self

            def __call__(self, *args, **kwargs):
                return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else self

        stub = _Any("triton")
        sys.modules["triton"] = sys.modules["triton.language"] = stub
        try:
            import specforge.core.loss as sf_loss
        finally:  # torch must go on seeing no triton
            del sys.modules["triton"], sys.modules["triton.language"]
    import specforge.algorithms.eagle3.model as sf_model
    import specforge.core.loss as sf_loss

    reference = getattr(sf_loss._compute_loss, "_torchdynamo_orig_callable", sf_loss._compute_loss)

    class ReferenceLoss:
        @staticmethod
        def apply(logits, target_p, position_mask):
            return reference(logits, target_p, position_mask)

    sf_model.LogSoftmaxLoss = ReferenceLoss
    return "SpecForge's Triton loss kernel replaced by its PyTorch reference _compute_loss (CPU)"


def _imports(device: str):
    """SpecForge's pieces, or the reason they cannot be had."""
    note = None
    try:
        if device == "cpu":
            note = _cpu_loss_stand_in()
        from specforge.algorithms.eagle3.model import OnlineEagle3Model
        from specforge.distributed import init_distributed
        from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
        from specforge.modeling.target.target_head import TargetHead
        from specforge.optimizer import BF16Optimizer
        from specforge.runtime.contracts import TrainBatch
        from specforge.training.backend import FSDPTrainingBackend, ParallelConfig
        from specforge.training.controller import TrainerCore
        from specforge.training.strategies.base import Eagle3TrainStrategy
    except Exception as e:  # noqa: BLE001 - any import failure is the reason this arm has no figure
        return None, f"specforge not importable: {type(e).__name__}: {e}"
    return dict(OnlineEagle3Model=OnlineEagle3Model, init_distributed=init_distributed,
                LlamaForCausalLMEagle3=LlamaForCausalLMEagle3, TargetHead=TargetHead, BF16Optimizer=BF16Optimizer,
                TrainBatch=TrainBatch, FSDPTrainingBackend=FSDPTrainingBackend, ParallelConfig=ParallelConfig,
                TrainerCore=TrainerCore, Eagle3TrainStrategy=Eagle3TrainStrategy, note=note), None


class _OneProcess:
    """pipeline.train's reductions for a single process (SpecForge owns the process group here)."""

    rank, world_size = 0, 1

    @staticmethod
    def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
        return t


def our_plan(a: argparse.Namespace):
    """pipeline.train's store, held-out slice, batch plan, step schedule and draft vocabulary for
    these options (train's defaults for the held-out share and the vocabulary's source), so both
    trainers see the same samples in the same order and predict over the same vocabulary."""
    from pipeline.drafter import vocab as dvocab
    from pipeline.drafter.config import DrafterConfig
    from pipeline.target.config import read_config
    from pipeline.train.data import BatchPlan, StepDataset, open_store, split_validation
    from types import SimpleNamespace

    from pipeline.train.loop import Options
    from pipeline.train.schedule import build_schedule
    from pipeline.train.setup import val_count, vocab_counts

    opts = Options(store=a.store, target=a.target, out=a.out, draft_vocab=a.draft_vocab, steps=a.steps,
                   batch_tokens=a.batch_tokens, max_len=a.max_len, seed=a.seed)
    store = open_store(a.store, a.target, checksums="none")
    cfg = read_config(a.target, "--target")
    dcfg = DrafterConfig.from_target(cfg, a.draft_vocab)
    train_pos, val_pos = split_validation(store.samples, val_count(opts, store.samples), a.seed)
    counts, _source = vocab_counts(SimpleNamespace(opts=opts, dist=_OneProcess, source=store, dcfg=dcfg,
                                                   train_pos=train_pos, val_pos=val_pos, log=print))
    vocab = dvocab.from_counts(counts, dcfg.draft_vocab_size)
    plan = BatchPlan(batch_tokens=a.batch_tokens, batch_size=None, max_len=a.max_len, world_size=1, seed=a.seed)
    plans, schedule = build_schedule(store.lengths, train_pos, plan, None, a.steps)
    return cfg, dcfg, vocab, StepDataset(store, schedule, plans, 0, a.max_len)


def sf_batch(b: dict, device: torch.device, multiple: int) -> dict:
    """Our collated batch in SpecForge's offline names and dtype (bf16), right-padded to a multiple of `multiple`."""
    ids, mask, final, aux = b["input_ids"], b["loss_mask"], b["hidden_state"], b["aux_hidden_state"]
    t = ids.shape[1]
    pad = (-t) % multiple
    if pad:
        ids = torch.nn.functional.pad(ids, (0, pad))
        mask = torch.nn.functional.pad(mask, (0, pad))
        final = torch.nn.functional.pad(final, (0, 0, 0, pad))
        aux = torch.nn.functional.pad(aux, (0, 0, 0, pad))
    attn = (torch.arange(ids.shape[1])[None, :] < b["lengths"][:, None]).to(torch.int64)
    return {"input_ids": ids.to(device), "attention_mask": attn.to(device), "loss_mask": mask.to(torch.int64).to(device),
            "target": final.to(device, torch.bfloat16), "hidden_state": aux.to(device, torch.bfloat16)}


def export_names(state: dict) -> dict:
    """SpecForge's draft state dict under our checkpoint's (SGLang's) names; the frozen embedding left out."""
    from pipeline.drafter import EXPORT_KEYS

    out = {}
    extra = []
    for k, v in strip(state).items():
        if k in EXPORT_KEYS:
            out[k] = v.detach().cpu().contiguous()
        elif k != "embed_tokens.weight":
            extra.append(k)
    missing = [k for k in EXPORT_KEYS if k not in out]
    if missing or extra:  # an extra module (SpecForge's optional fc_norm, say) would be dropped unseen
        raise SystemExit(f"quality_specforge: SpecForge's state dict does not map onto ours: missing "
                         f"{', '.join(missing) or 'nothing'}, extra {', '.join(extra) or 'nothing'}")
    return out


def strip(state: dict) -> dict:
    out = {}
    for k, v in state.items():
        k = k.replace("_fsdp_wrapped_module.", "").replace("_checkpoint_wrapped_module.", "")
        for prefix in ("module.", "_orig_mod.", "draft_model."):
            while k.startswith(prefix):
                k = k[len(prefix):]
        out[k] = v
    return out


def agreement(sf: dict, lcfg, state: dict, ckpt: Path, target: Path, batch: dict, tokens: int = 256) -> dict:
    """SpecForge's own forward against pipeline.drafter's (what pipeline.evaluate runs) on the trained weights.

    Both drafters are evaluated by our evaluator, which computes a drafter with pipeline.drafter;
    if its arithmetic differed from SpecForge's, SpecForge's figures would be low for that reason
    alone. One sample, the first TTT step, fp32 on the CPU: the largest logit difference and the
    share of positions whose top token agrees.
    """
    from pipeline.drafter import load_drafter
    from pipeline.drafter import target_head

    ref = sf["LlamaForCausalLMEagle3"](lcfg, attention_backend="sdpa")
    ref.load_state_dict({k: v.float() for k, v in strip(state).items()}, strict=True)
    ref = ref.float().eval()
    ours = load_drafter(ckpt).float().eval()
    ours.load_embeddings(target_head.read_embeddings(target))
    n = min(tokens, int(batch["lengths"][0]))
    ids = batch["input_ids"][:1, :n]
    aux = batch["aux_hidden_state"][:1, :n].float()
    with torch.no_grad():
        a = ref.lm_head(ref(hidden_states=aux, inputs_embeds=ref.embed_tokens(ids), ttt_length=1)).float()
        b = ours(ids, aux)[0].float()
    return {"tokens": n, "max_abs_logit_diff": round(float((a - b).abs().max()), 5),
            "top1_agreement": round(float((a.argmax(-1) == b.argmax(-1)).float().mean()), 4)}


def build_models(sf: dict, a: argparse.Namespace, cfg: dict, dcfg, vocab, device: torch.device):
    """SpecForge's draft over our config, started from our initial weights (the target's embedding,
    our vocabulary's maps, the target's lm_head rows of it) and wrapped for TTT, and SpecForge's
    frozen target head over the stored final states: (SpecForge's LlamaConfig, model, head)."""
    from transformers import LlamaConfig

    from pipeline.drafter import target_head

    dv = dcfg.draft_vocab_size
    lcfg = LlamaConfig(**{k: cfg[k] for k in SF_CONFIG_KEYS if k in cfg and cfg[k] is not None},
                       num_hidden_layers=1, draft_vocab_size=dv, pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(a.seed)
    with torch.device(device):
        draft = sf["LlamaForCausalLMEagle3"](lcfg, attention_backend=a.attention)
    head_w = target_head.read_lm_head(a.target)
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target_head.read_embeddings(a.target).to(draft.embed_tokens.weight.dtype))
        draft.t2d.copy_(vocab.t2d)
        draft.d2t.copy_(vocab.d2t)
        draft.lm_head.weight.copy_(head_w[vocab.ids].float())
    draft.freeze_embedding()
    draft = draft.to(device=device, dtype=torch.bfloat16)
    model = sf["OnlineEagle3Model"](draft_model=draft, length=a.ttt_length, attention_backend=a.attention).to(
        device=device, dtype=torch.bfloat16)
    head = sf["TargetHead"](str(a.target))
    with torch.no_grad():
        head.fc.weight.copy_(head_w.float())
    head.freeze_weights()
    head = head.eval().to(device=device, dtype=torch.bfloat16)
    return lcfg, model, head


def trainer_core(sf: dict, a: argparse.Namespace, model, head, device: torch.device, total: int):
    """SpecForge's FSDP backend with its BF16Optimizer and cosine warmup, and its TrainerCore over
    the EAGLE-3 strategy: (backend, core)."""
    backend = sf["FSDPTrainingBackend"](
        sf["ParallelConfig"].from_distributed(),
        optimizer_factory=lambda m: sf["BF16Optimizer"](m, lr=a.lr, max_grad_norm=a.max_grad_norm, total_steps=total,
                                                        warmup_ratio=a.warmup_ratio))
    cpu = device.type == "cpu"  # FSDP needs an accelerator; one CPU process trains the module unwrapped
    wrapped = backend.prepare_model(model, wrap=not cpu, optimizer_target=model.draft_model)
    if cpu:
        sf["note"] = (sf["note"] or "") + "; model not FSDP-wrapped (FSDP needs an accelerator)"
    return backend, sf["TrainerCore"](sf["Eagle3TrainStrategy"](wrapped, target_head=head), backend)


def train_steps(sf: dict, a: argparse.Namespace, core, loader, total: int, device: torch.device) -> dict:
    """Every step of the plan, logged as pipeline.train logs (means over each --log-every window):
    the token counts, the seconds and the last window's loss and accuracies."""
    multiple = 128 if a.attention == "flex_attention" else 1
    t0 = time.monotonic()
    padded = tokens = loss_tokens = 0
    last: dict = {}
    window: list[list[float]] = []
    for k, b in enumerate(loader, 1):
        padded += int(b["input_ids"].numel())
        tokens += int(b["lengths"].sum())
        loss_tokens += int(b["loss_mask"].sum())
        r = core.train_step(sf["TrainBatch"](sample_ids=["s"], strategy="eagle3", tensors=sf_batch(b, device, multiple),
                                             metadata={"target_repr": "hidden_state"}))
        window.append([float(r.metrics.get("loss", r.loss))]
                      + [float(r.metrics.get(f"acc_{i}", float("nan"))) for i in range(a.ttt_length)])
        if k % a.log_every == 0 or k == total:  # means over the window, as pipeline.train logs them
            mean = [sum(col) / len(col) for col in zip(*window)]
            window = []
            last = {"step": k, "loss": round(mean[0], 4), "acc": [round(x, 4) for x in mean[1:]]}
            rate = tokens / max(1e-9, time.monotonic() - t0)
            print(f"specforge: step {k}/{total} loss {mean[0]:.4f} acc " + " ".join(f"{x:.3f}" for x in mean[1:])
                  + f" | {rate:,.0f} tok/s", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"tokens": tokens, "padded": padded, "loss_tokens": loss_tokens, "train_s": time.monotonic() - t0,
            "last": last}


def save(sf: dict, a: argparse.Namespace, backend, dcfg, lcfg, first: dict) -> tuple[Path, dict]:
    """The trained draft as our checkpoint (RUN/checkpoint), and its forward's agreement with ours."""
    from safetensors.torch import save_file

    state = export_names(backend._module_state_dict())
    ckpt = Path(a.out) / "checkpoint"
    ckpt.mkdir(parents=True, exist_ok=True)
    save_file(state, str(ckpt / "model.safetensors"))
    (ckpt / "config.json").write_text(json.dumps(dcfg.to_sglang(), indent=1))
    try:
        agree = agreement(sf, lcfg, backend._module_state_dict(), ckpt, a.target, first)
    except Exception as e:  # noqa: BLE001 - the check's failure is reported, the drafter is still there
        agree = {"error": f"{type(e).__name__}: {e}"[:300]}
    print(f"specforge: forward agreement with pipeline.drafter: {agree}", flush=True)
    return ckpt, agree


def run(a: argparse.Namespace) -> dict:
    sf, why = _imports(a.device)
    if sf is None:
        return {"skipped": why}
    _rank, _world, local = bench_train._env_rank()
    device = bench_train._device(local, a.device)
    sf["init_distributed"](timeout=10)
    began = time.monotonic()
    cfg, dcfg, vocab, steps = our_plan(a)
    lcfg, model, head = build_models(sf, a, cfg, dcfg, vocab, device)
    total = len(steps)
    backend, core = trainer_core(sf, a, model, head, device, total)
    loader = torch.utils.data.DataLoader(steps, batch_size=None, shuffle=False, num_workers=a.workers,
                                         prefetch_factor=4 if a.workers else None)
    setup_s = time.monotonic() - began
    t = train_steps(sf, a, core, loader, total, device)
    train_s, tokens = t["train_s"], t["tokens"]
    ckpt, agree = save(sf, a, backend, dcfg, lcfg, steps[0])
    torch.distributed.destroy_process_group()
    return {"agreement": agree, "steps": total, "tokens": tokens, "padded_tokens": t["padded"], "note": sf["note"],
            "loss_tokens": t["loss_tokens"], "train_s": round(train_s, 1),
            "setup_s": round(setup_s, 1), "tokens_per_s": round(tokens / max(train_s, 1e-9)),
            "attention_backend": a.attention, "checkpoint": str(ckpt), **t["last"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, required=True)
    p.add_argument("--target", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch-tokens", type=int, required=True)
    p.add_argument("--max-len", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--warmup-ratio", type=float, required=True)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--ttt-length", type=int, default=7)
    p.add_argument("--draft-vocab", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--attention", default="flex_attention", help="SpecForge attention backend (its default)")
    a = p.parse_args(argv)
    print(RESULT + json.dumps(run(a)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
