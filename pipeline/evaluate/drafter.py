"""The exported drafter folder as the speculative loop uses it: chain drafts with a KV cache.

Only the exported files are read (config.json + model.safetensors, through
pipeline.drafter.load_drafter) plus the target's embedding, which SGLang also takes from
the target: what is measured is what SGLang would serve, not the trainer's objects.

Row p of the drafter pairs token p+1 with the target's captured state at position p, at
position p. After each verification the cache is cut back to the rows built from target
states, and the rows of newly verified positions are added from the target's fresh states
(SGLang's draft extend); the chain's own rows are dropped, as SGLang drops them.

A damaged folder (a truncated safetensors file, NaN or Inf in any weight) is refused as
bad input: SGLang would serve it without a word, at an acceptance that means nothing.
The untrained baseline is the drafter `pipeline.train` starts from (its seed 0 and its
default `--init-head target`), over the given drafter's vocabulary or, built from the
target alone, over the target's first ids; it reads what an untrained drafter scores.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pipeline.checksum import ALGO, file_checksum
from pipeline.drafter import vocab as dvocab
from pipeline.drafter.config import DrafterConfig
from pipeline.drafter.model import Eagle3Drafter, KVCache, load_drafter
from pipeline.evaluate.errors import BadInput
from pipeline.jsonfile import read_json
from pipeline.target.config import read_config
from pipeline.target.tensors import read_embeddings, read_lm_head


def load_exported(folder: Path, target_dir: Path, capture: list[int], device: str,
                  dtype: torch.dtype) -> Eagle3Drafter:
    folder = Path(folder)
    cfg_path = folder / "config.json"
    raw = read_json(cfg_path, f"{cfg_path}: missing; --drafter must be a folder written by pipeline.export")
    ids = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if not isinstance(ids, list) or [int(i) + 1 for i in ids] != list(capture):
        raise BadInput(f"{cfg_path}: eagle_aux_hidden_state_layer_ids is {ids!r}, but this target is captured at "
                       f"layers {capture} (ids {[c - 1 for c in capture]}); export with this target")
    check_manifest(folder, "config.json")
    from safetensors import SafetensorError

    try:
        model = load_drafter(folder)
    except SafetensorError as e:
        raise BadInput(f"{folder / 'model.safetensors'}: cannot be read ({e}): the file is truncated or damaged; "
                       "export the drafter again (python -m pipeline.export)") from None
    except (ValueError, OSError, RuntimeError) as e:  # what torch or safetensors raise for a damaged folder
        raise BadInput(f"{folder}: {str(e).splitlines()[0]}") from None
    refuse_non_finite(model, folder / "model.safetensors")
    check_manifest(folder, "model.safetensors")  # after the checks that say more about a damaged file
    unlike = model.config.unlike_target(read_config(Path(target_dir), "--target"), str(Path(target_dir) / "config.json"))
    if unlike:  # a config.json resealed into the manifest: its shapes may hold and still not be this target's drafter
        key, mine, theirs = unlike[0]
        raise BadInput(f"{cfg_path}: {key} is {mine!r}, but a drafter of the target {target_dir} has {theirs!r}; "
                       "this drafter was not exported for this target")
    return _with_target(model, target_dir, device, dtype)


MANIFEST = "eagle3-export.json"  # pipeline.export's checksum manifest (the stages share files, not modules)


def check_manifest(folder: Path, name: str) -> None:
    """`name` holds the bytes export wrote: a config.json edited afterwards (sizes, heads,
    rope) can still load, and would score a drafter SGLang never sees."""
    path = folder / MANIFEST
    manifest = read_json(path, f"{path}: missing; the folder was not written by pipeline.export, which records "
                               "what it wrote there: export the drafter again")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    want = files.get(name) if isinstance(files, dict) else None
    if not isinstance(want, dict):
        raise BadInput(f"{path}: does not record {name}; export the drafter again")
    f = folder / name
    try:
        size, digest = f.stat().st_size, (file_checksum(f) if f.stat().st_size == want.get("bytes") else None)
    except OSError as e:
        raise BadInput(f"{f}: cannot be read ({e.strerror or e})") from None
    if size != want.get("bytes") or digest != want.get(ALGO):
        raise BadInput(f"{f}: differs from what export wrote ({size} bytes, {MANIFEST} records "
                       f"{want.get('bytes')!r} and its checksum): the file changed after export, and SGLang would "
                       "serve other weights or sizes than these figures describe; export the drafter again")


def _with_target(model: Eagle3Drafter, target_dir: Path, device: str, dtype: torch.dtype) -> Eagle3Drafter:
    try:
        model.load_embeddings(read_embeddings(Path(target_dir)))
    except (ValueError, OSError) as e:  # what safetensors or torch raise for a damaged file
        raise BadInput(f"{target_dir}: {str(e).splitlines()[0]}") from None
    return model.to(device=device, dtype=dtype).eval()


def refuse_non_finite(model: torch.nn.Module, where: Path) -> None:
    for name, t in model.state_dict().items():
        if t.is_floating_point():
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                raise BadInput(f"{where}: {name} holds {bad} NaN/Inf value{'s' if bad > 1 else ''} of {t.numel()}; "
                               "the drafter is damaged, export it again from a healthy checkpoint")


BASELINE_SEED = 0
BASELINE_DRAFT_VOCAB = 32000


def untrained(like: Eagle3Drafter | None, target_dir: Path, device: str, dtype: torch.dtype) -> Eagle3Drafter:
    """The drafter training would start from: the shape and vocabulary of `like` (a loaded
    drafter), or, when None, of a drafter built from the target with train's defaults."""
    try:
        if like is not None:
            cfg = like.config
            vocab = dvocab.from_buffers(like.d2t, like.t2d)
        else:
            cfg = DrafterConfig.from_target(read_config(Path(target_dir), "--target"), BASELINE_DRAFT_VOCAB,
                                            where=str(Path(target_dir) / "config.json"))
            vocab = dvocab.from_ids(torch.arange(cfg.draft_vocab_size), cfg.vocab_size)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(BASELINE_SEED)
            model = Eagle3Drafter(cfg)
        model.set_vocab(vocab)
        head = read_lm_head(Path(target_dir))
        with torch.no_grad():
            model.lm_head.weight.copy_(head[vocab.ids].float())
    except (ValueError, OSError) as e:  # what torch or safetensors raise; our refusals name their file
        raise BadInput(f"cannot build an untrained drafter for {target_dir}: {e}") from None
    return _with_target(model, target_dir, device, dtype)


