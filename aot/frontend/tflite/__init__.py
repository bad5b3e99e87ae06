"""The TFLite importer: importer.py walks the flatbuffer, ops.py converts each
builtin, vars.py resolves variables, sparse.py densifies sparse tensors.
Same floor as aot.frontend."""
