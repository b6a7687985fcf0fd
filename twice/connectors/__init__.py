"""Connectors: each evidence source's own format into the timeline (README.md in this folder:
the families and how to add a source)."""