class ChainDrafter:
    """`propose(seq, aux, k)`: k greedy drafts following seq (see speculative.Proposer)."""

    def __init__(self, model: Eagle3Drafter) -> None:
        self.model = model
        self.device = model.fc.weight.device
        self._new_cache = KVCache
        self.cache = KVCache()
        self.rows = 0  # cached rows built from target states

    def reset(self) -> None:
        """Forget the cached rows: the next proposal is for another prompt."""
        self.cache = self._new_cache()
        self.rows = 0

    def extend(self, seq: list[int], aux: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """SGLang's draft extend: rows for the positions verified since the last call, from
        the target's states; the last row's logits [Vd] and hidden_out [1, 1, H]."""
        n = len(seq)
        if aux.shape[0] != n - 1:
            raise ValueError(f"{aux.shape[0]} target states for {n} tokens; expected one per token but the last")
        if self.rows > n - 1:
            self.reset()
        self.cache.crop(self.rows)
        start = self.rows
        ids = torch.tensor([seq[start + 1 : n]], device=self.device)
        pos = torch.arange(start, n - 1, device=self.device)[None]
        hidden = aux[start : n - 1][None].to(device=self.device, dtype=self.model.fc.weight.dtype)
        logits, out = self.model(ids, hidden, pos, cache=self.cache)
        self.rows = n - 1
        return logits[0, -1], out[:, -1:]

    @torch.inference_mode()
    def propose(self, seq: list[int], aux: torch.Tensor, k: int) -> list[int]:
        n = len(seq)
        logits, out = self.extend(seq, aux)
        drafts: list[int] = []
        for j in range(k):
            tok = self.model.draft_to_target(logits.float().argmax())
            drafts.append(int(tok))
            if j == k - 1:
                break
            logits, out = self.model(tok.view(1, 1), out, torch.tensor([[n - 1 + j]], device=self.device),
                                     cache=self.cache)
            logits, out = logits[0, -1], out[:, -1:]
        return drafts
