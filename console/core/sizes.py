"""Byte sizes as operators write them in configs, and as the console prints them.

One definition for the console and the pipeline: it lives in `pipeline.events` (the one
module of the pipeline the console may import) and is re-exported here for the console's
modules. Units follow GNU coreutils (500GB is SI, 10GiB and 512M are IEC); printed sizes are
SI with one decimal ("412.3 GB")."""

from __future__ import annotations

from pipeline.events import SIZE_HINT as HINT
from pipeline.events import format_bytes, parse_size

__all__ = ["HINT", "format_bytes", "parse_size"]
