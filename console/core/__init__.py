"""The headless core, its packages its floors from the top: flow, lifecycle, runs, config,
checks, records, and telemetry and leaves at the ground (pyproject's import-linter contracts
hold them so). Never imports the UI."""
