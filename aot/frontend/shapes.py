"""Input shapes and bound inputs (docs/package.md "Shapes and bound inputs").

- input_shapes {name: dims}: the static shape of a model input whose
  dimensions are symbolic or unknown (PyTorch's "batch_size", dynamic H/W);
  a static dimension may be restated, not changed.
- bind {name: value}: a model input that is a constant in every deployment
  (a sample rate) becomes a compile-time constant and leaves the inputs, so
  constant folding (and an If on it) runs through it.

A bound value is either loose (text "16000" or "1,2,3", a Python number or
list): parsed to the input's dtype, refused when that changes a value; or
exact (a numpy array, an .npy file): its dtype and shape must be the
input's. `options_json` is what metadata.json records under source, so
that `aot run`/`aot verify` of a package load the model the same way;
`LoadOptions.from_json` reads it back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from aot.errors import ShapeError
from aot.ir.graph import Graph, TensorType, type_of

Dims = tuple[int, ...]


@dataclass(frozen=True)
class LoadOptions:
    input_shapes: Mapping[str, Dims] = field(default_factory=dict)
    bind: Mapping[str, Any] = field(default_factory=dict)  # loose value or np.ndarray

    @staticmethod
    def of(input_shapes: Mapping[str, Any] | None = None,
           bind: Mapping[str, Any] | None = None) -> "LoadOptions":
        """From the Python API's keywords: dims as "1x3x224x224" or a sequence;
        values as text, a Python number or list, a numpy array or "FILE.npy"."""
        shapes = {str(k): parse_dims(k, v) for k, v in (input_shapes or {}).items()}
        return LoadOptions(shapes, {str(k): _bind_value(k, v) for k, v in (bind or {}).items()})

    @staticmethod
    def from_json(source: Mapping[str, Any] | None) -> "LoadOptions":
        """metadata.json's source record (options_json) read back."""
        source = source or {}
        try:
            shapes = {k: parse_dims(k, v) for k, v in (source.get("input_shapes") or {}).items()}
            bind = {k: (np.asarray(v["values"], dtype=v["dtype"]).reshape(v["shape"])
                        if isinstance(v, dict) else _bind_value(k, v))
                    for k, v in (source.get("bind") or {}).items()}
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ShapeError(f"metadata.json: source.input_shapes or source.bind is malformed "
                             f"({type(e).__name__}: {e})") from None
        return LoadOptions(shapes, bind)

    def __bool__(self) -> bool:
        return bool(self.input_shapes or self.bind)

    def check_names(self, inputs: Sequence[str]) -> None:
        for option, names in (("--input-shape", self.input_shapes), ("--bind", self.bind)):
            for name in names:
                if name not in inputs:
                    raise ShapeError(f"{option} {name}: the model has no input '{name}' "
                                     f"(inputs: {', '.join(inputs) or 'none'})")


def options_json(opts: LoadOptions) -> dict[str, Any]:
    """metadata.json's record of the options (empty when none were given)."""
    out: dict[str, Any] = {}
    if opts.input_shapes:
        out["input_shapes"] = {k: list(v) for k, v in sorted(opts.input_shapes.items())}
    if opts.bind:
        out["bind"] = {k: ({"dtype": v.dtype.name, "shape": list(v.shape),
                            "values": v.ravel().tolist()} if isinstance(v, np.ndarray) else v)
                       for k, v in sorted(opts.bind.items())}
    return out


# ---- parsing ---------------------------------------------------------------------------

def parse_dims(name: str, spec: Any) -> Dims:
    text = spec if isinstance(spec, str) else "x".join(str(d) for d in spec)
    try:
        dims = tuple(int(d) for d in text.split("x")) if text else ()
    except ValueError:
        raise ShapeError(f"--input-shape {name}={text}: dimensions are positive integers "
                         "joined by 'x', e.g. 1x3x224x224") from None
    bad = [d for d in dims if d <= 0]
    if bad:
        raise ShapeError(f"--input-shape {name}={text}: dimension {bad[0]} is not positive")
    return dims


def parse_option(option: str, spec: str) -> tuple[str, str]:
    """NAME=VALUE of a command line option."""
    name, eq, value = spec.partition("=")
    if not eq or not name:
        raise ShapeError(f"{option} {spec}: expected NAME=VALUE")
    return name, value


def from_command_line(shape_specs: Sequence[str], bind_specs: Sequence[str]) -> LoadOptions:
    return LoadOptions.of(_once("--input-shape", shape_specs), _once("--bind", bind_specs))


def _once(option: str, specs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs:
        name, value = parse_option(option, spec)
        if name in out:
            raise ShapeError(f"{option} {name}: given twice ({name}={out[name]}, {spec})")
        out[name] = value
    return out


def _bind_value(name: str, value: Any) -> Any:
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, str) and value.lower().endswith(".npy"):
        from aot.support.npyfile import read_npy
        return read_npy(value, f"--bind {name}={value}")
    if isinstance(value, (str, np.ndarray)):
        return value
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float))
                                                for v in value):
        return list(value)
    raise ShapeError(f"--bind {name}: a value is a number, a list of numbers, text, a numpy "
                     f"array or an .npy file, not {type(value).__name__}")


def _loose_array(name: str, value: Any) -> np.ndarray:
    """Text or Python numbers as a 0-d (one value) or 1-d array of Python objects."""
    if not isinstance(value, str):
        return np.asarray(value, dtype=object)
    tokens = [t.strip() for t in value.split(",")]
    parsed = []
    for t in tokens:
        low = t.lower()
        if low in ("true", "false"):
            parsed.append(low == "true")
            continue
        try:
            parsed.append(int(t))
        except ValueError:
            try:
                parsed.append(float(t))
            except ValueError:
                raise ShapeError(f"--bind {name}={value}: '{t}' is not a number") from None
    return np.asarray(parsed[0] if len(parsed) == 1 and "," not in value else parsed,
                      dtype=object)


