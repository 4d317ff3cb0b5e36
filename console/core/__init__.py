"""The headless core, its packages its floors from the top: flow, lifecycle, runs, config,
checks, records, model, and at the ground telemetry, text, files and figures (pyproject's
import-linter contracts hold them so). Never imports the UI."""
