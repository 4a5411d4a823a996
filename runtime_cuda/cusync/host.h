// Host side of the runtime for C++ users (the Python glue in cusyncgen.cuda does the same with
// CuPy): allocate a stage's buffers once, declare dependencies, create prioritized streams.
#pragma once
#include <cuda_runtime.h>
#include "stage.h"

namespace cusync {

// Allocates and zeroes a stage's ticket counter, its output semaphores and a debug record.
// Zeroed once: the epoch scheme never needs a reset afterwards.
inline cudaError_t alloc_stage(StageArgs* a, int stage_id, int num_out_sems, int flags = 0,
                               long long timeout_ns = 2000000000LL) {
  *a = StageArgs{};
  a->stage_id = stage_id;
  a->flags = flags;
  a->timeout_ns = timeout_ns;
  cudaError_t e;
  if ((e = cudaMalloc(&a->ticket, sizeof(unsigned long long))) != cudaSuccess) return e;
  if ((e = cudaMemset(a->ticket, 0, sizeof(unsigned long long))) != cudaSuccess) return e;
  if (num_out_sems > 0) {
    if ((e = cudaMalloc(&a->out_sems, sizeof(uint32_t) * num_out_sems)) != cudaSuccess) return e;
    if ((e = cudaMemset(a->out_sems, 0, sizeof(uint32_t) * num_out_sems)) != cudaSuccess) return e;
  }
  if ((e = cudaMalloc(&a->debug, sizeof(DebugRecord))) != cudaSuccess) return e;
  return cudaMemset(a->debug, 0, sizeof(DebugRecord));
}

inline void free_stage(StageArgs* a) {
  cudaFree(a->ticket);
  cudaFree(a->out_sems);
  cudaFree(a->debug);
  *a = StageArgs{};
}

// The consumer waits on the producer's semaphores as its input `input` (0 or 1).
inline void dependency(const StageArgs& producer, StageArgs* consumer, int input = 0) {
  if (input == 0) consumer->in_sems0 = producer.out_sems;
  else consumer->in_sems1 = producer.out_sems;
}

// Producer on the higher-priority stream, so that its blocks are dispatched first when both
// kernels have blocks ready.
inline cudaError_t create_streams(cudaStream_t* producer, cudaStream_t* consumer) {
  int least, greatest;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e != cudaSuccess) return e;
  if ((e = cudaStreamCreateWithPriority(producer, cudaStreamNonBlocking, greatest)) != cudaSuccess) return e;
  return cudaStreamCreateWithPriority(consumer, cudaStreamNonBlocking, least);
}

}  // namespace cusync
