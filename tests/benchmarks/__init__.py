"""Benchmarks (not collected by pytest): each module has ``run() -> list[dict]``."""
