"""Schedules apart from the lowering rules: workloads, configs, spaces.

A kernel rule asks the schedule module for its choices (`schedule.tile`,
`schedule.depthwise_tile`, `strategy.int8_accumulator`); each of those is a
*site*, marked `@tunable(site)`. Without a `Schedules` in force a site
returns its default policy's answer untouched, so a package built without
tuning records is byte-identical to one built before this module existed.

With a `Schedules` in force (`applied(...)`, a context variable), the
driver names the fused group's main op as a `Workload` and looks its
`Config` up; the config's knobs then replace fields of what each site
returns (TVM's `apply_history_best`). The same context in `record` mode
collects what every site answered by default, per workload: the starting
point of its schedule space (`space_of`).

A config is a frozen mapping site -> knobs, JSON-serialisable:
`{"tile/pixels": {"vectors": 2, "mr": 4, "max_accs": 12},
"accumulator": "pairs"}`; the empty config is the default policy.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterator, Mapping

from aot.errors import AotError

# The Tile fields a config may set, per site (schedule.Tile); `registers`
# only for the by-lane tiles sized by it.
TILE_KNOBS = ("vectors", "mr", "max_accs", "registers")
SITES = ("tile", "tile/pixels", "tile/scalar", "tile/scalar_pixels", "depthwise_tile",
         "accumulator", "int8_rows", "conv_algorithm", "int8_kernel", "unroll", "nest_tile",
         "quad_kernel", "unroll_taps", "pixel_rows")
# The int8 kernels (by their names' ends) whose nest is dsp.py's matmul.
MATMUL_KERNELS = ("_pointwise", "_fc")
# The knobs of the integer nests' (rows, channels) tile.
NEST_KNOBS = ("rows", "channels")
# Sites whose answer is a count, and the counts a config may give them
# (`unroll`: a loop of at most this many channel tiles is unrolled).
# (`unroll_taps`: 1 unrolls the window's columns in an int8 quad conv's tile.)
COUNTS = {"unroll": (0, 1, 2, 4, 8), "unroll_taps": (0, 1)}
# The int8 kernels by name (the rules' CONV and FC tables, and "scalar": the
# plain loops; tests/tune check this against the tables).
INT8_KERNELS = ("dsp_dense", "dsp_depthwise", "dsp_fc", "dsp_pointwise", "dsp_rows", "mve_dense",
                "mve_depthwise", "mve_fc", "mve_outer", "mve_pointwise", "rv32_dense",
                "rv32_depthwise", "rv32_fc", "rv32_pointwise", "rv32_rows", "scalar",
                "scalar_dense", "scalar_depthwise", "scalar_fc", "scalar_pointwise",
                "scalar_rows", "v6m_dense", "v6m_pointwise")
# The tile sites that also block over output pixels (MR x V accumulators).
PIXEL_SITES = ("tile/pixels", "tile/scalar_pixels")
# Sites whose answer is a name, and the names a config may give them.
NAMED = {"accumulator": ("pairs", "quads", "quads_u8"), "int8_rows": ("staged", "flat", "direct"),
         "conv_algorithm": ("direct", "winograd_2x2", "winograd_4x4"),
         "int8_kernel": INT8_KERNELS, "quad_kernel": ("lanes", "sixteens"),
         "pixel_rows": ("rows", "flat")}


@dataclass(frozen=True)
class Config:
    """Knobs per site: ((site, ((knob, value), ...) or a strategy name), ...),
    sorted, so equal configs are equal objects and print the same JSON."""
    sites: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def of(obj: Mapping[str, Any]) -> "Config":
        """From its JSON form, refusing what no site reads."""
        if not isinstance(obj, Mapping):
            raise AotError(f"a schedule config is a JSON object, not {obj!r:.60}")
        items = []
        for site, value in obj.items():
            if site in NAMED:
                if value not in NAMED[site]:
                    raise AotError(f"config: {site} is one of {', '.join(NAMED[site])}, "
                                   f"not {value!r:.60}")
                items.append((site, value))
            elif site in COUNTS:
                if isinstance(value, bool) or value not in COUNTS[site]:
                    raise AotError(f"config: {site} is one of "
                                   f"{', '.join(map(str, COUNTS[site]))}, not {value!r:.60}")
                items.append((site, value))
            elif site == "nest_tile":
                if not isinstance(value, Mapping) or set(value) != set(NEST_KNOBS) or not all(
                        isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 16
                        for v in value.values()):
                    raise AotError(f"config: {site} takes rows and channels from 1 to 16, "
                                   f"not {value!r:.60}")
                items.append((site, tuple(sorted(value.items()))))
            elif site in SITES:
                if not isinstance(value, Mapping) or set(value) - set(TILE_KNOBS) or not all(
                        isinstance(v, int) and not isinstance(v, bool) and v >= 1
                        for v in value.values()):
                    raise AotError(f"config: {site} takes positive integers of "
                                   f"{', '.join(TILE_KNOBS)}, not {value!r:.60}")
                items.append((site, tuple(sorted(value.items()))))
            else:
                raise AotError(f"config: unknown schedule site {site!r:.60} "
                               f"(known: {', '.join(SITES)})")
        return Config(tuple(sorted(items)))

    def as_json(self) -> dict[str, Any]:
        return {site: v if isinstance(v, (str, int)) else dict(v) for site, v in self.sites}

    def get(self, site: str):
        return dict(self.sites).get(site)

    def __str__(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True, separators=(",", ":")) \
            if self.sites else "default"


DEFAULT = Config()


@dataclass(frozen=True)
class Workload:
    """A fused group's main op as the schedule sees it: op, operand types,
    the attributes that shape its loops, the epilogue's ops and the target.
    Two kernels with equal workloads take the same config."""
    op: str
    inputs: tuple[tuple, ...]       # (shape, dtype, quantization kind) per operand
    outputs: tuple[tuple, ...]
    attrs: tuple[tuple[str, Any], ...]
    epilogue: tuple[str, ...]
    target: str

    @property
    def key(self) -> str:
        """`<op>-<16 hex digits>`: stable across runs and machines."""
        text = json.dumps([self.op, self.inputs, self.outputs, self.attrs, self.epilogue,
                           self.target], sort_keys=True, default=str)
        return f"{self.op}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"

    def describe(self) -> str:
        shapes = " ".join("x".join(map(str, s)) or "scalar" for s, _, _ in self.inputs[:2])
        return f"{self.op} {shapes} {self.inputs[0][1] if self.inputs else ''}".strip()


def _quant_kind(ty) -> str:
    q = getattr(ty, "quant", None)
    if q is None:
        return ""
    return "per-channel" if len(q.scale) > 1 else "per-tensor"


def _simple(value) -> bool:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return True
    return isinstance(value, (tuple, list)) and len(value) <= 16 and all(map(_simple, value))


def workload_of(body, anchor, target) -> Workload:
    """The Workload of the group whose loop-nest op is `anchor` (a node of
    the group's `body` graph)."""
    def sig(name):
        ty = body.types.get(name) if name else None
        return (tuple(ty.shape), ty.dtype, _quant_kind(ty)) if ty is not None else ((), "", "")
    attrs = tuple(sorted((k, v) for k, v in anchor.attrs.items() if _simple(v)))
    return Workload(anchor.op, tuple(sig(i) for i in anchor.inputs),
                    tuple(sig(o) for o in anchor.outputs), attrs,
                    tuple(n.op for n in body.nodes if n is not anchor), target.name)


@dataclass
class Schedules:
    """What the lowering applies: a config per workload key. With
    `record`, also what each site answered by default, per workload
    (`seen`: key -> (Workload, {site: default}, [kernel names]))."""
    configs: Mapping[str, Config] = field(default_factory=dict)
    record: bool = False
    seen: dict[str, tuple] = field(default_factory=dict)


@dataclass
class _Scope:
    config: Config
    defaults: dict | None     # the recorder of this workload's site defaults


_SCHEDULES: contextvars.ContextVar[Schedules | None] = contextvars.ContextVar(
    "aot_schedules", default=None)
_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "aot_schedule_scope", default=None)


