"""The workload registry and the one place a Config becomes launches (no GPU needed): every
registered workload states what bench, tune and prebuild need; steps() decodes each ordering into
StageArgs flags and launch options as the runtime expects; the one-launch (persistent) ordering
is an extension point no sm80 workload offers and the chain refuses without its launcher."""
import pytest

from cusyncgen.cuda.chain import CUSTOM_ORDER, PDL_TRIGGER, PDL_WAIT, Chain, steps
from cusyncgen.cuda.configs import PDL_ALONE, SM80_ORDERINGS, STREAM_SYNC, Config, Ordering, policy_configs
from cusyncgen.errors import CusyncError
from cusyncgen.workloads import REGISTRY, Workload, get
from cusyncgen.workloads.base import BENCH_OPTIONS


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_workload_states_its_entry_points(name):
    cls = get(name)
    assert isinstance(cls, Workload) and cls.name == name
    assert cls.kernel == "sm80" and Ordering.PERSISTENT not in cls.orderings
    assert set(cls.bench_options) <= set(BENCH_OPTIONS) and cls.tune_mode in ("", "measure", "bench")


def test_unknown_workload_names_the_known_ones():
    with pytest.raises(KeyError, match="known: mlp, conv2d, attention, overhead"):
        get("gemm")


def test_prebuild_covers_every_workload_with_unique_module_names():
    from cusyncgen.cuda import prebuild
    srcs = prebuild.sources([1, 256])
    names = [s.name for s in srcs]
    assert len(names) == len(set(names))
    assert {n.split("_")[0] for n in names} == {"mlp", "conv", "attn", "copy"}
    assert [s.name for s in prebuild.sources([1], workloads=["overhead"])] == [
        "copy_chain_1056", "copy_chain_413_debug", "copy_chain_40_debug"]


def test_steps_decode_every_ordering():
    rt = Config("RowSync", Ordering.PDL, True)
    assert [(s.flags, s.pdl, s.early, s.side_stream, s.wait_kernel) for s in steps(rt, 3)] == [
        (CUSTOM_ORDER | PDL_TRIGGER, False, False, False, False), (CUSTOM_ORDER | PDL_TRIGGER, True, True, False, False),
        (CUSTOM_ORDER, True, True, False, False)]
    assert [(s.flags, s.pdl) for s in steps(PDL_ALONE, 3)] == [(PDL_TRIGGER, False), (PDL_TRIGGER | PDL_WAIT, True),
                                                               (PDL_WAIT, True)]
    assert [(s.flags, s.side_stream, s.wait_kernel, s.early) for s in steps(Config("TileSync"), 2)] == [
        (CUSTOM_ORDER, True, False, False), (CUSTOM_ORDER, True, True, True)]
    w = steps(Config("TileSync", Ordering.NONE, False), 2)
    assert all(s.side_stream and not s.wait_kernel and not s.early and s.flags == 0 for s in w)
    assert all(s.flags == 0 and not s.pdl and not s.side_stream for s in steps(STREAM_SYNC, 4))
    # a policy's kernels in stream order (the Conv2D cost diagnostic): custom order, nothing else
    assert [s.flags for s in steps(Config("RowSync", Ordering.STREAM, True), 2)] == [CUSTOM_ORDER, CUSTOM_ORDER]


def test_the_persistent_ordering_is_named_but_refused_without_a_kernel_family():
    cfg = Config.parse("RowSync+Persistent+R")
    assert cfg == Config("RowSync", Ordering.PERSISTENT, True, True) and cfg.name == "RowSync+Persistent+R"
    with pytest.raises(CusyncError, match="launched by its kernel family"):
        steps(cfg, 2)
    chain = Chain.__new__(Chain)  # no streams needed to refuse
    chain.n = 2
    with pytest.raises(CusyncError, match="no one-launch"):
        chain.run(None, cfg, [None, None])
    ran = []
    chain.run("stream", cfg, [None, None], persistent=lambda s, c, links: ran.append((s, c.name)))
    assert ran == [("stream", "RowSync+Persistent+R")]
    assert all(c.ordering != Ordering.PERSISTENT for c in policy_configs(["RowSync"], SM80_ORDERINGS, w_ok=True))


def test_policy_configs_keep_the_benchmark_order():
    names = [c.name for c in policy_configs(["RowSync"], SM80_ORDERINGS, w_ok=True)]
    assert names == ["StreamSync", "PDL", "RowSync", "RowSync+T", "RowSync+PDL", "RowSync+PDL+T", "RowSync+WT",
                     "RowSync+R", "RowSync+RT", "RowSync+PDL+R", "RowSync+PDL+RT", "RowSync+WRT"]
    no_w = SM80_ORDERINGS - {Ordering.NONE}
    assert not any("W" in c.name for c in policy_configs(["RowSync"], no_w, w_ok=True))
