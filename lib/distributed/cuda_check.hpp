// CUDA_CHECK / NCCL_CHECK: throw wt::Error naming the call, file:line, rank,
// host and the library's error string. Only for files compiled with NCCL.
#pragma once

#include "wantrain/distributed/cuda_api.hpp"

#include "wantrain/util/error.hpp"

#define CUDA_CHECK(call)                                                                                          \
  do {                                                                                                            \
    const cudaError_t wt_cuda_rc_ = (call);                                                                       \
    if (wt_cuda_rc_ != cudaSuccess)                                                                               \
      ::wt::detail::throw_library_failure("CUDA", #call, ::wt::distributed::cu().cudaGetErrorString(wt_cuda_rc_), \
                                          __FILE__, __LINE__);                                                    \
  } while (0)

#define NCCL_CHECK(call)                                                                                          \
  do {                                                                                                            \
    const ncclResult_t wt_nccl_rc_ = (call);                                                                      \
    if (wt_nccl_rc_ != ncclSuccess)                                                                               \
      ::wt::detail::throw_library_failure("NCCL", #call, ::wt::distributed::cu().ncclGetErrorString(wt_nccl_rc_), \
                                          __FILE__, __LINE__);                                                    \
  } while (0)
