"""The console's widgets, one a module, grouped by the area of the screen they draw: `phases/`
(the checklist), `machine/` (GPUs, disks, shm, host), `detail/` (the selected phase's heading,
figures and charts), `checks/` (check results) and `logs/` (logs and the journal)."""
