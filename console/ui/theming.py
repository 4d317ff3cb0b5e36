"""Finds the theme definitions in `console/ui/themes/` (inside the package, so a checkout,
an editable install and a wheel install all have them) and falls back to Textual's
built-in themes when that folder is absent, so the console always starts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from textual.theme import BUILTIN_THEMES, Theme

THEMES_DIR = Path(__file__).resolve().parents[2] / "themes"
DEFAULT = "eagle3-dark"
_FALLBACK = {
    "eagle3-dark": "textual-dark",
    "eagle3-light": "textual-light",
    "eagle3-ansi": "ansi-dark",
}


def load_themes(folder: Path = THEMES_DIR) -> list[Theme]:
    path = folder / "eagle3.py"
    try:
        spec = importlib.util.spec_from_file_location("eagle3_themes", path)
        if spec is None or spec.loader is None:
            raise ImportError(path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        themes = list(module.THEMES)
    except (OSError, ImportError, AttributeError, SyntaxError):
        themes = []
    if themes:
        return themes
    out = []
    for name, builtin in _FALLBACK.items():
        base = BUILTIN_THEMES.get(builtin) or BUILTIN_THEMES["textual-dark"]
        out.append(Theme(**{**base.__dict__, "name": name}))
    return out


def resolve_theme(name: str | None, known: list[str]) -> tuple[str, str | None]:
    """The theme to use and, for an unknown name, a warning naming the known ones."""
    if not name:
        return DEFAULT, None
    if name in known:
        return name, None
    short = f"eagle3-{name}"
    if short in known:
        return short, None
    return DEFAULT, f"unknown theme '{name}' (themes: {', '.join(known)}); using {DEFAULT}"
