// MPI implementation of Communicator for host tensors, and the MPI process lifetime (MpiSession).
#pragma once

#include <memory>

#include "parallel/communicator.h"
#include "parallel/layout.h"

namespace penstock::parallel {

// MPI_Init_thread on construction (MPI_THREAD_SERIALIZED), MPI_Finalize on destruction. One per process.
class MpiSession final {
public:
    [[nodiscard]] static Result<std::unique_ptr<MpiSession>> init(int* argc, char*** argv);
    ~MpiSession();
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;

    int world_rank() const { return rank_; }
    int world_size() const { return size_; }
    // This rank's index among the ranks on its host (OMPI_COMM_WORLD_LOCAL_RANK, else an MPI shared-memory split):
    // the GPU a multi-GPU run gives this rank.
    int local_rank() const { return local_rank_; }

private:
    MpiSession() = default;
    int rank_ = 0;
    int size_ = 1;
    int local_rank_ = 0;
};

// The groups a rank belongs to, as communicators. Creating them is collective over MPI_COMM_WORLD.
struct ProcessGroups {
    ParallelSizes sizes;
    RankCoords coords;
    std::unique_ptr<Communicator> world, pp, tp, ep, cp;
};

// Creates the MPI communicators of `sizes` for this rank (every rank must call it). Sizes are validated against the
// launched world size.
[[nodiscard]] Result<ProcessGroups> make_mpi_groups(const MpiSession& session, const ParallelSizes& sizes);

}  // namespace penstock::parallel
