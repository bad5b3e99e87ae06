"""Only conv_walk walks a convolution's or pool's output: the
scalar int8 window nest and the Cortex-M kernels walk their output planes
through conv_walk.plane_walk, the one walk (conv_walk.walk) over the border
regions, int8_dsp's pixel pairs as blocks of two columns; the float conv's
padded copy is the walk's per-image prologue."""
from __future__ import annotations

import numpy as np
import pytest

from aot.ir.graph import Node, TensorType
from aot.ir.tir import Comment, Const, For, Var, walk_stmt
from aot.lower.kernels import conv_walk
from aot.lower import lower_graph
from aot.lower.kernels.conv_walk import PAIRS, PLANE, plane_walk
from aot.lower.rules import LowerCtx
from aot.testing.kernels import compare_with_interpreter, single_op_graph
from aot.lower.kernels.windows import ConvGeom
from aot.targets import get_board
from support.zoo import conv_model, pool_model


@pytest.fixture
def walks(monkeypatch):
    """The Walk of every conv_walk.walk call made while the fixture is active."""
    seen = []
    real = conv_walk.walk

    def spy(ctx, w, *args, **kwargs):
        seen.append(w)
        return real(ctx, w, *args, **kwargs)
    monkeypatch.setattr(conv_walk, "walk", spy)
    return seen


SAME3 = dict(Padding=0, StrideH=1, StrideW=1)


@pytest.mark.parametrize("board, model, form", [
    # the scalar window nest (int8_pool.py's pools run it)
    ("host", lambda: pool_model("AVERAGE_POOL_2D", 0, 3, 2, (4, 5)), PLANE),
    # int8_dsp's 2-pixel conv: its pairs are the walk's blocks
    ("mps2-an386", lambda: conv_model("CONV_2D", [1, 6, 7, 8], [5, 3, 3, 8], [1, 6, 7, 5],
                                      SAME3, zp_in=-3), PAIRS),
    # int8_dsp's first-layer conv (window rows): one pixel by 8 channels a tile
    ("mps2-an386", lambda: conv_model("CONV_2D", [1, 9, 11, 3], [4, 3, 3, 3], [1, 5, 6, 4],
                                      dict(SAME3, StrideH=2, StrideW=2)), PLANE),
    # int8_mve's outer-product conv (depth 3)
    ("mps3-an547", lambda: conv_model("CONV_2D", [1, 9, 11, 3], [4, 3, 3, 3], [1, 5, 6, 4],
                                      dict(SAME3, StrideH=2, StrideW=2)), PLANE),
])
def test_scalar_and_cortex_m_kernels_run_the_one_walk(walks, board, model, form):
    lower_graph(model(), get_board(board).target)
    assert walks == [form]


def walked(pairs: bool) -> tuple[list[str], list[tuple]]:
    """plane_walk over a 5 x 7 output (3 x 3 window, SAME): each pixel
    block a comment of its row, columns (a constant by its value) and
    tests; and the loops, (name, start, extent, step)."""
    g = ConvGeom(n=1, h=5, w=7, oh=5, ow=7, kh=3, kw=3, groups=1, depth=1, per_group=1,
                 strides=(1, 1), dilations=(1, 1), pad_top=1, pad_left=1)
    ctx = LowerCtx(Node("Conv", "conv", ("x",), ("y",)), (TensorType((1, 5, 7, 1), "int8"),),
                   (TensorType((1, 5, 7, 1), "int8"),), get_board("host").target)

    def show(e) -> str:
        return str(e.value) if isinstance(e, Const) else "v" if isinstance(e, Var) else "v+1"

    stmt = plane_walk(ctx, g, lambda n, oy, oxs, region: Comment(
        f"{show(oy)} {[show(ox) for ox in oxs]} {[r.tests for r in region]}"), pairs)
    return ([s.text for s in walk_stmt(stmt) if isinstance(s, Comment)],
            [(f.var.name.rstrip("0123456789"), f.start, f.extent, f.step)
             for f in walk_stmt(stmt) if isinstance(f, For)])


def test_plane_walk_pairs_blocks_of_two_columns_tested_ones_too():
    texts, loops = walked(True)
    top, bottom, both, low, high, none = ((True, False), (False, False)), \
        ((False, True), (True, True)), (True, True), (True, False), (False, True), (False, False)
    assert texts == [
        f"0 ['v', 'v+1'] {[top[0], both]}", f"0 ['6'] {[top[0], both]}",   # tested row
        f"v ['0'] {[none, low]}",
        f"v ['v', 'v+1'] {[none, none]}", f"v ['5'] {[none, none]}",      # interior
        f"v ['6'] {[none, high]}",
        f"4 ['v', 'v+1'] {[bottom[0], both]}", f"4 ['6'] {[bottom[0], both]}"]
    assert loops == [("ox", 0, 6, 2), ("oy", 1, 3, 1), ("oy", 1, 3, 1), ("ox", 1, 4, 2),
                     ("oy", 1, 3, 1), ("ox", 0, 6, 2)]


def test_plane_walk_without_pairs_a_pixel_at_a_time():
    texts, loops = walked(False)
    assert all("'v+1'" not in t for t in texts) and len(texts) == 5
    assert [(name, start, extent) for name, start, extent, step in loops if name == "ox"] == [
        ("ox", 0, 7), ("ox", 1, 5), ("ox", 0, 7)]


def test_float_conv_copies_each_image_into_its_padding_as_the_walks_prologue():
    """A small map (mostly border) is copied into a zero-padded workspace
    image by image, at the head of the walk's image loop; the results
    match the interpreter for both images."""
    rng = np.random.default_rng(0)
    graph = single_op_graph("Conv", [((2, 8, 5, 5), "float32"),
                                     rng.standard_normal((16, 8, 3, 3)).astype(np.float32)],
                            dict(pads=[1, 1, 1, 1]))
    target = get_board("host").target
    (conv,) = [k.func for k in lower_graph(graph, target) if "conv" in k.func.name.lower()]
    images = [s for s in walk_stmt(conv.body)
              if isinstance(s, For) and s.var.name.rstrip("0123456789") == "n"]
    # one loop over the images: the copy, then the walk's regions
    assert len(images) == 1 and isinstance(images[0].body.stmts[0], Comment)
    assert "zero padding" in images[0].body.stmts[0].text
    assert any(isinstance(s, For) for s in images[0].body.stmts[1:])
    x = rng.standard_normal((2, 8, 5, 5)).astype(np.float32)
    assert compare_with_interpreter({"conv": (graph, {"x0": x})}, target=target) == {"conv": None}