@contextlib.contextmanager
def applied(schedules: Schedules | None) -> Iterator[Schedules | None]:
    """Lower with `schedules` in force (None: the default policy)."""
    token = _SCHEDULES.set(schedules)
    try:
        yield schedules
    finally:
        _SCHEDULES.reset(token)


@contextlib.contextmanager
def group_scope(body, anchor, node_name: str, target) -> Iterator[None]:
    """While one group's loop-nest op is lowered: its config in force."""
    schedules = _SCHEDULES.get()
    if schedules is None:
        yield
        return
    w = workload_of(body, anchor, target)
    defaults = None
    if schedules.record:
        entry = schedules.seen.setdefault(w.key, (w, {}, []))
        entry[2].append(node_name)
        defaults = entry[1]
    token = _SCOPE.set(_Scope(schedules.configs.get(w.key, DEFAULT), defaults))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _site_name(site: str, answer, pixels: bool) -> str:
    """`tile`'s site: "tile" or, called with pixels=True, "tile/pixels";
    answered with scalar accumulators (lanes 1), "tile/scalar" and
    "tile/scalar_pixels" (their register budget is another file's)."""
    if site != "tile":
        return site
    if answer.lanes == 1:
        return "tile/scalar_pixels" if pixels else "tile/scalar"
    return "tile/pixels" if pixels else "tile"


