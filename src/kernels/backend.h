// Backend factory: the execution resources behind a kernels::Context (device, stream, allocator for temporaries).
// The one place besides op dispatch that knows which backends were built.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kernels/ops.h"

namespace penstock::kernels {

class Backend {
public:
    virtual ~Backend() = default;
    virtual Device device() const = 0;
    // A Context on this backend's device and stream; `pool` serves CPU ops (may be null).
    virtual Context context(ThreadPool* pool) const = 0;
    // Waits for all queued work (CUDA: the stream).
    virtual void synchronize() const = 0;
    // e.g. "cpu" or "cuda:0 NVIDIA H200 (132 SMs, 139 GiB)".
    virtual std::string describe() const = 0;
};

// "cpu" or "cuda" (device `device_index`). Unknown names are InvalidArgument; "cuda" in a build without CUDA, or on a
// machine without a GPU, is Unavailable with the reason.
[[nodiscard]] Result<std::unique_ptr<Backend>> make_backend(std::string_view name, int device_index);

}  // namespace penstock::kernels
