"""The workload registry and the one place a Config becomes launches (no GPU needed): every
registered workload states what bench, tune and prebuild need; steps() decodes each ordering into
StageArgs flags and launch options as the runtime expects; the one-launch (persistent) ordering
is an extension point no sm80 workload offers and the chain refuses without its launcher."""
import pytest

from cusyncgen.cuda.chain import Chain, StageFlag, launches, steps

CUSTOM_ORDER, PDL_TRIGGER, PDL_WAIT = StageFlag.CUSTOM_ORDER, StageFlag.PDL_TRIGGER, StageFlag.PDL_WAIT
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
    assert (cls.tune_mode == "measure") == hasattr(cls, "tune")   # tune calls it; "bench": chosen among bench runs


def test_unknown_workload_names_the_known_ones():
    with pytest.raises(KeyError, match="known: mlp, conv2d, attention, overhead"):
        get("gemm")


def test_prebuild_covers_every_workload_with_unique_module_names():
    from cusyncgen.commands import prebuild
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


def test_the_persistent_ordering_is_one_launch_and_refused_without_a_kernel_family():
    cfg = Config.parse("RowSync+Chain+R")
    assert cfg == Config("RowSync", Ordering.PERSISTENT, True, True) and cfg.name == "RowSync+Chain+R"
    plan = steps(cfg, 3)
    assert [s.joined for s in plan] == [False, True, True] and launches(plan) == [[0, 1, 2]]
    assert all(s.flags == CUSTOM_ORDER and not s.pdl and not s.side_stream and not s.wait_kernel for s in plan)
    assert launches(steps(Config("RowSync", Ordering.PDL), 3)) == [[0], [1], [2]]
    chain = Chain.__new__(Chain)  # no streams needed to refuse
    chain.n = 2
    with pytest.raises(CusyncError, match="no one-launch"):
        chain.run(None, cfg, [None, None])
    ran = []
    chain.run("stream", cfg, [None, None], persistent=lambda s, c, links: ran.append((s, c.name)))
    assert ran == [("stream", "RowSync+Chain+R")]
    assert all(c.ordering != Ordering.PERSISTENT for c in policy_configs(["RowSync"], SM80_ORDERINGS, w_ok=True))


def test_policy_configs_keep_the_benchmark_order():
    names = [c.name for c in policy_configs(["RowSync"], SM80_ORDERINGS, w_ok=True)]
    assert names == ["StreamSync", "PDL", "RowSync", "RowSync+T", "RowSync+PDL", "RowSync+PDL+T", "RowSync+WT",
                     "RowSync+R", "RowSync+RT", "RowSync+PDL+R", "RowSync+PDL+RT", "RowSync+WRT"]
    no_w = SM80_ORDERINGS - {Ordering.NONE}
    assert not any("W" in c.name for c in policy_configs(["RowSync"], no_w, w_ok=True))


class _Log:
    """Streams, events, stages and kernels that record what the chain does with them."""

    def __init__(self):
        self.events = []

    def stream(self, name):
        log = self

        class S:
            def wait_event(self, e):
                log.events.append((name, "wait", e.name))

            def __repr__(self):
                return name
        return S()

    def event(self, name):
        log = self

        class E:
            def record(self, s):
                log.events.append((repr(s), "record", name))
        e = E()
        e.name = name
        return e


class _Stage:
    def __init__(self, name):
        self.name, self.ticket = name, f"ticket:{name}"

    def args(self, flags):
        return (self.name, flags)


def _chain(n, log):
    chain = Chain.__new__(Chain)
    chain.n = n
    chain.streams = [log.stream(f"s{i}") for i in range(n)]
    chain._fork = log.event("fork")
    chain._done = [log.event(f"done{i}") for i in range(n)]

    class Wait:
        def launch(self, grid, args, stream):
            log.events.append((repr(stream), "wait-kernel", args[0], args[1], args[2].value, args[3].value))
    chain.wait_kernel = Wait()
    return chain


