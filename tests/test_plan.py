"""The memory planner: valid, deterministic, at least as good as greedy-by-size."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from aot.executor.plan import Buffer, check_plan, first_fit, lower_bound, plan_memory, ORDERINGS


def test_chain_reuses_memory():
    # a -> b -> c -> d: each buffer lives for two steps, so two slots suffice.
    bufs = [Buffer(n, 1024, i, i + 1) for i, n in enumerate("abcd")]
    plan = plan_memory(bufs)
    check_plan(bufs, plan)
    assert plan.lower_bound_bytes == 2048
    assert plan.arena_bytes == 2048


def test_alignment_respected():
    bufs = [Buffer("a", 3, 0, 1, align=1), Buffer("b", 5, 0, 1, align=64)]
    plan = plan_memory(bufs, align=64)
    check_plan(bufs, plan)
    assert plan.offsets["b"] % 64 == 0


def test_empty():
    assert plan_memory([]).arena_bytes == 0


buffers_st = st.lists(
    st.tuples(st.integers(1, 5000), st.integers(0, 20), st.integers(0, 6),
              st.sampled_from([1, 4, 16])),
    min_size=1, max_size=30,
).map(lambda xs: [Buffer(f"t{i}", s, f, f + d, a) for i, (s, f, d, a) in enumerate(xs)])


@settings(max_examples=200, deadline=None)
@given(buffers_st)
def test_random_plans_valid_and_bounded(bufs):
    plan = plan_memory(bufs, align=1)
    check_plan(bufs, plan)
    assert plan.arena_bytes >= lower_bound(bufs)
    greedy = first_fit(sorted(bufs, key=ORDERINGS["size"]))
    assert plan.arena_bytes <= max(greedy[b.name] + b.size for b in bufs)
    assert plan_memory(list(reversed(bufs)), align=1).arena_bytes == plan.arena_bytes
