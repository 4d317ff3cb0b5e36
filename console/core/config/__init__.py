"""The pipeline config: YAML in, typed objects out."""

from console.core.config.model import CheckSpec, Config, Phase

__all__ = ["CheckSpec", "Config", "Phase"]
