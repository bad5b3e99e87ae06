"""Datasets for `aot verify --dataset` read through the checked .npz reader
and streamed (memory independent of the sample count, budgets refused up
front), the saved input beside a model read through the checked .npy
reader, and verify's arithmetic at infinities and NaN. Pure Python: no
board, no compiler (the end-to-end runs are in test_validate.py)."""
from __future__ import annotations

import io
import pickle
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest
from onnx import TensorProto, helper

import aot
from aot.check.dataset import load_dataset, open_dataset
from aot.check.reference import compare, saved_or_random_inputs
from aot.check.validate import Tolerance, output_metrics
from aot.errors import AotError
from aot.ir.graph import TensorType
from aot.support.npyfile import NpzArchive


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(model path, graph): y = x + x on a float32[1, 1] input."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "twice",
                          [vi("x", TensorProto.FLOAT, [1, 1])],
                          [vi("y", TensorProto.FLOAT, [1, 1])])
    path = tmp_path_factory.mktemp("twice") / "twice.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                     .SerializeToString())
    return path, aot.load(path)


def npy_bytes(header: dict, data: bytes = b"") -> bytes:
    """An .npy file: version 1.0, `header` as its dict, then `data`."""
    text = repr(header).encode("latin1")
    text += b" " * ((64 - (10 + len(text) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data


def write_npz(path, members: dict[str, bytes], compress: bool = True) -> None:
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members.items():
            z.writestr(name + ".npy", data)


def one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text and text, text
    return text


# ------------------------------------------------- the checked .npz reader

HOSTILE_MEMBERS = [
    # a header claiming 2^40 elements: np.load asked for 4 TiB ("out of memory")
    ("huge", npy_bytes({"descr": "<f4", "fortran_order": False, "shape": (1 << 40, 1, 1)},
                       b"\0" * 16), r"member 'x': the header claims float32\[1099511627776, 1, 1\]"),
    ("raw", b"hello, these are raw bytes and no .npy at all",
     r"member 'x': cannot read it as an .npy file"),
    ("pickle", npy_bytes({"descr": "|O", "fortran_order": False, "shape": (2, 1, 1)},
                         pickle.dumps([1, 2])), r"member 'x': holds Python objects"),
    ("short", npy_bytes({"descr": "<f4", "fortran_order": False, "shape": (4, 1, 1)}, b"\0" * 8),
     r"member 'x': the header claims float32\[4, 1, 1\] \(16 bytes\), the archive records 8"),
    ("header", b"\x93NUMPY\x01\x00\x10\x00{'descr': <<<<<\n", r"member 'x': cannot read it"),
    ("row", npy_bytes({"descr": "<f4", "fortran_order": False, "shape": (1, 1 << 30)}),
     r"member 'x': a row of its shape \[1, 1073741824\] holds 1073741824 elements, more than "
     r"the limit"),
]


@pytest.mark.parametrize("case", HOSTILE_MEMBERS, ids=[c[0] for c in HOSTILE_MEMBERS])
def test_hostile_npz_members_are_one_line_naming_the_member(tmp_path, tiny, case):
    name, data, message = case
    write_npz(tmp_path / "ds.npz", {"x": data})
    with pytest.raises(AotError, match=message) as e:
        open_dataset(tmp_path / "ds.npz", tiny[1])
    assert "ds.npz" in one_line(e)


def test_a_wrong_shape_is_refused_before_the_member_is_decompressed(tmp_path, tiny):
    """16 MB of zeros compress to 16 KB: its header says the shape is wrong,
    so none of the data is decompressed (np.load made all 16 MB first)."""
    np.savez_compressed(tmp_path / "ds.npz", x=np.zeros((1 << 20, 4), np.float32))
    tracemalloc.start()
    try:
        with pytest.raises(AotError, match=r"needs an array of shape \[N, 1, 1\] or \[N, 1\], "
                                           r"got \[1048576, 4\]") as e:
            open_dataset(tmp_path / "ds.npz", tiny[1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    one_line(e)
    assert peak < 1 << 20, peak


def test_npz_archive_reads_rows_a_block_at_a_time(tmp_path):
    data = np.arange(24, dtype=">i4").reshape(6, 2, 2)        # big-endian on disk
    np.savez_compressed(tmp_path / "a.npz", a=data)
    with NpzArchive(tmp_path / "a.npz") as npz:
        assert npz.names == ("a",)
        with npz.open("a") as m:
            assert m.shape == (6, 2, 2) and m.dtype == np.dtype(">i4")
            assert m.read_rows(4).tolist() == data[:4].tolist()
            assert m.read_rows(2).tolist() == data[4:].tolist()
            with pytest.raises(AotError, match="the data ends after 0 of the 16 bytes"):
                m.read_rows(1)
        with pytest.raises(AotError, match="expected 3 elements"):
            npz.read("a", (3,))
    np.savez(tmp_path / "f.npz", a=np.asfortranarray(data[:, :, 0]))
    with NpzArchive(tmp_path / "f.npz") as npz, npz.open("a") as m:
        assert m.fortran
        with pytest.raises(AotError, match="member 'a': stored in Fortran order"):
            m.read_rows(1)


def test_a_corrupt_member_fails_its_crc_in_one_line(tmp_path, tiny):
    buf = io.BytesIO()
    np.savez(buf, x=np.arange(8, dtype=np.float32).reshape(8, 1, 1))
    raw = bytearray(buf.getvalue())
    at = raw.index(b"\x00\x00\x80\x3f")             # the float 1.0, stored uncompressed
    raw[at + 3] = 0x40
    (tmp_path / "ds.npz").write_bytes(bytes(raw))
    with pytest.raises(AotError, match="member 'x': cannot read it.*Bad CRC-32") as e:
        list(open_dataset(tmp_path / "ds.npz", tiny[1]))
    one_line(e)


# ------------------------------------------------------- streaming, budgets

def test_a_dataset_streams_in_memory_independent_of_its_size(tmp_path, tiny):
    """A few KB of .npz holding 20,000 samples: iterating them all holds a
    block of samples at a time, never the whole (np.load made the whole,
    and then one reference session per sample: 100,000 took 4.2 GB); 10x
    the samples, the same peak."""
    def peak(count: int) -> int:
        x = np.arange(count, dtype=np.float32).reshape(-1, 1, 1) % 7
        np.savez_compressed(tmp_path / "ds.npz", x=x)
        assert (tmp_path / "ds.npz").stat().st_size < 8_000
        dataset = open_dataset(tmp_path / "ds.npz", tiny[1])
        assert len(dataset) == count
        del x
        tracemalloc.start()
        try:
            total, seen = 0.0, 0
            for (sample,) in dataset:
                total += float(sample[0, 0])
                seen += 1
            used = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert seen == count and total == float((np.arange(count) % 7).sum())
        return used
    small, large = peak(2_000), peak(20_000)
    assert large < small + (16 << 10), (small, large)       # the samples are 80 KB


def test_limit_takes_the_first_samples(tmp_path, tiny):
    np.savez(tmp_path / "ds.npz", x=np.arange(5, dtype=np.float32).reshape(5, 1))
    samples = load_dataset(tmp_path / "ds.npz", tiny[1], limit=3)
    assert [float(s[0][0, 0]) for s in samples] == [0.0, 1.0, 2.0]
    with pytest.raises(AotError, match="--limit must be >= 1, got 0"):
        open_dataset(tmp_path / "ds.npz", tiny[1], limit=0)


def test_a_dataset_over_the_budget_is_refused_up_front_with_its_size(tmp_path, tiny,
                                                                     monkeypatch):
    """A few KB of .npz holding a million and one samples (the 1 MB one of
    67 million ran for hours): its size is the error, --limit gets under it."""
    np.savez_compressed(tmp_path / "ds.npz", x=np.zeros((1_000_001, 1, 1), np.float32))
    with pytest.raises(AotError, match=r"ds.npz: 1000001 samples \(4000004 bytes\), more than "
                                       r"the limit of 1000000 samples") as e:
        open_dataset(tmp_path / "ds.npz", tiny[1])
    assert "--limit N" in one_line(e)
    assert len(open_dataset(tmp_path / "ds.npz", tiny[1], limit=1000)) == 1000
    monkeypatch.setenv("AOT_MAX_DATASET_BYTES", "1K")
    with pytest.raises(AotError, match="4000 bytes of samples .* limit of 1024 bytes"):
        open_dataset(tmp_path / "ds.npz", tiny[1], limit=1000)
    folder = tmp_path / "dir"
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"{i}.npy", np.zeros((1, 1), np.float32))
    monkeypatch.setenv("AOT_MAX_DATASET_SAMPLES", "2")
    with pytest.raises(AotError, match="3 samples .* limit of 2 samples"):
        open_dataset(folder, tiny[1])
    assert len(open_dataset(folder, tiny[1], limit=2)) == 2


def test_a_directory_sample_is_read_no_further_than_its_header(tmp_path, tiny):
    folder = tmp_path / "dir"
    folder.mkdir()
    np.save(folder / "0.npy", np.zeros((1, 1), np.float32))
    (folder / "1.npy").write_bytes(npy_bytes({"descr": "<f4", "fortran_order": False,
                                              "shape": (1 << 40,)}))
    with pytest.raises(AotError, match=r"1.npy: input 'x' has shape \[1, 1\], got "
                                       r"\[1099511627776\]") as e:
        open_dataset(folder, tiny[1])
    one_line(e)


def test_verify_runs_samples_in_memory_independent_of_their_count(tiny, tmp_path,
                                                                  monkeypatch):
    """The whole verify loop (read, quantize, board, reference, metrics) with
    the board and the reference stood in for by numpy: 8x the samples, the
    same peak."""
    import contextlib

    import aot.api as api
    import aot.check.reference as reference
    from aot.targets import get_board

    model, graph = tiny
    sessions = []

    class Reference:
        name = "numpy"

        def __init__(self, *args):
            sessions.append(args)

        def __call__(self, inputs):
            return [inputs[0] * 2]

    @contextlib.contextmanager
    def board(pkg, brd, count):
        yield lambda inputs: [inputs[0] + inputs[0]]
    monkeypatch.setattr(reference, "ReferenceSession", Reference)
    monkeypatch.setattr(api, "_board_session", board)

    def peak(count: int) -> int:
        np.savez_compressed(tmp_path / "ds.npz",
                            x=np.linspace(-1, 1, count, dtype=np.float32).reshape(-1, 1, 1))
        dataset = open_dataset(tmp_path / "ds.npz", graph)
        tracemalloc.start()
        try:
            _, rows, _ = api._run_samples(model, tmp_path, get_board("host"), graph, dataset,
                                          Tolerance(), {}, {}, {})
            used = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert rows[0]["ok"] and rows[0]["max_abs"] == 0.0, rows
        return used
    small, large = peak(300), peak(2400)
    assert large < small * 1.5 + (64 << 10), (small, large)
    assert len(sessions) == 2          # one reference session per run


# ------------------------------------------------------ the saved input

def test_a_saved_input_that_is_no_npy_gives_random_inputs_with_a_note(tiny, tmp_path):
    path = tmp_path / "twice.onnx"
    path.write_bytes(tiny[0].read_bytes())
    saved = tmp_path / "twice.input.npy"
    np.save(saved, np.full((1, 1), 3.0, np.float32))
    origin, inputs, notes = saved_or_random_inputs(path, tiny[1])
    assert origin == "saved" and inputs[0].tolist() == [[3.0]] and notes == []
    np.save(saved, np.array([{"a": 1}], dtype=object), allow_pickle=True)     # a pickle
    origin, _, notes = saved_or_random_inputs(path, tiny[1])
    assert origin == "random" and "holds Python objects" in notes[0]
    saved.write_bytes(b"some raw bytes, no .npy")
    origin, _, notes = saved_or_random_inputs(path, tiny[1])
    assert origin == "random" and "cannot read it as an .npy file" in notes[0]
    saved.write_bytes(npy_bytes({"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)}))
    origin, _, notes = saved_or_random_inputs(path, tiny[1])
    assert origin == "random" and "header claims 1099511627776 elements" in notes[0]
    np.save(saved, np.zeros((1, 2), np.float32))
    origin, _, notes = saved_or_random_inputs(path, tiny[1])
    assert origin == "random" and "claims 2 elements (shape [1, 2]), more than the 1 expected" \
        in notes[0]
    np.save(saved, np.zeros((1,), np.int32))
    origin, _, notes = saved_or_random_inputs(path, tiny[1])
    assert origin == "random" and "holds int32[1], input 'x' is float32[1, 1]" in notes[0]
    assert all("\n" not in n for n in notes)


# -------------------------------------------------- infinities and NaN

TY = TensorType((1, 4), "float32")


def metrics(got, want, tol=Tolerance()) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # numpy's RuntimeWarnings fail the test
        return output_metrics("y", [np.array([got], np.float32)],
                              [np.array([want], np.float32)], TY, tol)


def test_equal_infinities_are_equal():
    """inf - inf is NaN: an output equal to its reference at +-inf failed with
    max_abs_err 0.0, ok false, and numpy warnings."""
    inf = np.inf
    row = metrics([inf, -inf, 1.0, 2.0], [inf, -inf, 1.0, 2.0])
    assert row["ok"] is True and row["max_abs"] == 0.0 and row["max_abs_err"] == 0.0, row
    assert row["cosine"] == 1.0 and row["l2r"] == 0.0 and row["rmse"] == 0.0
    assert metrics([inf, 1, 1, 1], [inf, 1, 1, 1], Tolerance(atol=0, rtol=0))["ok"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = compare("y", np.array([inf, -inf]), np.array([inf, -inf]), rtol=0, atol=0)
    assert c == {"name": "y", "max_abs_err": 0.0, "ok": True}


def test_nan_where_the_reference_has_nan_is_counted_apart():
    nan, inf = np.nan, np.inf
    row = metrics([nan, 1.0, nan, 2.0], [nan, 1.0, nan, 2.0])
    assert row["ok"] is True and row["nan_matched"] == 2 and row["max_abs"] == 0.0, row
    plain = metrics([0.0, 1.0, 0.0, 2.0], [0.0, 1.0, 0.0, 2.0])
    assert "nan_matched" not in plain
    for got, want in (([nan, 1, 1, 1], [0, 1, 1, 1]), ([0, 1, 1, 1], [nan, 1, 1, 1]),
                      ([inf, 1, 1, 1], [-inf, 1, 1, 1]), ([5, 1, 1, 1], [inf, 1, 1, 1])):
        row = metrics(got, want)
        # a NaN facing a number, or an infinity facing another value: fails,
        # and its errors are no finite number (null), never a zero
        assert row["ok"] is False and row["max_abs_err"] is None and row["max_abs"] is None, row


@pytest.mark.parametrize("seed", range(40))
def test_ok_false_never_comes_with_zero_error(seed):
    rng = np.random.default_rng(seed)
    pool = np.array([0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e38, 3.0e38], np.float32)
    got, want = rng.choice(pool, 4), rng.choice(pool, 4)
    if seed % 3 == 0:
        want = got.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = metrics(got, want)
    assert not (row["ok"] is False and row["max_abs_err"] == 0.0), (got, want, row)
    assert not (row["ok"] is False and row["max_abs"] == 0.0), (got, want, row)
