"""Where a module would be imported from, found without importing it (nor, for a
dotted name, its parent packages: sglang's __init__ pulls in torch).

Standard library only and Python 3.8 compatible: python_import hands this file's
source to another interpreter (`python -c SOURCE MODULE`, which prints the answer as
JSON) when the check names one, so both paths share one implementation."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from typing import Any


def _version(top: str) -> str | None:
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return None
    try:
        return metadata.version(top)
    except Exception:
        pass
    try:
        for dist in metadata.packages_distributions().get(top, []):
            return metadata.version(dist)
    except Exception:
        pass
    return None


def locate(name: str) -> dict[str, Any]:
    """{"found": bool, "origin", "locations", "version", "python", "error"}."""
    parts = name.split(".")
    answer: dict[str, Any] = {"module": name, "found": False, "python": sys.executable,
              "sys_path": [str(p) for p in sys.path][:12]}
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError) as e:
        answer["error"] = f"{type(e).__name__}: {e}"
        return answer
    i = 1
    while spec is not None and i < len(parts):
        locations = spec.submodule_search_locations
        if locations is None:
            answer["error"] = "{} is a module, not a package".format(".".join(parts[:i]))
            return answer
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), list(locations))
        i += 1
    if spec is None:
        answer["error"] = "no module named {}".format(".".join(parts[:i]))
        return answer
    answer.update(found=True, origin=spec.origin if spec.has_location else None,
                  locations=[str(p) for p in spec.submodule_search_locations or []], version=_version(parts[0]))
    return answer


if __name__ == "__main__":
    print(json.dumps(locate(sys.argv[1])))
