"""The Textual operator console. Everything here drives `console.core.lifecycle.project.Project`
and the telemetry sources; no domain logic lives in the UI."""
