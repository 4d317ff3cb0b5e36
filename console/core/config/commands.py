"""How a command written in a config becomes an argv, with its `${...}` values as data, never code.

Every command (a phase's `run:`, a `notify:` entry, a `command` check, a `values:` command) is an
argv list, or a string split like a shell would. A string is split as written, and only then is
each `${...}` substituted inside its own word: a value holding spaces, quotes or `;` stays one
argument (as if shlex.quote had quoted it), never several, and never ends a quote.

A value placed inside the script of a shell's `-c` (`[sh, -c, "cp ${src} out"]`, bash, zsh,
dash and the other shells, and `python -c` code) is refused when the config loads. Quoting cannot
make it safe: the script's own quotes decide how the value is read (inside `"..."` the shell still
runs `$(...)`), so a `--set` or saved value such as `/x; touch PWNED` would run as code. The value
goes to the script as an argument (`[sh, -c, 'cp "$1" out', sh, "${src}"]`) or through `env:`.
"""

from __future__ import annotations

import os
import re
import shlex

# `${...}` as the interpolation reads it (interpolate._REF): `$${` is the escape for a literal `${`.
_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}")
_MARK = re.compile("\ue002(\\d+)\ue003")
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh", "fish", "csh", "tcsh"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_SHELL_OPTION_ARGS = set("oO")  # `bash -o pipefail -c ...`: the option's name is the next word
_SHELL_LONG_OPTION_ARGS = {"--rcfile", "--init-file"}  # bash's, whose file is the next word


def references(text: str) -> list[str]:
    """The `${...}` references in `text` as written (a `$${` escape is none)."""
    return [m.group(0) for m in _REF.finditer(text) if m.group(0) != "$${"]


def split_words(text: str) -> list[str]:
    """`text` split like a shell would, each `${...}` kept whole inside the word it is in (its
    own spaces and quotes, `${env:X:-a b}`, never split it). ValueError for unbalanced quotes."""
    refs: list[str] = []

    def mark(m: re.Match[str]) -> str:
        if m.group(0) == "$${":
            return m.group(0)
        refs.append(m.group(0))
        return f"\ue002{len(refs) - 1}\ue003"

    words = shlex.split(_REF.sub(mark, text))
    return [_MARK.sub(lambda m: refs[int(m.group(1))], w) for w in words]


def script_with_reference(words: list[str]) -> tuple[int, str] | None:
    """(index, why) of a word that is the code of a shell's `-c` (or `python -c`) and holds a
    `${...}`; None when no value is placed in code."""
    for i, word in enumerate(words):
        name = os.path.basename(word)
        if name in SHELLS:
            script = _shell_script(words, i)
        elif _PYTHON.match(name):
            script = _python_code(words, i)
        else:
            continue
        if script is not None and references(words[script]):
            return script, _why(name, references(words[script]))
    return None


def _shell_script(words: list[str], shell: int) -> int | None:
    """The index of the script a shell at `shell` runs with `-c`: its first word after the options."""
    given_c = False
    j = shell + 1
    while j < len(words):
        w = words[j]
        if w == "--" or w == "-":
            j += 1
            break
        if w.startswith("--"):
            j += 2 if w in _SHELL_LONG_OPTION_ARGS else 1
            continue
        if len(w) > 1 and w[0] in "-+" and w[1:].isalpha():
            given_c = given_c or "c" in w[1:]
            j += 2 if _SHELL_OPTION_ARGS & set(w[1:]) else 1
            continue
        break
    return j if given_c and j < len(words) else None


def _python_code(words: list[str], python: int) -> int | None:
    """The index of the code `python -c CODE` runs (the word after `-c`, or `-cCODE` itself)."""
    j = python + 1
    while j < len(words):
        w = words[j]
        if not w.startswith("-") or w == "-" or w.startswith("--") or w.startswith("-m"):
            return None
        if w[1] in "WX":  # a warning filter or an -X option: its value is attached or the next word
            j += 2 if len(w) == 2 else 1
            continue
        if "c" in w[1:]:
            return j + 1 if w.endswith("c") and j + 1 < len(words) else j
        j += 1
    return None


def _why(program: str, refs: list[str]) -> str:
    first = refs[0]
    var = first[2:-1].strip()
    env_name = re.sub(r"[^A-Za-z0-9_]", "_", var.removeprefix("env:").partition(":-")[0]).upper() or "VALUE"
    if _PYTHON.match(program):
        as_arg = f"[{program}, -c, 'import sys; print(sys.argv[1])', \"{first}\"]"
        from_env = f"os.environ[\"{env_name}\"]"
    else:
        as_arg = f"[{program}, -c, 'echo \"$1\"', {program}, \"{first}\"]"
        from_env = f"\"${env_name}\""
    return (f"{first} is placed inside the code that `{program} -c` runs: its value would be read as code "
            "(a --set or saved value like `/x; touch PWNED` would run), and no quoting is safe there. "
            f"Pass it as an argument after the code ({as_arg}) or through env: ({env_name}: \"{first}\", "
            f"read as {from_env}); write $${{ for the code's own ${{...}}")
