// The Hopper (sm_90) sync layer, as parts a persistent warp-specialized kernel composes
// (docs/sm90.md): dependency maps (what a work item's loads read), the sync warp and its hand-off
// to the load warp, the mainloop adaptor around a CUTLASS 3 collective's load(), the post after a
// tile's stores, and the chain scheduler over n stages. Needs nvcc and, for the adaptor, CUTLASS.
#pragma once
#include "cusync.h"
#include "desc.h"
#include "sm90/channel.h"
#include "sm90/deps.h"
#include "sm90/post.h"
#include "sm90/scheduler.h"
#include "sm90/sync_warp.h"
#if defined(CUTLASS_VERSION) || __has_include("cutlass/cutlass.h")
#include "sm90/collective.h"
#include "sm90/mainloop.h"
#endif
