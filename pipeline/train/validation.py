"""Loss and acc_i on the held-out slice: the figures that say whether the drafter generalises,
computed with the training objective but no gradient, on the same source as training (a store
or, online, the target's own states)."""

from __future__ import annotations

import torch

from pipeline.train.loss import StepAborted, TTTObjective, prepare, weights
from pipeline.train.run import Run
from pipeline.train.schedule import validation_batches
from pipeline.train.step import to_device


class Validator:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.batches = validation_batches(run.source.lengths, run.val_pos, run.plan, run.dist.rank,
                                          run.dist.world_size)

    def __call__(self, step: int) -> dict | None:
        """The validation entry of `step`; None when there is no held-out slice or a stop came."""
        run = self.run
        if not run.val_pos:
            return None
        n, device = run.opts.ttt_length, run.device
        acc_sum = torch.zeros(4 * n, device=device)
        run.drafter.eval()
        check = TTTObjective(run.drafter, n, run.model.kernels, run.model.merge)
        try:
            with torch.no_grad():
                for mb in self.batches:
                    if run.stop.is_set():
                        return None
                    b = to_device(run, run.source.batch(mb, run.opts.max_len))
                    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run.cuda):
                        prep = prepare(run.head, b, n, run.amp_dtype)
                        sums, correct = check(prep)
                    acc_sum += torch.cat([sums.float(), correct.float(), prep.loss_count, prep.acc_count])
        except StepAborted:  # a stop in the target's forward (online)
            return None
        finally:
            run.drafter.train()
        return self._record(step, run.dist.all_reduce_sum(acc_sum).tolist())

    def _record(self, step: int, vals: list[float]) -> dict:
        run = self.run
        n = run.opts.ttt_length
        w = weights(n, run.device)
        sums_v, correct_v, rows_v, acc_rows_v = (vals[k * n:(k + 1) * n] for k in range(4))
        loss_v = sum(float(w[i]) * s / max(r, 1.0) for i, (s, r) in enumerate(zip(sums_v, rows_v)))
        acc = [c / max(a, 1.0) for c, a in zip(correct_v, acc_rows_v)]
        entry = {"step": step, "loss": round(loss_v, 6), "acc": [round(a, 4) for a in acc]}
        run.progress.val_history.append(entry)
        run.events.metric("val_loss", loss_v, step=step)
        for i, a in enumerate(acc):
            run.events.metric(f"val_acc_{i}", a, step=step)
        run.log(f"train: step {step}/{run.total} validation ({len(run.val_pos)} held-out samples): loss {loss_v:.4f} "
                "acc " + " ".join(f"{a:.3f}" for a in acc))
        return entry
