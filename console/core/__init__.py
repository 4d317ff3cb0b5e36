"""The headless core: config, checks, runs, journal, telemetry. Never imports the UI."""
