"""Which configuration of a release-build VGG-19 chain with sync warps stops making progress
(a bench of it hung on the H200; the debug build passed). Prints each configuration before it
runs, so the last line before a timeout names it. Run under `timeout`.

    python benchmarks/hang_probe.py L3 4 [CONFIG ...] [--carveout]

--carveout sets every kernel's preferred shared-memory carveout to the maximum first: the
hypothesis that the sync-warp kernels, placed first under graph replay, leave SMs with a carveout
too small for the first Conv2D's blocks (W needs every block resident at once)."""
import sys

import cupy

from cusyncgen.cuda import driver, timing
from cusyncgen.cuda.configs import Config
from cusyncgen.workloads.conv2d import ConvChain

args = [a for a in sys.argv[1:] if not a.startswith("--")]
layer, batch, names = args[0], int(args[1]), args[2:]
ch = ConvChain("vgg19", layer, batch, sync_warp=True)
if "--carveout" in sys.argv:
    attr = driver._cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    for k in [ch.plain_kernel] + [k for ks in ch.kernels.values() for k in ks]:
        driver.check(driver._cu.cuFuncSetAttribute(driver._cu.CUfunction(driver._function_ptr(k.function)), attr, 100))
st = cupy.cuda.Stream(non_blocking=True)
x, ws, bs = ch.buffers(seed=1)
ys = ch.outputs()
for cfg in [Config.parse(n) for n in names] or ch.configs():
    print("run", cfg.name, flush=True)
    for _ in range(3):
        ch.run(st, cfg, x, ws, bs, ys)
    st.synchronize()
    print("graph", cfg.name, flush=True)
    g = timing.capture(lambda s: ch.run(s, cfg, x, ws, bs, ys), st)
    for _ in range(50):
        g.launch(st)
    st.synchronize()
print("all done", flush=True)
