"""This machine and plain files: external tools and the Debian packages that
provide them, atomic writes, progress, .npy files, the installed data
directories, config validation, report documents. The lowest floor: imports
only aot.errors, aot.limits and each other."""
