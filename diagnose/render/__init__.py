"""Renderers: take a model and a console/file, print it; no parsing, no analysis."""
