"""Fixed-point primitives of TFLite's integer kernels (TFLITE_INT8.md §1-3).

Everything here is exact integer arithmetic on numpy int64 arrays, so one
call requantizes a whole tensor. The multipliers computed here are what the
code generator later bakes into kernels, so `quantize_multiplier` and friends
are plain public functions on Python floats.
"""
from __future__ import annotations

import math

import numpy as np

from aot.errors import ModelError

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


# ---------------------------------------------------------------- multipliers

def round_half_away(x: float) -> float:
    """C's std::round: halves go away from zero (Python's round goes to even).

    Not floor(|x| + 0.5): that addition rounds, so 0.49999999999999994
    would become 1. |x| - floor(|x|) is exact, so compare that instead.
    """
    a = abs(x)
    t = math.floor(a)
    return math.copysign(t + (1.0 if a - t >= 0.5 else 0.0), x)


def quantize_multiplier(m: float) -> tuple[int, int]:
    """(M, e) with m ~= M * 2**(e - 31); e > 0 is a left shift (§1, double rounding build)."""
    m = float(m)
    if m == 0.0:
        return 0, 0
    q, e = math.frexp(m)
    big = int(round_half_away(q * (1 << 31)))
    if big == 1 << 31:
        big //= 2
        e += 1
    if e < -31:
        return 0, 0
    return big, e


def quantize_multiplier_smaller_than_one(m: float) -> tuple[int, int]:
    """QuantizeMultiplierSmallerThanOneExp: requires 0 < m < 1, gives e <= 0."""
    if not 0.0 < m < 1.0:      # TFLite's Prepare refuses such scales too
        raise ModelError(f"a requantization multiplier of {m:.6g} is not in (0, 1): the "
                         f"tensors' quantization scales are inconsistent")
    return quantize_multiplier(m)


def quantize_multiplier_greater_than_one(m: float) -> tuple[int, int]:
    """QuantizeMultiplierGreaterThanOne: requires m > 1, gives e >= 0."""
    if not m > 1.0:
        raise ValueError(f"multiplier {m} is not > 1")
    return quantize_multiplier(m)


def quantize_multipliers(ms) -> tuple[np.ndarray, np.ndarray]:
    """quantize_multiplier for each entry: (int64 M array, int64 e array)."""
    pairs = [quantize_multiplier(float(m)) for m in np.ravel(ms)]
    mult = np.array([p[0] for p in pairs], dtype=np.int64)
    shift = np.array([p[1] for p in pairs], dtype=np.int64)
    return mult, shift


# ----------------------------------------------------------------- primitives

def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def wrap_int32(x) -> np.ndarray:
    """Two's-complement wrap into int32's range, kept as int64."""
    x = _i64(x)
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def srdhm(a, b) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul on int32 values: round(a*b / 2**31), ties up."""
    a, b = np.broadcast_arrays(_i64(a), _i64(b))
    out = (a * b + (1 << 30)) >> 31
    # The only overflow: (-2**31)**2 / 2**31 = 2**31, saturated.
    return np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, out)


def rdbpot(x, e) -> np.ndarray:
    """RoundingDivideByPOT: x / 2**e rounded half away from zero, 0 <= e <= 31."""
    x, e = np.broadcast_arrays(_i64(x), _i64(e))
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def satshl(x, k: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT<k> for k > 0: x * 2**k saturated to int32."""
    x = _i64(x)
    limit = (1 << (31 - k)) - 1
    return np.where(x > limit, INT32_MAX, np.where(x < -limit, INT32_MIN, x << k))


