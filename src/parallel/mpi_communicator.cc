// MPI communicators. Errors return (MPI_ERRORS_RETURN) and become Status values naming the call and group.
#include "parallel/mpi_communicator.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "core/check.h"

namespace penstock::parallel {

namespace {

std::string mpi_error(int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    return std::string(text, static_cast<size_t>(len));
}

// Element type for reductions; MPI_BYTE with a byte count for pure data movement.
bool reduce_type(DType d, MPI_Datatype* t) {
    switch (d) {
        case DType::kF32:
            *t = MPI_FLOAT;
            return true;
        case DType::kI32:
            *t = MPI_INT32_T;
            return true;
        case DType::kI64:
            *t = MPI_INT64_T;
            return true;
        case DType::kBF16:
        case DType::kF16:
        case DType::kF8E4M3:
        case DType::kE8M0:
        case DType::kFP4E2M1:
        case DType::kI8:
        case DType::kU8:
        case DType::kBool:
            return false;
    }
    return false;
}

MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::kSum:
            return MPI_SUM;
        case ReduceOp::kMax:
            return MPI_MAX;
    }
    return MPI_SUM;
}

class MpiPendingOp final : public PendingOp {
public:
    MpiPendingOp(MPI_Request req, std::string what, size_t expect_bytes)
        : req_(req), what_(std::move(what)), expect_bytes_(expect_bytes) {}
    ~MpiPendingOp() override {
        if (!done_) (void)wait();
    }
    Status wait() override {
        if (done_) return ok_status();
        done_ = true;
        MPI_Status st;
        const int rc = MPI_Wait(&req_, &st);
        if (rc != MPI_SUCCESS) return Status(StatusCode::kUnavailable, what_ + " failed: " + mpi_error(rc));
        if (expect_bytes_ != kNoCheck) {
            int count = 0;
            MPI_Get_count(&st, MPI_BYTE, &count);
            if (static_cast<size_t>(count) != expect_bytes_) {
                return data_loss(what_ + ": got " + std::to_string(count) + " bytes, expected " +
                                 std::to_string(expect_bytes_));
            }
        }
        return ok_status();
    }
    static constexpr size_t kNoCheck = ~size_t{0};

private:
    MPI_Request req_;
    std::string what_;
    size_t expect_bytes_;
    bool done_ = false;
};

class MpiCommunicator final : public Communicator {
public:
    MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
    }
    ~MpiCommunicator() override {
        if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    Device device() const override { return Device::kCPU; }
    std::string name() const override { return name_; }

    Status all_reduce(const TensorView& buf, ReduceOp op) override {
        PENSTOCK_RETURN_IF_ERROR(check_host(buf, "all_reduce"));
        MPI_Datatype t;
        if (!reduce_type(buf.dtype, &t)) return unsupported_reduce(buf, "all_reduce");
        return wrap(MPI_Allreduce(MPI_IN_PLACE, buf.data, static_cast<int>(buf.numel()), t, mpi_op(op), comm_),
                    "all_reduce");
    }

    Status all_gather(const TensorView& out, const TensorView& in) override {
        PENSTOCK_RETURN_IF_ERROR(check_host(out, "all_gather"));
        PENSTOCK_RETURN_IF_ERROR(check_host(in, "all_gather"));
        if (out.nbytes() != in.nbytes() * static_cast<size_t>(size_)) return size_mismatch("all_gather", out, in);
        return wrap(MPI_Allgather(in.data, static_cast<int>(in.nbytes()), MPI_BYTE, out.data,
                                  static_cast<int>(in.nbytes()), MPI_BYTE, comm_),
                    "all_gather");
    }

    Status reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) override {
        PENSTOCK_RETURN_IF_ERROR(check_host(out, "reduce_scatter"));
        PENSTOCK_RETURN_IF_ERROR(check_host(in, "reduce_scatter"));
        if (in.nbytes() != out.nbytes() * static_cast<size_t>(size_)) return size_mismatch("reduce_scatter", out, in);
        MPI_Datatype t;
        if (!reduce_type(in.dtype, &t) || in.dtype != out.dtype) return unsupported_reduce(in, "reduce_scatter");
        return wrap(MPI_Reduce_scatter_block(in.data, out.data, static_cast<int>(out.numel()), t, mpi_op(op), comm_),
                    "reduce_scatter");
    }

    Status all_to_all(const TensorView& out, const TensorView& in) override {
        PENSTOCK_RETURN_IF_ERROR(check_host(out, "all_to_all"));
        PENSTOCK_RETURN_IF_ERROR(check_host(in, "all_to_all"));
        if (in.nbytes() != out.nbytes() || in.nbytes() % static_cast<size_t>(size_) != 0) {
            return size_mismatch("all_to_all", out, in);
        }
        const int chunk = static_cast<int>(in.nbytes() / static_cast<size_t>(size_));
        return wrap(MPI_Alltoall(in.data, chunk, MPI_BYTE, out.data, chunk, MPI_BYTE, comm_), "all_to_all");
    }

    Status broadcast(const TensorView& buf, int root) override {
        PENSTOCK_RETURN_IF_ERROR(check_host(buf, "broadcast"));
        return wrap(MPI_Bcast(buf.data, static_cast<int>(buf.nbytes()), MPI_BYTE, root, comm_), "broadcast");
    }

    Status send(const TensorView& buf, int peer, int tag) override {
        PENSTOCK_RETURN_IF_ERROR(check_host(buf, "send"));
        return wrap(MPI_Send(buf.data, static_cast<int>(buf.nbytes()), MPI_BYTE, peer, tag, comm_), "send");
    }

    Status recv(const TensorView& buf, int peer, int tag) override {
        PENSTOCK_RETURN_IF_ERROR(check_host(buf, "recv"));
        MPI_Status st;
        PENSTOCK_RETURN_IF_ERROR(
            wrap(MPI_Recv(buf.data, static_cast<int>(buf.nbytes()), MPI_BYTE, peer, tag, comm_, &st), "recv"));
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (static_cast<size_t>(count) != buf.nbytes()) {
            return data_loss(name_ + " recv from " + std::to_string(peer) + ": got " + std::to_string(count) +
                             " bytes, expected " + std::to_string(buf.nbytes()));
        }
        return ok_status();
    }

    Status barrier() override { return wrap(MPI_Barrier(comm_), "barrier"); }

    Result<std::unique_ptr<PendingOp>> isend(const TensorView& buf, int peer, int tag) override {
        PENSTOCK_RETURN_IF_ERROR(check_host(buf, "isend"));
        MPI_Request req;
        PENSTOCK_RETURN_IF_ERROR(
            wrap(MPI_Isend(buf.data, static_cast<int>(buf.nbytes()), MPI_BYTE, peer, tag, comm_, &req), "isend"));
        return std::unique_ptr<PendingOp>(
            std::make_unique<MpiPendingOp>(req, name_ + " isend to " + std::to_string(peer), MpiPendingOp::kNoCheck));
    }

    Result<std::unique_ptr<PendingOp>> irecv(const TensorView& buf, int peer, int tag) override {
        PENSTOCK_RETURN_IF_ERROR(check_host(buf, "irecv"));
        MPI_Request req;
        PENSTOCK_RETURN_IF_ERROR(
            wrap(MPI_Irecv(buf.data, static_cast<int>(buf.nbytes()), MPI_BYTE, peer, tag, comm_, &req), "irecv"));
        return std::unique_ptr<PendingOp>(
            std::make_unique<MpiPendingOp>(req, name_ + " irecv from " + std::to_string(peer), buf.nbytes()));
    }

