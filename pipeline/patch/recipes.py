"""What the patch inserts, and the originals it knows.

A recipe is a list of insertions, each after an anchor line that occurs exactly once in the
original. The patched text is therefore a function of the original, and the original is a
function of the patched text (remove each inserted block after its anchor), so verify and
revert need no stored copy: the rebuilt original must have the known sha256.

The same two blocks serve llama.py and deepseek_v2.py: both CausalLM classes end their
__init__ with `self.capture_aux_hidden_states = False` and unpack
`hidden_states, aux_hidden_states = hidden_states` in forward just before the logits
processor, where the final hidden state is post-norm (docs/sglang.md has the lines).
"""

from __future__ import annotations

from dataclasses import dataclass

INIT_ANCHOR = "        self.capture_aux_hidden_states = False\n"
INIT_BLOCK = '''\
        # >>> eagle3-console: hidden-state dump, added by `python -m pipeline.patch apply`
        self._eagle3_dump = None
        import os as _eagle3_os

        if _eagle3_os.environ.get("EAGLE3_DUMP_DIR"):
            try:
                from pipeline.patch import sglang_dump as _eagle3_dump
            except ImportError as e:
                raise RuntimeError(
                    "EAGLE3_DUMP_DIR is set but pipeline.patch.sglang_dump cannot be imported "
                    f"({e}): put the eagle3-console checkout on this server's PYTHONPATH"
                ) from e
            self._eagle3_dump = _eagle3_dump.attach(self)
        # <<< eagle3-console
'''
# Patched by an earlier release, whose hook was the root module pipeline.sglang_dump: such a file
# is "outdated" (the server would fail to import the hook); apply patches it anew, revert restores it.
EARLIER_INIT_BLOCK = INIT_BLOCK.replace("from pipeline.patch import sglang_dump", "from pipeline import sglang_dump") \
    .replace("pipeline.patch.sglang_dump cannot", "pipeline.sglang_dump cannot")
FORWARD_ANCHOR = "            hidden_states, aux_hidden_states = hidden_states\n"
FORWARD_BLOCK = '''\
        # >>> eagle3-console: hidden-state dump
        if getattr(self, "_eagle3_dump", None) is not None:
            self._eagle3_dump(forward_batch, hidden_states, aux_hidden_states)
        # <<< eagle3-console
'''


@dataclass(frozen=True)
class Insertion:
    anchor: str
    block: str


@dataclass(frozen=True)
class Recipe:
    name: str  # the file inside the sglang package
    version: str  # the SGLang release it comes from
    original_sha256: str
    insertions: tuple[Insertion, ...]
    earlier: tuple[tuple[Insertion, ...], ...] = ()  # what earlier releases inserted

    def label(self) -> str:
        return f"sglang {self.version} {self.name.rsplit('/', 1)[-1]}"


_BLOCKS = (Insertion(INIT_ANCHOR, INIT_BLOCK), Insertion(FORWARD_ANCHOR, FORWARD_BLOCK))
_EARLIER = ((Insertion(INIT_ANCHOR, EARLIER_INIT_BLOCK), Insertion(FORWARD_ANCHOR, FORWARD_BLOCK)),)

RECIPES: tuple[Recipe, ...] = (
    Recipe("srt/models/deepseek_v2.py", "0.5.23",
           "f61f93019bf1e7680f45a1fe227244433e1b22021cb955e53d25b9cf900473f9", _BLOCKS, _EARLIER),
    Recipe("srt/models/llama.py", "0.5.23",
           "19a843fda901ee5cdc1ede2356d5e87f804fd87a37cc2719b6698f434b82c9ae", _BLOCKS, _EARLIER),
)


def supported() -> str:
    """The supported originals, for a refusal message."""
    return ", ".join(f"{r.label()} (sha256 {r.original_sha256[:12]}…)" for r in RECIPES)
