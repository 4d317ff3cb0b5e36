"""The selected phase's detail: the live bar above it, its heading, live figures, charts and
acceptance bars."""