private:
    Status check_host(const TensorView& v, const char* what) const {
        if (v.device != Device::kCPU) return invalid_argument(name_ + " " + what + ": MPI takes host tensors");
        if (!v.is_contiguous()) return invalid_argument(name_ + " " + what + ": tensor must be contiguous");
        if (v.nbytes() > static_cast<size_t>(INT32_MAX)) {
            return invalid_argument(name_ + " " + what + ": message over 2 GiB");
        }
        return ok_status();
    }
    Status unsupported_reduce(const TensorView& v, const char* what) const {
        return unimplemented(name_ + " " + what + ": no MPI reduction for dtype " + std::string(dtype_name(v.dtype)));
    }
    Status size_mismatch(const char* what, const TensorView& out, const TensorView& in) const {
        return invalid_argument(name_ + " " + what + ": out " + out.shape_string() + " and in " + in.shape_string() +
                                " do not fit a group of " + std::to_string(size_));
    }
    Status wrap(int code, const char* what) const {
        if (code == MPI_SUCCESS) return ok_status();
        return Status(StatusCode::kUnavailable, name_ + " " + what + " failed: " + mpi_error(code));
    }

    MPI_Comm comm_;
    std::string name_;
    int rank_ = 0;
    int size_ = 1;
};

}  // namespace

Result<std::unique_ptr<MpiSession>> MpiSession::init(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return failed_precondition("MPI is already initialised in this process");
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        return Status(StatusCode::kUnavailable, "MPI_Init_thread failed");
    }
    std::unique_ptr<MpiSession> s(new MpiSession());
    MPI_Comm_rank(MPI_COMM_WORLD, &s->rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &s->size_);
    // The split is collective; every rank takes the same branch (the launcher sets the variable for all or none).
    const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (env != nullptr && *env != '\0') {
        s->local_rank_ = std::atoi(env);
    } else {
        MPI_Comm node;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s->rank_, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
            MPI_Comm_rank(node, &s->local_rank_);
            MPI_Comm_free(&node);
        }
    }
    return s;
}

MpiSession::~MpiSession() { MPI_Finalize(); }

Result<ProcessGroups> make_mpi_groups(const MpiSession& session, const ParallelSizes& sizes) {
    PENSTOCK_RETURN_IF_ERROR(validate_sizes(sizes, session.world_size()));
    ProcessGroups g;
    g.sizes = sizes;
    g.coords = coords_of(sizes, session.world_rank());
    g.world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "mpi:world");
    const auto split = [&](GroupKind kind) -> Result<std::unique_ptr<Communicator>> {
        MPI_Comm comm;
        const int color = group_color(sizes, kind, session.world_rank());
        const int rc = MPI_Comm_split(MPI_COMM_WORLD, color, session.world_rank(), &comm);
        if (rc != MPI_SUCCESS) {
            return Status(StatusCode::kUnavailable,
                          std::string("MPI_Comm_split for the ") + group_name(kind) + " group: " + mpi_error(rc));
        }
        return std::unique_ptr<Communicator>(
            std::make_unique<MpiCommunicator>(comm, std::string("mpi:") + group_name(kind)));
    };
    PENSTOCK_ASSIGN_OR_RETURN(g.pp, split(GroupKind::kPipeline));
    PENSTOCK_ASSIGN_OR_RETURN(g.tp, split(GroupKind::kTensor));
    PENSTOCK_ASSIGN_OR_RETURN(g.ep, split(GroupKind::kExpert));
    PENSTOCK_ASSIGN_OR_RETURN(g.cp, split(GroupKind::kContext));
    return g;
}

}  // namespace penstock::parallel