def _links(n, log, tickets=(10, 20, 30)):
    from cusyncgen.cuda.chain import Link

    def launch(i):
        return lambda s, sa, step: log.events.append((repr(s), "kernel", i, sa, step.pdl, step.early))
    return [Link(_Stage(f"k{i}"), launch(i), tickets[i]) for i in range(n)]


def test_the_wait_kernel_ordering_forks_waits_and_joins():
    log = _Log()
    main = log.stream("main")
    _chain(3, log).run(main, Config("RowSync", Ordering.WAITKERNEL, False), _links(3, log))
    assert log.events == [
        ("main", "record", "fork"),
        ("s0", "wait", "fork"), ("s0", "kernel", 0, ("k0", 0), False, False), ("s0", "record", "done0"),
        ("s1", "wait", "fork"), ("s1", "wait-kernel", "ticket:k0", "ticket:k1", 10, 20),
        ("s1", "kernel", 1, ("k1", 0), False, True), ("s1", "record", "done1"),
        ("s2", "wait", "fork"), ("s2", "wait-kernel", "ticket:k1", "ticket:k2", 20, 30),
        ("s2", "kernel", 2, ("k2", 0), False, True), ("s2", "record", "done2"),
        ("main", "wait", "done0"), ("main", "wait", "done1"), ("main", "wait", "done2")]


def test_pdl_and_stream_order_stay_on_the_callers_stream():
    for cfg, expect in ((Config("TileSync", Ordering.PDL, True),
                         [(0, ("k0", CUSTOM_ORDER | PDL_TRIGGER), False), (1, ("k1", CUSTOM_ORDER), True)]),
                        (STREAM_SYNC, [(0, ("k0", 0), False), (1, ("k1", 0), False)]),
                        (PDL_ALONE, [(0, ("k0", PDL_TRIGGER), False), (1, ("k1", PDL_WAIT), True)])):
        log = _Log()
        _chain(2, log).run(log.stream("main"), cfg, _links(2, log))
        assert log.events == [("main", "kernel", i, sa, pdl, pdl) for i, sa, pdl in expect], cfg.name


def test_w_has_no_wait_kernel_and_a_chain_checks_its_length():
    log = _Log()
    chain = _chain(2, log)
    chain.run(log.stream("main"), Config("TileSync", Ordering.NONE, False), _links(2, log))
    assert not any(e[1] == "wait-kernel" for e in log.events)
    assert ("s1", "kernel", 1, ("k1", 0), False, False) in log.events
    with pytest.raises(ValueError, match="a chain of 2 kernels got 3"):
        chain.run(log.stream("main"), STREAM_SYNC, _links(3, log))


def test_a_second_kernel_family_registers_beside_the_first(monkeypatch):
    """How a Hopper family plugs in: a class of the same name with its own kernel (and orderings);
    the default family stays what bench, tune and prebuild loop over."""
    import cusyncgen.workloads as w
    from cusyncgen.workloads.mlp import MLP
    monkeypatch.setattr(w, "FAMILIES", {n: dict(f) for n, f in w.FAMILIES.items()})

    class Hopper(MLP):
        kernel = "sm90"
        orderings = SM80_ORDERINGS | {Ordering.PERSISTENT}
    w.register(Hopper)
    assert w.get("mlp", "sm90") is Hopper and w.get("mlp") is MLP and w.kernels() == ["sm80", "sm90"]
    with pytest.raises(KeyError, match="no sm90 kernels for conv2d"):
        w.get("conv2d", "sm90")
    from cusyncgen.commands.bench import result_stem
    assert result_stem("mlp", "NVIDIA H100 80GB HBM3", {}, "sm90") == "mlp-nvidia-h100-80gb-hbm3-sm90"
    assert result_stem("conv2d", "NVIDIA H200", {"sync_warp": True}) == "conv2d-nvidia-h200-syncwarp-on"