def _exact_cast(name: str, loose: np.ndarray, dtype: str) -> np.ndarray:
    """Loose values in `dtype`, refused when the cast would change one (a float
    rounds to the nearest float of the dtype, an integer must be exact)."""
    flat = loose.ravel().tolist()
    kind = np.dtype(dtype).kind
    with np.errstate(all="ignore"):
        try:
            cast = np.asarray(flat, dtype=np.float64 if kind == "f" else object).astype(dtype)
        except (OverflowError, ValueError, TypeError):
            cast = None
    if cast is not None:
        back = cast.tolist()
        if kind == "f":
            ok = all(np.isfinite(b) or not np.isfinite(a) for a, b in zip(flat, back))
        elif kind == "b":
            ok = all(a in (0, 1) for a in flat)
        else:
            ok = all(a == b for a, b in zip(flat, back))
        if ok:
            return cast.reshape(loose.shape)
    raise ShapeError(f"--bind {name}: the input is {dtype}, and the value "
                     f"{_short(flat)} does not fit {dtype}")


def _short(values: list) -> str:
    return str(values[0]) if len(values) == 1 else str(values[:8])[:-1] + \
        (", ...]" if len(values) > 8 else "]")


# ---- applying them ------------------------------------------------------------------------

def bound_shape(name: str, value: Any) -> Dims:
    """The shape a bound value gives an input whose dimensions the model leaves open."""
    arr = value if isinstance(value, np.ndarray) else _loose_array(name, value)
    return tuple(int(d) for d in arr.shape)


def input_dims(name: str, declared: Sequence[int | str | None], opts: LoadOptions,
               fallback: Mapping[str, int] | None = None) -> Dims:
    """An input's static shape from the model's declared dims (a positive int,
    a symbolic name or None), --input-shape, a bound value's shape and the
    importer's dim_params."""
    # Exporters that predate dim_param (paddle2onnx, old tf2onnx) write -1 for
    # a dimension left open; ONNX Runtime reads it so too.
    declared = [None if isinstance(d, int) and d < 0 else d for d in declared]
    for i, d in enumerate(declared):
        if d == 0:              # a real value in ONNX: an empty tensor
            raise ShapeError(f"input '{name}': dimension {i} is 0 (dimensions must be "
                             "positive: aot has no empty tensors)")
    given = opts.input_shapes.get(name)
    source = f"--input-shape {name}"
    if given is None and name in opts.bind and not all(_static(d) for d in declared):
        given, source = bound_shape(name, opts.bind[name]), f"--bind {name}"
    if given is not None:
        if len(given) != len(declared):
            raise ShapeError(f"{source}: input '{name}' has rank {len(declared)} "
                             f"({_show(declared)}), got {len(given)} dimensions")
        for i, (d, g) in enumerate(zip(declared, given)):
            if _static(d) and d != g:
                raise ShapeError(f"{source}: dimension {i} of input '{name}' is {d} in the "
                                 f"model, not {g}")
        return tuple(given)
    dims = []
    for i, d in enumerate(declared):
        if _static(d):
            dims.append(d)
        elif isinstance(d, str) and fallback and d in fallback:
            dims.append(int(fallback[d]))
        else:
            what = f"symbolic ('{d}')" if isinstance(d, str) else "unknown"
            raise ShapeError(f"input '{name}': dimension {i} is {what}; aot needs static "
                             f"shapes: give them with --input-shape {name}="
                             f"{'x'.join(str(x) if _static(x) else 'N' for x in declared)}"
                             " (Python: input_shapes=)")
    return tuple(dims)


def _static(d: int | str | None) -> bool:
    return isinstance(d, int) and d > 0


def _show(declared: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in declared) + "]"


def bound_array(name: str, value: Any, ty: TensorType) -> np.ndarray:
    """A bound value as the input's constant: its dtype and shape."""
    if isinstance(value, np.ndarray):
        if value.dtype.name != ty.dtype:
            raise ShapeError(f"--bind {name}: the input is {ty.dtype}, the value "
                             f"{value.dtype.name}")
        if tuple(value.shape) != tuple(ty.shape):
            raise ShapeError(f"--bind {name}: the input has shape {list(ty.shape)}, the value "
                             f"{list(value.shape)}")
        return np.require(value, requirements="C")
    loose = _loose_array(name, value)
    if loose.size != ty.size:
        raise ShapeError(f"--bind {name}: the input has shape {list(ty.shape)} ({ty.size} "
                         f"values), got {loose.size}")
    return np.require(_exact_cast(name, loose, ty.dtype).reshape(ty.shape), requirements="C")


def bind_inputs(graph: Graph, opts: LoadOptions) -> Graph:
    """The bound inputs of `graph` as constants; the others stay inputs."""
    if not opts.bind:
        return graph
    values = {n: bound_array(n, opts.bind[n], graph.types[n]) for n in opts.bind}
    return graph.replace(inputs=tuple(i for i in graph.inputs if i not in values),
                         constants={**graph.constants, **values},
                         types={**graph.types, **{k: type_of(v, graph.types[k].quant)
                                                  for k, v in values.items()}})


def check_static(graph: Graph, opts: LoadOptions) -> None:
    """--input-shape on a model whose inputs are all static (TFLite) restates them."""
    for name, dims in opts.input_shapes.items():
        input_dims(name, graph.types[name].shape, LoadOptions({name: dims}))
