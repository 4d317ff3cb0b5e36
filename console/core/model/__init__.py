"""The config's typed model: `Config`, `Phase`, `CheckSpec`, `NotifySpec` and their bounds.
The loader (`console.core.config`) builds them; the checks, the records and every floor
above run against them, so they sit below all of those."""
