// The CUDA runtime and NCCL functions that the NCCL backend calls, looked up
// in the libraries that load_cuda_libraries() brought into the process: the
// programs do not link either library (cuda_libraries.hpp says why), so
// nccl_comm.cpp calls them through this table. Only for files compiled with
// NCCL (WANTRAIN_NCCL_ENABLED).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

// clang-format off
#define WANTRAIN_CUDART_FUNCTIONS(X) \
  X(cudaDeviceGetPCIBusId)           \
  X(cudaEventCreateWithFlags)        \
  X(cudaEventDestroy)                \
  X(cudaEventQuery)                  \
  X(cudaEventRecord)                 \
  X(cudaEventSynchronize)            \
  X(cudaFree)                        \
  X(cudaGetDevice)                   \
  X(cudaGetDeviceCount)              \
  X(cudaGetDeviceProperties)         \
  X(cudaGetErrorName)                \
  X(cudaGetErrorString)              \
  X(cudaGetLastError)                \
  X(cudaMemGetInfo)                  \
  X(cudaSetDevice)                   \
  X(cudaStreamCreateWithFlags)       \
  X(cudaStreamDestroy)               \
  X(cudaStreamSynchronize)           \
  X(cudaStreamWaitEvent)

#define WANTRAIN_NCCL_FUNCTIONS(X) \
  X(ncclAllGather)                 \
  X(ncclAllReduce)                 \
  X(ncclBroadcast)                 \
  X(ncclCommAbort)                 \
  X(ncclCommCount)                 \
  X(ncclCommDestroy)               \
  X(ncclCommFinalize)              \
  X(ncclCommGetAsyncError)         \
  X(ncclCommInitRankConfig)        \
  X(ncclCommSplit)                 \
  X(ncclCommUserRank)              \
  X(ncclGetErrorString)            \
  X(ncclGetLastError)              \
  X(ncclGetUniqueId)               \
  X(ncclGroupEnd)                  \
  X(ncclGroupStart)                \
  X(ncclRecv)                      \
  X(ncclReduceScatter)             \
  X(ncclSend)
// clang-format on

namespace wt::distributed {

// One pointer per function, named as the function (a versioned name that a
// header macro substitutes is substituted here too, and looked up as such).
struct CudaApi {
#define WANTRAIN_CUDA_API_MEMBER(name) decltype(&::name) name = nullptr;
  WANTRAIN_CUDART_FUNCTIONS(WANTRAIN_CUDA_API_MEMBER)
  WANTRAIN_NCCL_FUNCTIONS(WANTRAIN_CUDA_API_MEMBER)
#undef WANTRAIN_CUDA_API_MEMBER
  // cuda_runtime.h (which nccl.h includes) adds a template of this name: the C function's type.
  cudaError_t (*cudaMalloc)(void**, size_t) = nullptr;
};

// The table, resolved once; nullptr where LibTorch's CUDA backend is not
// loaded or a function is missing, with the reason in `why_not`.
const CudaApi* cuda_api(std::string* why_not = nullptr);

// The table, for code that runs only where a CUDA device was found (and so
// the libraries are loaded); an Error with the reason otherwise.
const CudaApi& cu();

}  // namespace wt::distributed
