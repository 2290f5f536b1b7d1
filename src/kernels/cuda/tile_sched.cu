// Counter pairs for dynamic tile scheduling (contract: tile_sched.h).
#include "kernels/cuda/tile_sched.h"

#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace penstock::cuda {

namespace {

// Zero at module load; the kernels leave every pair zero at the end of a launch.
__device__ int g_tile_counters[kDynamicTileSlots][2];

}  // namespace

int* dynamic_tile_counter(cudaStream_t stream) {
    static std::mutex mu;
    static std::map<std::pair<int, cudaStream_t>, int*> slots;  // (device, stream) -> its pair
    static std::map<int, std::pair<int*, int>> devices;         // device -> (pair array, pairs handed out)
    int dev = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&dev));
    const std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_pair(dev, stream);
    if (const auto it = slots.find(key); it != slots.end()) return it->second;
    auto dit = devices.find(dev);
    if (dit == devices.end()) {
        void* base = nullptr;
        PENSTOCK_CUDA_CHECK(cudaGetSymbolAddress(&base, g_tile_counters));
        dit = devices.emplace(dev, std::make_pair(static_cast<int*>(base), 0)).first;
    }
    int* pair = dit->second.first + 2 * (dit->second.second++ % kDynamicTileSlots);
    slots.emplace(key, pair);
    return pair;
}

}  // namespace penstock::cuda
