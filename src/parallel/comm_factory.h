// The communicator factory: the one place that picks a Communicator implementation from the backend (STYLE §6).
// Host groups are MPI (make_mpi_groups); device groups are NCCL over the same ranks when the backend is CUDA and this
// build has NCCL. Callers keep both: host groups for plain data (plans, logits, settings, failure flags), device
// groups for tensors that live on the GPU.
#pragma once

#include "kernels/backend.h"
#include "parallel/mpi_communicator.h"

namespace penstock::parallel {

// Whether this build can make NCCL communicators (CUDA and NCCL found at configure time).
bool nccl_available();

// Device groups for `backend`: NCCL communicators over `host`'s groups (collective over the world) when the backend
// is CUDA and nccl_available(); otherwise groups whose communicators are all null (the caller then uses the host
// groups, and device tensors are staged through host memory: models::comm_all_reduce_sum, PipelineStage).
// The NCCL communicators enqueue on the backend's stream: the backend must outlive them.
[[nodiscard]] Result<ProcessGroups> make_device_groups(const ProcessGroups& host, const kernels::Backend& backend);

}  // namespace penstock::parallel
