// Communicator factory: NCCL for a CUDA backend where built, else none (host groups with staging).
#include "parallel/comm_factory.h"

#if PENSTOCK_ENABLE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace penstock::parallel {

bool nccl_available() { return PENSTOCK_ENABLE_NCCL != 0; }

Result<ProcessGroups> make_device_groups(const ProcessGroups& host, const kernels::Backend& backend) {
    ProcessGroups none;
    none.sizes = host.sizes;
    none.coords = host.coords;
    if (backend.device() != Device::kCUDA) return none;
#if PENSTOCK_ENABLE_NCCL
    const kernels::Context ctx = backend.context(nullptr);
    return make_nccl_groups(host, NcclOptions{.device = ctx.alloc->device_index(), .stream = ctx.stream});
#else
    return none;
#endif
}

}  // namespace penstock::parallel
