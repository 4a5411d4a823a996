"""Which configuration of a release-build VGG-19 chain with sync warps stops making progress
(a bench of it hung on the H200; the debug build passed). Prints each configuration before it
runs, so the last line before a timeout names it. Run under `timeout`."""
import sys

import cupy

from cusyncgen.cuda import timing
from cusyncgen.cuda.conv import ConvChain

layer, batch = sys.argv[1], int(sys.argv[2])
ch = ConvChain("vgg19", layer, batch, sync_warp=True)
st = cupy.cuda.Stream(non_blocking=True)
x, ws, bs = ch.buffers(seed=1)
ys = ch.outputs()
for cfg in ch.configs():
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