def tunable(site: str) -> Callable:
    """Mark a schedule function as a site: its answer passes through the
    config in force (unchanged without one)."""
    def wrap(fn):
        @functools.wraps(fn)
        def choose(*args, **kwargs):
            answer = fn(*args, **kwargs)
            scope = _SCOPE.get()
            if scope is None:
                return answer
            name = _site_name(site, answer, kwargs.get("pixels"))
            if scope.defaults is not None:
                scope.defaults.setdefault(name, answer)
            knobs = scope.config.get(name)
            if knobs is None:
                return answer
            return _override(name, answer, knobs)
        return choose
    return wrap


# The objects a site's NAMED choices stand for, registered by the module
# that defines them (strategy.py's accumulators), which sits above this one.
CHOICES: dict[str, dict[str, Any]] = {}


def choices(site: str, named: Mapping[str, Any]) -> None:
    """Registers what each of `site`'s NAMED choices stands for."""
    if tuple(named) != NAMED[site]:
        raise ValueError(f"{site}: choices {tuple(named)} are not NAMED's {NAMED[site]}")
    CHOICES[site] = dict(named)


def _override(site: str, answer, knobs):
    if site in CHOICES:
        return CHOICES[site][knobs]
    if site == "int8_rows":
        # the rule asks once per mode it offers: a config other than that
        # mode reads the rows directly
        return knobs if knobs == answer else "direct"
    if site in ("conv_algorithm", "quad_kernel", "pixel_rows", *COUNTS):
        return knobs
    if site == "nest_tile":
        k = dict(knobs)
        return (k["rows"], k["channels"])
    if site == "int8_kernel":
        if knobs not in answer.legal:
            raise AotError(f"config: int8_kernel {knobs} does not fit this layer "
                           f"(it takes {', '.join(answer.legal)})")
        return replace(answer, name=knobs)
    return replace(answer, **dict(knobs))


# ---------------------------------------------------------------- spaces

def tile_knobs(tile) -> dict[str, int]:
    """The knobs of `tile` a config may set (`registers` only where the tile
    is sized by it)."""
    return {f.name: getattr(tile, f.name) for f in fields(tile)
            if f.name in TILE_KNOBS and (f.name != "registers" or tile.registers)}


def legal_tile(site: str, knobs: Mapping[str, int], registers: int) -> bool:
    """Whether a tile's operands fit the register file: MR x V
    accumulators, V weight vectors and a broadcast input (schedule.py's
    budget), at least one pixel; by lane (`registers` set: the tile's own
    budget, Tile.fit) MR pixels of V accumulators and an input vector each
    beside 2 V weight vectors, within the target's registers; a
    weight-resident depthwise tile (`taps` weight vectors) MR pixels of an
    accumulator and two inputs each."""
    v, mr, accs = knobs["vectors"], knobs["mr"], knobs.get("max_accs", 0)
    if "taps" in knobs:
        return v == 1 and mr <= accs and knobs["taps"] + 3 * accs <= registers
    if "registers" in knobs:
        own = knobs["registers"]
        return own <= registers and 2 * v + (v + 1) * mr <= own
    if site not in PIXEL_SITES:
        return v <= max(1, registers - 1) // 2
    return mr * v <= accs and accs + v + 1 <= registers


def legal_nest(rows: int, channels: int, target) -> bool:
    """Whether an integer nest's tile fits the core's general registers
    (Target.int_registers): rows x channels accumulators, a value per row
    and per channel, 3 more for the pointers and the counter."""
    return rows * channels + rows + channels + 3 <= target.int_registers


def _nest_space(target) -> list[tuple[int, int]]:
    return [(r, k) for r in (1, 2, 3, 4) for k in (1, 2, 3, 4, 6, 8) if legal_nest(r, k, target)]


