"""Renderers of an Analysis for people and tools: Chrome trace, HTML page."""
