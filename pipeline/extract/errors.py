"""Extraction's own stops, on the stage edge's classes (pipeline/program_edge.py), which
carry the exit codes the console reads: 3 for the disk reserve or a full disk, 143 for
SIGTERM. Every other failure is the edge's BadInput (2) or StageError (1).

A write that fails with ENOSPC or EDQUOT anywhere becomes a ReserveStop (reserve.disk_full).
"""

from __future__ import annotations

from pipeline.program_edge import OutOfSpace, Terminated


class ReserveStop(OutOfSpace):
    """Free space fell to the reserve; what was written is kept and the run resumes later."""


class Stopped(Terminated):
    """SIGTERM (eagle3 stop): what is in the manifest is kept, the unit in flight is not;
    str() says how far the run got, after `extract: stopped by SIGTERM; `."""
