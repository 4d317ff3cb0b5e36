"""The phase list's title: the config's name, the target model in effect, and the overrides
`eagle3 set` saved, which every command applies, so an operator sees at a glance that the
YAML is not the whole story."""

from __future__ import annotations

from collections.abc import Mapping

from console.ui.render import fit_words


def short_path(value: str, room: int = 24) -> str:
    """A long path by its last part: a model folder is known by its name."""
    if len(value) <= room or "/" not in value.rstrip("/"):
        return value
    return "…/" + value.rstrip("/").rsplit("/", 1)[-1]


def _overrides(saved: list[tuple[str, str]], form: str, names: int | None = None) -> str:
    if not saved:
        return ""
    if form == "names":
        kept = [k for k, _ in saved[:names]]
        return " · set " + ", ".join(kept + (["…"] if len(kept) < len(saved) else []))
    return " · set " + ", ".join(f"{k}={v if form == 'full' else short_path(v)}" for k, v in saved)


def phases_title(name: str, saved: Mapping[str, str], width: int = 60, target: str | None = None) -> str:
    """The longest telling title that fits `width`: each override named in full where it
    fits, else its value by the path's last part, else by its name alone; short of room the
    target comes first (it is what a run is about), and what still does not fit is cut at a
    word, never inside a name."""
    shown = sorted((k, v) for k, v in saved.items() if k != "target" or not target)
    who = f"target {short_path(target, 0)}" if target else ""
    heads = [f"phases · {name}"]
    if target:
        heads = [f"phases · {name} · {who}", f"{who} · {name}"]
    forms = [("full", None), ("short", None)] + [("names", n) for n in range(len(shown), 0, -1)]
    for form, names in forms:
        for head in heads:
            title = head + _overrides(shown, form, names)
            if len(title) <= width:
                return title
    if target:
        for title in (f"{who} · …", who):
            if len(title) <= width:
                return title
    cut = fit_words(heads[-1] + _overrides(shown, "names", 0), width)
    return cut[:-1].rstrip(" ·,") + "…" if cut.endswith("…") else cut
