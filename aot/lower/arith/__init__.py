"""TIR arithmetic builders: loops, quantized arithmetic, gemmlowp-style fixed
point, 32-bit fixed point, index bounds."""
