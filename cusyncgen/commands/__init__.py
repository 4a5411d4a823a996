"""The GPU path's commands, above the workloads: ``cusyncgen bench`` and ``tune`` (bench, tune),
``python -m cusyncgen.commands.prebuild`` (every module compiled ahead of time), ``.timeline``
(per-block timelines), ``.selfcheck`` (one MLP checked once per configuration), ``.conv_costs``
(what synchronization costs a Conv2D) and ``.sm90`` (the Hopper library built, its path printed).

Layers, top to bottom: commands -> cusyncgen.workloads (one protocol, one registry) -> the
mechanism (cusyncgen.cuda: build, driver, abi, chain, the sm90 library) -> runtime_cuda. A command
may import a workload; nothing below imports a command (tests/test_layers.py checks it).
"""