def mbqm(x, mult, shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplier (double rounding): x * M * 2**(shift-31).

    mult and shift broadcast against x (per-channel requantization). The
    left shift happens in int32 without saturation, so it wraps like C.
    """
    x, mult, shift = np.broadcast_arrays(_i64(x), _i64(mult), _i64(shift))
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rdbpot(srdhm(wrap_int32(x << left), mult), right)


def mbqm_smaller_than_one(x, mult, shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplierSmallerThanOneExp (shift <= 0)."""
    return rdbpot(srdhm(x, mult), -_i64(shift))


def mbqm_greater_than_one(x, mult, shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplierGreaterThanOne (shift >= 0)."""
    return srdhm(wrap_int32(_i64(x) << _i64(shift)), mult)


def mbqm_int64(x, mult, shift) -> np.ndarray:
    """The int64-input overload used by the 16x8 kernels (one rounding, 16-bit multiplier)."""
    x, mult, shift = np.broadcast_arrays(_i64(x), _i64(mult), _i64(shift))
    m16 = np.where(mult < 0x7FFF0000, (mult + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - shift
    # x * m16 fits in int64 for the |x| < 2**47 these kernels produce.
    out = (x * m16 + (np.int64(1) << (total - 1))) >> total
    return wrap_int32(out)


def clamp(x, lo: int, hi: int) -> np.ndarray:
    return np.clip(_i64(x), lo, hi)


def round_half_away_array(x: np.ndarray) -> np.ndarray:
    """std::round on an array (float in, same float dtype out); exact, as
    round_half_away (0.49999997f stays 0, odd floats above 2**23 stay)."""
    a = np.abs(x)
    t = np.floor(a)
    return np.copysign(t + (a - t >= x.dtype.type(0.5)).astype(x.dtype), x)


# ---------------------------------------------------------- prepare helpers

ACTIVATIONS = ("NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT", "SIGMOID")


def _quantize_f32(f: float, scale: float, zero_point: int) -> int:
    # The division is done in float32, then std::round.
    q = np.float32(f) / np.float32(scale)
    return int(zero_point) + int(round_half_away(float(q)))


def activation_range(activation: str, scale: float, zero_point: int,
                     qmin: int = -128, qmax: int = 127) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: the fused clamp in the output's domain."""
    if activation == "RELU":
        return max(qmin, _quantize_f32(0.0, scale, zero_point)), qmax
    if activation == "RELU6":
        return (max(qmin, _quantize_f32(0.0, scale, zero_point)),
                min(qmax, _quantize_f32(6.0, scale, zero_point)))
    if activation == "RELU_N1_TO_1":
        return (max(qmin, _quantize_f32(-1.0, scale, zero_point)),
                min(qmax, _quantize_f32(1.0, scale, zero_point)))
    return qmin, qmax


def conv_output_size(size: int, kernel: int, stride: int, dilation: int, padding: str) -> int:
    eff = (kernel - 1) * dilation + 1
    if padding == "SAME":
        return (size + stride - 1) // stride
    return (size - eff) // stride + 1


def compute_padding(size: int, kernel: int, stride: int, dilation: int,
                    padding: str) -> tuple[int, int, int]:
    """ComputePaddingHeightWidth for one spatial dim: (out, pad_before, pad_after).

    TFLite puts the odd extra padding row/column after (bottom/right).
    """
    out = conv_output_size(size, kernel, stride, dilation, padding)
    eff = (kernel - 1) * dilation + 1
    total = max(0, (out - 1) * stride + eff - size)
    return out, total // 2, total - total // 2


# ------------------------------------------------ int16 sigmoid / tanh (LSTM)

# sigmoid(i/24) in unsigned Q0.16, i = 0..255: tflite-micro's
# sigmoid_table_uint16 (kernels/internal/common.h), transcribed as data.
# 44 entries are one above round(65536*sigmoid(i/24)): do not regenerate.
SIGMOID_TABLE_UINT16 = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498,
    40149, 40794, 41432, 42064, 42688, 43304, 43912, 44511, 45102, 45683, 46255,
    46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409, 51865,
    52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174,
    56503, 56823, 57133, 57433, 57724, 58007, 58280, 58544, 58800, 59048, 59288,
    59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110, 61279, 61441,
    61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886,
    62990, 63090, 63186, 63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835,
    63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308, 64357, 64405, 64450,
    64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845,
    64873, 64900, 64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097,
    65115, 65132, 65149, 65164, 65179, 65194, 65208, 65221, 65234, 65246, 65258,
    65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360,
    65367, 65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425,
    65429, 65433, 65438, 65442, 65445, 65449, 65453, 65456, 65459, 65462, 65465,
    65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508,
    65509, 65510, 65511, 65512, 65513, 65514, 65515, 65516, 65517, 65517, 65518,
    65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524, 65525,
    65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529,
    65529, 65529, 65530, 65530, 65530, 65530, 65531, 65531, 65531, 65531, 65531,
    65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533, 65533, 65533,
    65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534,
    65534, 65534, 65535
], dtype=np.int64)


def sigmoid16(x) -> np.ndarray:
    """int16 Q3.12 -> Q0.15 logistic, the table interpolation of §11 (SIG16)."""
    return sigmoid16_scaled(3 * _i64(x))


def sigmoid16_scaled(v) -> np.ndarray:
    """SIG16's interpolation on v, the input already scaled by 3 * 2**12 (so
    +-2**17 is +-10.7): the int16 LOGISTIC kernel scales its own way first."""
    v = _i64(v)
    a = np.abs(v)
    j = a >> 9
    f = a & 511
    jj = np.minimum(j, 254)
    t = SIGMOID_TABLE_UINT16
    r = np.where(j >= 255, 32767 << 10, t[jj] * 512 + f * (t[jj + 1] - t[jj]))
    return np.where(v >= 0, (r + 512) >> 10, ((1 << 25) - r + 511) >> 10)


def tanh16(x, p: int) -> np.ndarray:
    """int16 with 2**p scale -> Q0.15 tanh (§11 TANH16)."""
    x = _i64(x)
    k = 12 + p
    if k >= 0:
        v = x * 3 * (1 << k)
    else:
        v = (3 * x + (1 << (-k - 1))) >> -k
    return tanh16_scaled(v)


def tanh16_scaled(v) -> np.ndarray:
    """TANH16's interpolation on v, the input already scaled by 3 * 2**12."""
    v = _i64(v)
    a = np.abs(v)
    j = a >> 8
    f = a & 255
    jj = np.minimum(j, 254)
    t = SIGMOID_TABLE_UINT16
    r = np.where(j >= 255, 65535 << 8, t[jj] * 256 + f * (t[jj + 1] - t[jj]))
    return np.where(v >= 0, (r - (1 << 23) + 128) >> 8, ((1 << 23) - r + 127) >> 8)


# gemmlowp's exp, shared by the softmax and the lookup tables of
# aot/ops/quant/tflite_int8.py and tflite_lut.py
def exp_poly(u: np.ndarray) -> np.ndarray:
    """exp on [-1/4, 0) in Q0.31 (gemmlowp's Taylor expansion around -1/8)."""
    x = u + (1 << 28)
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    v = rdbpot(srdhm(rdbpot(x4, 2) + x3, 715827883) + x2, 1)
    return 1895147668 + srdhm(1895147668, x + v)


_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
           (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a: np.ndarray, int_bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values for a <= 0 in Q(int_bits).(31-int_bits), result Q0.31."""
    frac = 31 - int_bits
    quarter = 1 << (frac - 2)
    r = (a & (quarter - 1)) - quarter
    y = exp_poly(satshl(r, int_bits))
    rem = r - a
    for e, c in _BARREL:
        if int_bits > e:
            y = np.where((rem >> (frac + e)) & 1, srdhm(y, c), y)
    return np.where(a == 0, INT32_MAX, y)