def _by_lane_space(default, registers: int) -> list[dict]:
    """By-lane tiles: V of 1-4 vectors, up to P pixels (sized as a tile
    for 2 V + (V + 1) P registers), blocks from MR pixels."""
    out = []
    for v in (1, 2, 3, 4):
        for p in range(1, registers):
            own = 2 * v + (v + 1) * p
            for mr in sorted({1, 2, p // 2 or 1, p}):
                knobs = {**tile_knobs(default), "vectors": v, "mr": mr, "registers": own}
                if mr <= p and legal_tile("tile/pixels", knobs, registers):
                    out.append(knobs)
    return out


def _weights_stay_space(default, registers: int) -> list[dict]:
    """Weight-resident depthwise tiles: blocks of MR up to P pixels of one
    channel vector, the taps' weights held beside them."""
    out = []
    for p in range(1, registers):
        for mr in sorted({1, 2, p}):
            knobs = {"vectors": 1, "mr": mr, "max_accs": p}
            if legal_tile("depthwise_tile", {**knobs, "taps": default.taps}, registers):
                out.append(knobs)
    return out


def _tile_space(site: str, default, registers: int) -> list[dict]:
    if default.weights_stay:
        return _weights_stay_space(default, registers) if default.taps else []
    if default.k_lanes > 1:
        return _by_lane_space(default, registers)
    out = []
    if site not in PIXEL_SITES:
        for v in (1, 2, 3, 4, 6, 8):
            knobs = {**tile_knobs(default), "vectors": v}
            if legal_tile(site, knobs, registers):
                out.append(knobs)
        return out
    for v in (1, 2, 3, 4):
        for pixels in range(1, registers):
            accs = v * pixels
            for mr in sorted({1, 2, pixels // 2 or 1, pixels}):
                knobs = {"vectors": v, "mr": mr, "max_accs": accs}
                if legal_tile(site, knobs, registers):
                    out.append(knobs)
    return out


def space_of(defaults: Mapping[str, Any], target) -> list[Config]:
    """The legal configs of a workload whose sites answered `defaults`,
    the default first. Each config changes one site (the sites a rule
    consults are independent choices of different loops)."""
    configs = [DEFAULT]
    if "depthwise_tile" in defaults:
        # the depthwise tile replaces the tiles the conv rule asked for first
        defaults = {k: v for k, v in defaults.items() if not k.startswith("tile")}
    for site, default in sorted(defaults.items()):
        if site == "accumulator":
            if default.name != "pairs":
                configs.append(Config.of({"accumulator": "pairs"}))
            continue
        if site == "int8_rows":
            configs.append(Config.of({"int8_rows": "direct"}))
            continue
        if site in ("conv_algorithm", "quad_kernel", "pixel_rows"):     # the other algorithms
            other = [a for a in NAMED[site] if a != default]
            configs += [Config.of({site: a}) for a in other]
            continue
        if site == "int8_kernel":
            for k in default.legal:
                if k != default.name:
                    configs.append(Config.of({site: k}))
                if k != default.name and k.endswith(MATMUL_KERNELS) and not k.startswith("mve"):
                    # its matrix product's tile with it (the nest_tile site
                    # is asked only where such a kernel runs)
                    configs += [Config.of({site: k, "nest_tile": {"rows": r, "channels": c}})
                                for r, c in _nest_space(target)]
            continue
        if site in COUNTS:
            configs += [Config.of({site: n}) for n in COUNTS[site] if n != default]
            continue
        if site == "nest_tile":
            configs += [Config.of({site: {"rows": r, "channels": k}})
                        for r, k in _nest_space(target) if (r, k) != tuple(default)]
            continue
        base = tile_knobs(default)
        registers = target.scalar_registers if default.lanes == 1 else target.vector_registers
        for knobs in _tile_space(site, default, registers):
            if knobs != base:
                configs.append(Config.of({site: knobs}))
    return list(dict.fromkeys(configs))


def answer_value(site: str, answer) -> Any:
    """A site's default answer in the form a config gives that site (a
    name, a count or a knob tuple), or None where it has none (a tile
    without knobs): what a candidate that leaves the site alone runs with."""
    if site in NAMED:
        return answer if isinstance(answer, str) else getattr(answer, "name", None)
    if site in COUNTS:
        return answer if isinstance(answer, int) and not isinstance(answer, bool) else None
    if site == "nest_tile":
        return tuple(sorted(zip(NEST_KNOBS, answer)))
    knobs = tile_knobs(answer) if hasattr(answer, "lanes") else {}
    return tuple(sorted(knobs.items())) or None


# The sites that change a kernel's algorithm rather than its tile sizes,
# in the order their alternatives are first measured.
ALGORITHM_SITES = ("conv_algorithm", "int8_kernel", "quad_kernel", "accumulator", "int8_rows",
                   "pixel_rows", "unroll", "unroll_taps")


def first_tries(space: list[Config]) -> list[Config]:
    """The configs of `space` that change only an algorithm site (the
    other convolution algorithms, int8 kernels, accumulators, row reads,
    unrolling), by ALGORITHM_SITES: a handful among a workload's hundreds
    of tile sizes, and where one pays it pays most (ResNet-8 f32's 3x3
    convs in Winograd 4x4 on the Cortex-A53 0.61 of the direct convs'
    instructions), so the search measures them before it draws tiles."""
    rank = {site: i for i, site in enumerate(ALGORITHM_SITES)}
    alone = [c for c in space if len(c.sites) == 1 and c.sites[0][0] in rank]
    return sorted(alone, key=lambda c: rank[c.sites[0][0]])
