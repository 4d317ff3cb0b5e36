"""The SGLang hidden-state dump patch: a few lines injected into SGLang's model files that
call the hook beside them, pipeline.patch.sglang_dump, during prefill (sglang_dump.py says what
it does; it runs in the server's interpreter, so it and this file import no more than it needs).

    python -m pipeline.patch apply|verify|revert|status (--file PATH | --module DOTTED.NAME)

`--module sglang.srt.models.deepseek_v2` finds the file the way Python would import it, without
importing sglang (whose __init__ pulls in torch and CUDA): run it with the SGLang environment's
interpreter. Supported files are known by the sha256 of their original content (recipes.py);
any other content is refused, with the supported versions named.

- apply: original -> patched, atomically, keeping the original beside it as
  `<file>.eagle3-orig`. Applying to a patched file changes nothing.
- verify: exit 0 only when the file is exactly the patched text of a supported original
  (what the console's `patch_applied` check runs).
- revert: patched -> the original, byte for byte (rebuilt from the patched text and checked
  against the original's sha256), and the backup is removed. Reverting an original file
  changes nothing.
- status: prints `original`, `patched` or `unknown`, the SGLang version and the file.
- A file patched by an earlier release, whose lines imported the hook as `pipeline.sglang_dump`,
  is `outdated`: verify exits 1 saying so, apply patches it anew, revert restores the original.

A symlink is followed (the patch and the backup go to the file it names; the link stays a
link). Applies and reverts of one file wait for each other on `.<file>.eagle3-lock`, so
concurrent applies all exit 0 (one patches, the rest say "already patched"). A backup whose
sha256 is not the recorded original's is refused (exit 3) with the command that repairs it.

Exit codes: 0 done (or nothing to do; verify: patched), 1 verify: not patched,
2 bad arguments or a file/module that cannot be found or read, 3 refused: content this patcher
does not know (another SGLang version, or a file edited by hand) or a backup that is not the
original, 4 the file, its backup or its lock cannot be written (or the lock stays held 60 s),
130 interrupted, 143 stopped by SIGTERM (pipeline/program_edge.py).
"""
