"""Target-neutral loop nests the rules call: convolution walks and tiles,
windows, dense products, Winograd, int8 windows. One folder per target
family for target-specific kernels (cortex_m/)."""
