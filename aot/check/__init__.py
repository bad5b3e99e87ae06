"""What a user checks on a board: datasets read lazily (dataset.py) and
metrics (validate.py), streaming, timing and traces, inputs, the reference
runtimes, `aot ops`. Imports every floor up to aot.deploy and aot.tune."""
