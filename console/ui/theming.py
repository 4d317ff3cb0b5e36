"""Finds the console's theme definitions, `themes/eagle3.py` at the top of the project, and
falls back to Textual's built-in themes when they are absent, so the console always starts.

The wheel ships `themes` as a namespace package: it owns `themes/eagle3.py` and no
`themes/__init__.py`, so another distribution's top-level `themes` package can share
site-packages with it without either overwriting or, on uninstall, deleting the other's files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from textual.theme import BUILTIN_THEMES, Theme

DEFAULT = "eagle3-dark"
_FALLBACK = {
    "eagle3-dark": "textual-dark",
    "eagle3-light": "textual-light",
    "eagle3-ansi": "ansi-dark",
}


def themes_dir() -> Path | None:
    """The folder of the importable `themes.eagle3` (a wheel or an up-to-date install), else the
    `themes/` of the checkout this console runs from (an editable install made before the move)."""
    try:
        spec = importlib.util.find_spec("themes.eagle3")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        return Path(spec.origin).parent
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "themes" / "eagle3.py").is_file():
        return checkout / "themes"
    return None


def load_themes(folder: Path | None = None) -> list[Theme]:
    folder = folder or themes_dir()
    themes = _read_themes(folder / "eagle3.py") if folder else []
    if themes:
        return themes
    out = []
    for name, builtin in _FALLBACK.items():
        base = BUILTIN_THEMES.get(builtin) or BUILTIN_THEMES["textual-dark"]
        out.append(Theme(**{**base.__dict__, "name": name}))
    return out


def _read_themes(path: Path) -> list[Theme]:
    """The file's THEMES, or none when it is missing or broken (the caller falls back)."""
    try:
        spec = importlib.util.spec_from_file_location("eagle3_themes", path)
        if spec is None or spec.loader is None:
            raise ImportError(path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return list(module.THEMES)
    except (OSError, ImportError, AttributeError, SyntaxError):
        return []


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
