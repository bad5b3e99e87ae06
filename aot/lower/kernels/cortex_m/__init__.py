"""Cortex-M int8 kernels: dsp.py (the DSP extension's SMLAD family, CMSIS-NN's
layout) and mve.py (Helium)."""
