"""The memory a package's program takes before it runs, checked by name
before anything is compiled or linked.

The bench harness aot links holds every buffer statically: the weights
(read-only data), the arena and the model state (the library's), and the
harness's own input and output buffers (with --checks, a second arena and a
copy of each input). Two facts bound them, each stated once:

- a Linux target's code model: the code and static data of a program must
  lie within what its instructions address (`static_data_bytes` of
  targets/*.toml; x86-64's small code model: 2 GiB). Past it the link fails
  with relocations "truncated to fit" in the C library;
- a board's memories (boards/*.toml `flash_bytes`, `ram_bytes`): the
  library's arena and state within its RAM, the weights within its flash;
  on a bare-metal board the harness is the firmware, so its input and
  output buffers share that RAM too, and where the board's [firmware]
  table says so (`reserved_ram_bytes`, `reserved_flash_bytes`: a small
  board, where they matter) what the harness's own code, newlib, the heap
  and the stack take is held back from them.
"""
from __future__ import annotations

from dataclasses import dataclass

from aot.errors import BudgetError
from aot.ir.graph import Graph
from aot.targets import Board


@dataclass(frozen=True)
class StaticData:
    """Bytes of each kind of static buffer in a package's linked program."""
    weights: int
    arena: int = 0
    state: int = 0
    inputs: int = 0
    outputs: int = 0
    checks: int = 0     # --checks: the harness's own arena and its copies of the inputs

    def parts(self, *kinds: str) -> str:
        names = {"weights": "weights", "arena": "arena", "state": "state",
                 "inputs": "harness inputs", "outputs": "harness outputs",
                 "checks": "--checks arena and input copies"}
        shown = [f"{names[k]} {size_text(getattr(self, k))}" for k in kinds if getattr(self, k)]
        return ", ".join(shown) or "nothing"

    @property
    def ram(self) -> int:
        return self.arena + self.state + self.inputs + self.outputs + self.checks


RAM_KINDS = ("arena", "state", "inputs", "outputs", "checks")
ALL_KINDS = ("weights", *RAM_KINDS)


def size_text(nbytes: int) -> str:
    """`1.0 GiB`, `512.0 KiB`, `96 bytes`."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} bytes"


def weights_room(board: Board) -> int:
    """The flash a model's weights may take on `board`: all of it but what
    its firmware keeps (boards/*.toml reserved_flash_bytes)."""
    return board.flash_bytes - int(board.firmware.get("reserved_flash_bytes", 0))


def static_data(graph: Graph, weights: int | None = None, arena: int = 0,
                checks: bool = False) -> StaticData:
    """A graph's static buffers; before planning (arena 0) a lower bound.
    weights: the linked params' bytes (default: the graph's constants)."""
    inputs = sum(graph.types[n].nbytes for n in graph.inputs)
    return StaticData(
        weights=sum(int(a.nbytes) for a in graph.constants.values()) if weights is None
        else weights,
        arena=arena, state=sum(graph.types[v].nbytes for v in graph.variables),
        inputs=inputs, outputs=sum(graph.types[n].nbytes for n in graph.outputs),
        checks=arena + inputs if checks else 0)


def _remedies(data: StaticData, io_in_arena: bool, pools_possible: bool) -> str:
    ways = []
    if io_in_arena:
        ways.append("package without --io-in-arena (it copies the inputs and outputs into "
                    "the arena)")
    if data.checks:
        ways.append("package without --checks")
    if pools_possible and data.arena:
        ways.append("--pools (the arena over the board's other RAM banks)")
    ways.append("give the model smaller inputs (--input-shape for a symbolic dimension)")
    return "; ".join(ways)


def _kept(nbytes: int, memory: str) -> str:
    """`, N of them the firmware's own` where a board holds some back."""
    if not nbytes:
        return ""
    what = ("the harness's code and newlib" if memory == "flash"
            else "the harness's data, newlib, the heap and the stack")
    return f", {nbytes} of them kept for {what}: firmware.reserved_{memory.lower()}_bytes"


def check_static_data(board: Board, data: StaticData, io_in_arena: bool = False,
                      pools: bool = False) -> None:
    """Refuse, naming the parts and the limit, a program that cannot be
    linked for `board` or does not fit its memories. Before planning
    (data.arena 0) it refuses what no plan can make fit."""
    target = board.target
    limit = target.static_data_bytes
    total = data.weights + data.ram
    if limit and total >= limit:
        raise BudgetError(
            f"the program's static data of {size_text(total)} ({data.parts(*ALL_KINDS)}) "
            f"does not fit the {size_text(limit)} of code and static data that the code model "
            f"of target '{target.name}' addresses (board '{board.name}'); "
            f"{_remedies(data, io_in_arena, False)}")
    flash_kept = int(board.firmware.get("reserved_flash_bytes", 0))
    if data.weights > weights_room(board):
        raise BudgetError(f"the model's weights ({data.weights} bytes) do not fit the flash of "
                          f"board '{board.name}' ({board.flash_bytes} bytes"
                          f"{_kept(flash_kept, 'flash')})")
    if pools:       # each pool fits its bank: pooled_memory_plan says so or raises
        return
    # A Linux harness's buffers are the caller's in a real program: the
    # board's RAM bounds the library's own. Bare metal: the harness is the firmware.
    kinds = RAM_KINDS if board.firmware else ("arena", "state")
    ram = sum(getattr(data, k) for k in kinds)
    ram_kept = int(board.firmware.get("reserved_ram_bytes", 0))
    if ram > board.ram_bytes - ram_kept:
        what = "the arena, state and harness buffers" if board.firmware else "the arena and state"
        raise BudgetError(
            f"{what} ({data.parts(*kinds)}: {ram} bytes) do not fit the RAM of board "
            f"'{board.name}' ({board.ram_bytes} bytes{_kept(ram_kept, 'RAM')}); "
            f"{_remedies(data, io_in_arena, _banks(board) > 1 and bool(board.firmware))}")


def _banks(board: Board) -> int:
    """The banks of RAM an arena may take (--pools spreads it over them)."""
    return sum(1 for r in board.regions if r.arena)
