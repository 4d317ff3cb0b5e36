"""`python -m pipeline.regenerate.template_check TARGET_DIR`: exit 0 when the target's
tokenizer carries a chat template, 1 saying where it looked otherwise. Regenerate and merge
render chats in the target's own format; a base model without one would be prompted in a
format it never saw. Reads JSON only (no transformers), so a pre-flight check stays cheap.
transformers 5 saves the template as chat_template.jinja, earlier versions inside
tokenizer_config.json; either counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def problem(folder: Path) -> str | None:
    if not folder.is_dir():
        return f"{folder}: no such folder (the target's save_pretrained folder)"
    if (folder / "chat_template.jinja").is_file():
        return None
    cfg = folder / "tokenizer_config.json"
    if not cfg.is_file():
        return f"{cfg}: missing; the target's tokenizer is not there"
    try:
        template = json.loads(cfg.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError, AttributeError) as e:
        return f"{cfg}: not a JSON object ({e})"
    if not template:
        return (f"{folder}: no chat template (no chat_template.jinja, no 'chat_template' in tokenizer_config.json); "
                "use the chat (instruct) variant of the model")
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pipeline.regenerate.template_check TARGET_DIR", file=sys.stderr)
        return 2
    why = problem(Path(args[0]))
    if why:
        print(why, file=sys.stderr)
        return 1
    print(f"{args[0]}: chat template present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
