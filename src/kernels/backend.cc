// Backend factory.
#include "kernels/backend.h"

#include <cstdlib>
#include <string_view>

#if PENSTOCK_ENABLE_CUDA
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/device.h"
#endif

namespace penstock::kernels {

namespace {

class CpuBackend final : public Backend {
public:
    Device device() const override { return Device::kCPU; }
    Context context(ThreadPool* pool) const override { return Context{.device = Device::kCPU, .pool = pool}; }
    void synchronize() const override {}
    std::string describe() const override { return "cpu"; }
};

#if PENSTOCK_ENABLE_CUDA
class CudaBackend final : public Backend {
public:
    CudaBackend(int device, cuda::DeviceProperties props)
        : props_(std::move(props)),
          stream_(device, cuda::Stream::Priority::kHigh),
          side_stream_(device),
          alloc_(device) {}
    Device device() const override { return Device::kCUDA; }
    // The side stream for kernels::Fork unless PENSTOCK_SIDE_STREAM=0 (an A/B switch: forks then run in line).
    Context context(ThreadPool* pool) const override {
        return Context{.device = Device::kCUDA,
                       .pool = pool,
                       .stream = stream_.handle(),
                       .alloc = &alloc_,
                       .side_stream = side_stream_enabled() ? side_stream_.handle() : nullptr};
    }
    void synchronize() const override { stream_.synchronize(); }
    std::string describe() const override {
        return "cuda:" + std::to_string(stream_.device()) + " " + props_.name + " (" + std::to_string(props_.n_sms) +
               " SMs, " + std::to_string(props_.total_memory_bytes >> 30) + " GiB)";
    }

private:
    static bool side_stream_enabled() {
        static const bool enabled = [] {
            const char* v = std::getenv("PENSTOCK_SIDE_STREAM");
            return v == nullptr || std::string_view(v) != "0";
        }();
        return enabled;
    }

    cuda::DeviceProperties props_;
    cuda::Stream stream_;
    // kernels::Fork's (Context::side_stream), at a lower priority than stream_: where both have thread blocks waiting,
    // the compute stream's (the critical path) go first and the side stream's fill the SMs left over.
    cuda::Stream side_stream_;
    mutable cuda::CudaCachingAllocator alloc_;
};
#endif

}  // namespace

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, int device_index) {
    if (name == "cpu") return std::unique_ptr<Backend>(std::make_unique<CpuBackend>());
    if (name != "cuda") return invalid_argument("--backend must be cpu or cuda, got '" + std::string(name) + "'");
#if PENSTOCK_ENABLE_CUDA
    PENSTOCK_ASSIGN_OR_RETURN(int count, cuda::device_count());
    if (device_index < 0 || device_index >= count) {
        return Status(StatusCode::kUnavailable, "CUDA device " + std::to_string(device_index) + " does not exist (" +
                                                    std::to_string(count) + " visible)");
    }
    PENSTOCK_ASSIGN_OR_RETURN(cuda::DeviceProperties props, cuda::device_properties(device_index));
    return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(device_index, std::move(props)));
#else
    (void)device_index;
    return Status(StatusCode::kUnavailable, "--backend cuda: this build has no CUDA backend (no nvcc at build time)");
#endif
}

}  // namespace penstock::kernels
