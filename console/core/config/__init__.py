"""The pipeline config: YAML in, the typed objects of `console.core.model` out."""
