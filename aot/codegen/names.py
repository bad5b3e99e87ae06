"""Safe C spellings of arbitrary model strings: identifiers, comments, literals.

Tensor and node names come from model files and may hold anything: slashes,
quotes, `*/`, newlines, unicode, leading digits, C keywords. Everyone who
writes generated C goes through these three functions, so a hostile name can
at worst make an ugly identifier, never broken or different code.
"""
from __future__ import annotations

import re
import unicodedata

from aot.errors import UnsupportedError

# C99/C11 keywords, plus names the generated code and its headers define
# (types, macros, the libm functions we call) that a local must not shadow.
_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while bool true false asm typeof alignas alignof noreturn
static_assert thread_local complex imaginary
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t
intmax_t uintmax_t size_t ptrdiff_t wchar_t NULL errno assert offsetof main
INFINITY NAN HUGE_VAL HUGE_VALF HUGE_VALL memcpy memset memmove memcmp strlen
""".split())

# Macro families from <stdint.h>, <math.h>, <errno.h> and the identifiers the
# C standard reserves (leading `_` + capital or `__`); `aot_` is ours.
_RESERVED = re.compile(r"""^(
    (U?INT(\d+|MAX|PTR|_LEAST\d+|_FAST\d+)?_(MIN|MAX|C))
  | (PTRDIFF|SIZE|SIG_ATOMIC|WCHAR|WINT)_(MIN|MAX)
  | FP_\w* | M_\w* | MATH_\w* | E[0-9A-Z]\w*
  | aot_\w* | AOT_\w*
  | is[a-z]\w* | to[a-z]\w* | str[a-z]\w* | mem[a-z]\w* | wcs[a-z]\w*
  | (a?(sin|cos|tan)h?|exp2?|expm1|log(2|10|1p)?|sqrt|cbrt|pow|erfc?|[lt]gamma|fabs|floor
     |ceil|round|trunc|rint|nearbyint|fmod|fmin|fmax|fma|hypot|atan2|copysign|signbit
     |fpclassify|nan)[fl]?
)$""", re.X)

_MAX_LEN = 48   # well inside the 63 significant characters C99 promises


def _ascii_words(name: str) -> str:
    """Letters and digits of `name`, anything else a single underscore."""
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def c_identifier(name: str, taken: set[str]) -> str:
    """A valid, readable C identifier for `name`, unique against `taken`
    (which it joins). Deterministic: same name and taken set, same result."""
    base = _ascii_words(name)[:_MAX_LEN].rstrip("_") or "unnamed"
    if base[0].isdigit():
        base = "t" + base
    if base in _KEYWORDS or _RESERVED.match(base):
        base += "_"
    out, n = base, 1
    while out in taken:
        out = f"{base}{'' if base.endswith('_') else '_'}{n}"
        n += 1
    taken.add(out)
    return out


def c_comment(text: str) -> str:
    """`text` made safe between /* and */: one line of printable ASCII with no
    comment delimiters and no trigraphs."""
    out = []
    for ch in str(text):
        if ch in "\r\n\t\v\f":
            out.append(" ")
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append(f"<U+{ord(ch):04X}>")
    s = "".join(out)
    # `*/` ends the comment, `/*` inside one trips -Wcomment, `??x` may be a trigraph.
    while "*/" in s or "/*" in s or "??" in s:
        s = s.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?")
    return s


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "?": "?"}


def c_string(text: str) -> str:
    """A C string literal holding `text` as UTF-8. Octal escapes (at most three
    digits) cannot swallow a following character the way hex escapes do."""
    parts = ['"']
    prev = ""
    for byte in str(text).encode("utf-8"):
        ch = chr(byte)
        if ch == "?" and prev == "?":
            parts.append("\\?")        # no trigraphs
        elif ch in _ESCAPES:
            parts.append(_ESCAPES[ch])
        elif " " <= ch <= "~":
            parts.append(ch)
        else:
            parts.append(f"\\{byte:03o}")
        prev = ch
    parts.append('"')
    return "".join(parts)


def symbol_names(names, prefix: str) -> dict[str, str]:
    """Global C function names `<prefix>_<name>`, unique, in the given order."""
    taken: set[str] = set()
    pre = c_identifier(prefix, set()) if prefix else ""
    out = {}
    for name in names:
        local = c_identifier(name, taken)
        out[name] = f"{pre}_{local}" if pre else local
    return out



def kernel_symbols(funcs, prefix: str) -> dict[str, str]:
    """symbol_names of PrimFuncs, which must have distinct names."""
    names = [f.name for f in funcs]
    if len(set(names)) != len(names):
        raise UnsupportedError("two PrimFuncs share a name")
    return symbol_names(names, prefix)