"""A YOLOv8-style detector as ONNX, built with onnx.helper (never shipped).

The structure is what PyTorch's exporter writes for ultralytics' YOLOv8
(`yolov8n.yaml`: width 0.25, depth 0.33) in eval mode:

- Conv blocks: Conv (batch norm folded into weight and bias, as torch.onnx
  does in eval mode; `batch_norm=True` writes Conv + BatchNormalization
  instead) and SiLU as Sigmoid + Mul;
- C2f: a 1x1 Conv, Split into two halves, n bottlenecks (two 3x3 Convs,
  residual Add in the backbone), Concat of all the pieces, a 1x1 Conv;
- SPPF: a 1x1 Conv, three chained MaxPool 5x5 stride 1 pad 2, Concat, Conv;
- the neck: Resize (nearest, scales 2, asymmetric/floor: torch's Upsample)
  and Concat with the backbone's features;
- Detect: per scale a box branch (4 x 16 bins) and a class branch (80),
  Concat per scale, Reshape to [1, 144, HW], Concat of the scales, Split
  into box and class; DFL: Reshape [1, 4, 16, A], Transpose, Softmax over
  the 16 bins, a 1x1 Conv with the fixed weights 0..15, Reshape [1, 4, A];
  box decode against the anchor points (Split, Sub, Add, Div, Concat, Mul
  by the strides) and Sigmoid of the class scores, Concat: [1, 84, A].

Weights come from a fixed seed, scaled by fan-in so activations stay near
unit range through the whole net (the output boxes are a few hundred
pixels, the class scores spread over (0, 1)).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
NUM_CLASSES = 80
REG_MAX = 16            # DFL bins per box side
STRIDES = (8, 16, 32)


class _Builder:
    """Nodes and initializers of one graph, with unique names."""

    def __init__(self, seed: int, batch_norm: bool):
        self.rng = np.random.default_rng(seed)
        self.batch_norm = batch_norm
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count: dict[str, int] = {}

    def name(self, stem: str) -> str:
        n = self.count.get(stem, 0)
        self.count[stem] = n + 1
        return f"{stem}_{n}"

    def const(self, stem: str, value: np.ndarray) -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op: str, inputs: list[str], n_out: int = 1, **attrs) -> list[str]:
        name = self.name(op.lower())
        outs = [f"{name}_out{i}" if n_out > 1 else f"{name}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs

    def conv(self, x: str, c_in: int, c_out: int, k: int, s: int = 1, act: bool = True,
             gain: float = 1.0) -> str:
        """Conv (+ BN) (+ SiLU): ultralytics' Conv block, or with act=False
        the plain Conv2d of the detect head's last layer."""
        fan_in = c_in * k * k
        w = self.rng.standard_normal((c_out, c_in, k, k)) * (gain * np.sqrt(2.0 / fan_in))
        b = self.rng.standard_normal(c_out) * 0.1
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4)
        if self.batch_norm and act:
            y, = self.op("Conv", [x, self.const("w", w.astype(np.float32))], **attrs)
            params = [self.rng.uniform(0.8, 1.2, c_out), b, self.rng.standard_normal(c_out) * 0.05,
                      self.rng.uniform(0.8, 1.2, c_out)]
            y, = self.op("BatchNormalization",
                         [y] + [self.const("bn", p.astype(np.float32)) for p in params],
                         epsilon=1e-3)
        else:
            y, = self.op("Conv", [x, self.const("w", w.astype(np.float32)),
                                  self.const("b", b.astype(np.float32))], **attrs)
        if not act:
            return y
        s_, = self.op("Sigmoid", [y])
        return self.op("Mul", [y, s_])[0]

    def split(self, x: str, sizes: list[int], axis: int) -> list[str]:
        return self.op("Split", [x, self.const("split", np.array(sizes, np.int64))],
                       n_out=len(sizes), axis=axis)

    def concat(self, xs: list[str], axis: int) -> str:
        return self.op("Concat", xs, axis=axis)[0]

    def c2f(self, x: str, c_in: int, c_out: int, n: int, shortcut: bool) -> str:
        c = c_out // 2
        y = self.split(self.conv(x, c_in, 2 * c, 1), [c, c], axis=1)
        for _ in range(n):
            h = self.conv(self.conv(y[-1], c, c, 3), c, c, 3, gain=0.5 if shortcut else 1.0)
            y.append(self.op("Add", [y[-1], h])[0] if shortcut else h)
        return self.conv(self.concat(y, axis=1), (2 + n) * c, c_out, 1)

    def sppf(self, x: str, c_in: int, c_out: int) -> str:
        c = c_in // 2
        y = [self.conv(x, c_in, c, 1)]
        for _ in range(3):
            y += self.op("MaxPool", [y[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2] * 4)
        return self.conv(self.concat(y, axis=1), 4 * c, c_out, 1)

    def upsample(self, x: str) -> str:
        scales = self.const("scales", np.array([1, 1, 2, 2], np.float32))
        return self.op("Resize", [x, "", scales], mode="nearest",
                       coordinate_transformation_mode="asymmetric", nearest_mode="floor")[0]


def _anchors(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Anchor points (cell centres, in cells) [1, 2, A] and strides [1, A]."""
    points, strides = [], []
    for s in STRIDES:
        n = size // s
        yy, xx = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
        points.append(np.stack([xx.reshape(-1), yy.reshape(-1)]))
        strides.append(np.full(n * n, s))
    return (np.concatenate(points, 1)[None].astype(np.float32),
            np.concatenate(strides)[None].astype(np.float32))


def _detect(b: _Builder, feats: list[tuple[str, int]], size: int) -> str:
    c_box = max(16, feats[0][1] // 4, 4 * REG_MAX)
    c_cls = max(feats[0][1], min(NUM_CLASSES, 100))
    per_scale = []
    for x, c in feats:
        box = b.conv(b.conv(b.conv(x, c, c_box, 3), c_box, c_box, 3), c_box, 4 * REG_MAX, 1,
                     act=False)
        cls = b.conv(b.conv(b.conv(x, c, c_cls, 3), c_cls, c_cls, 3), c_cls, NUM_CLASSES, 1,
                     act=False)
        y = b.concat([box, cls], axis=1)
        shape = b.const("shape", np.array([1, 4 * REG_MAX + NUM_CLASSES, -1], np.int64))
        per_scale.append(b.op("Reshape", [y, shape])[0])
    a = sum((size // s) ** 2 for s in STRIDES)
    box, cls = b.split(b.concat(per_scale, axis=2), [4 * REG_MAX, NUM_CLASSES], axis=1)
    # DFL: the expected bin under a softmax over each side's 16 bins.
    d = b.op("Reshape", [box, b.const("shape", np.array([1, 4, REG_MAX, a], np.int64))])[0]
    d = b.op("Transpose", [d], perm=[0, 2, 1, 3])[0]
    d = b.op("Softmax", [d], axis=1)[0]
    bins = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
    d = b.op("Conv", [d, b.const("dfl", bins)], kernel_shape=[1, 1])[0]
    d = b.op("Reshape", [d, b.const("shape", np.array([1, 4, a], np.int64))])[0]
    # dist2bbox, xywh: centre and size from the distances to the four sides.
    points, strides = _anchors(size)
    anchor, stride = b.const("anchors", points), b.const("strides", strides)
    lt, rb = b.split(d, [2, 2], axis=1)
    x1y1 = b.op("Sub", [anchor, lt])[0]
    x2y2 = b.op("Add", [anchor, rb])[0]
    centre = b.op("Div", [b.op("Add", [x1y1, x2y2])[0],
                          b.const("two", np.array(2, np.float32))])[0]
    wh = b.op("Sub", [x2y2, x1y1])[0]
    boxes = b.op("Mul", [b.concat([centre, wh], axis=1), stride])[0]
    return b.op("Concat", [boxes, b.op("Sigmoid", [cls])[0]], axis=1)[0]


def yolov8(size: int = 320, width: float = 0.25, depth: float = 0.33, seed: int = 0,
           batch_norm: bool = False, max_channels: int = 1024) -> onnx.ModelProto:
    """The detector for a size x size RGB image: input `images` [1, 3, size,
    size], output `output0` [1, 84, A] (A anchors over strides 8, 16, 32)."""
    if size % 32:
        raise ValueError(f"yolov8: size must be a multiple of 32, got {size}")
    b = _Builder(seed, batch_norm)

    def ch(c: int) -> int:
        return int(np.ceil(min(c, max_channels) * width / 8) * 8)

    def n(k: int) -> int:
        return max(round(k * depth), 1)

    x = b.conv("images", 3, ch(64), 3, 2)                       # P1/2
    x = b.conv(x, ch(64), ch(128), 3, 2)                         # P2/4
    x = b.c2f(x, ch(128), ch(128), n(3), True)
    x = b.conv(x, ch(128), ch(256), 3, 2)                        # P3/8
    p3 = b.c2f(x, ch(256), ch(256), n(6), True)
    x = b.conv(p3, ch(256), ch(512), 3, 2)                       # P4/16
    p4 = b.c2f(x, ch(512), ch(512), n(6), True)
    x = b.conv(p4, ch(512), ch(1024), 3, 2)                      # P5/32
    x = b.c2f(x, ch(1024), ch(1024), n(3), True)
    p5 = b.sppf(x, ch(1024), ch(1024))
    # neck: top-down, then bottom-up
    x = b.concat([b.upsample(p5), p4], axis=1)
    h4 = b.c2f(x, ch(1024) + ch(512), ch(512), n(3), False)
    x = b.concat([b.upsample(h4), p3], axis=1)
    o3 = b.c2f(x, ch(512) + ch(256), ch(256), n(3), False)
    x = b.concat([b.conv(o3, ch(256), ch(256), 3, 2), h4], axis=1)
    o4 = b.c2f(x, ch(256) + ch(512), ch(512), n(3), False)
    x = b.concat([b.conv(o4, ch(512), ch(512), 3, 2), p5], axis=1)
    o5 = b.c2f(x, ch(512) + ch(1024), ch(1024), n(3), False)
    _detect(b, [(o3, ch(256)), (o4, ch(512)), (o5, ch(1024))], size)

    anchors = sum((size // s) ** 2 for s in STRIDES)
    b.nodes[-1].output[0] = "output0"        # the final Concat, named as ultralytics names it
    graph = helper.make_graph(
        b.nodes, "yolov8n",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT,
                                       [1, 4 + NUM_CLASSES, anchors])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="aot-testing-yolo")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
