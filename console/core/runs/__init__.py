"""Detached phase runs: run directories, locks, and the manager that starts (through the
launcher program, `python -m console.launcher`), stops and describes runs from their files alone.

Import the modules themselves (`manager`, `rundir`, `procs`): the package re-exports nothing, so
the launcher can read a run directory without loading the manager's checks and config."""
