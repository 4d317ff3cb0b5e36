"""Loading a torch-saved state (`train_state.pt`) that came from the disk, not from this process.

torch.load with weights_only=False unpickles anything, so a crafted state runs code the
moment it is read. These states hold only tensors and plain data (numbers, strings, lists,
tuples, dicts): the safe unpickler reads them unchanged and refuses any other object before
it is built. A refusal is the stage's BadInput (exit 2) naming the file."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

from pipeline.bounded_read import open_regular
from pipeline.program_edge import BadInput

_WHY = re.compile(r"WeightsUnpickler error: ([^\n]*?)(?: was not an allowed global.*)?$", re.M)


def load_state_file(path: Path, advice: str, mmap: bool = False) -> Any:
    """The state in `path`, read with torch's weights-only unpickler. `advice` ends each refusal
    (what the operator can do instead)."""
    import torch

    try:
        os.close(open_regular(path))  # a FIFO or a device is refused, never opened for reading
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        found = _WHY.search(str(e))
        what = found.group(1).strip() if found else str(e).splitlines()[0]
        raise BadInput(f"{path}: refused: it holds an object that is not a tensor or plain data ({what}), and "
                       f"loading it could run code; {advice}") from None
    except BadInput:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged file is an operator-facing refusal
        raise BadInput(f"{path}: cannot be read ({type(e).__name__}: {e}); {advice}") from None
