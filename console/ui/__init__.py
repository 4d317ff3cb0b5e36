"""The Textual operator console. Everything here drives `console.core.project.Project`
and the telemetry sources; no domain logic lives in the UI."""
