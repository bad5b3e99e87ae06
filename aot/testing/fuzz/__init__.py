"""Fuzzers: random models (models.py), the packages' I/O (io.py) and the
runtime (runtime.py). Not product: nothing in the product imports it."""
