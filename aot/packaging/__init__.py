"""A Graph -> a package directory: build.py (generate, package_graph), the
package's metadata, README and toolchain, firmware and footprint. Imports
every floor up to aot.executor."""
