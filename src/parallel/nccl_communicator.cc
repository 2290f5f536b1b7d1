// NCCL communicators: stream-ordered collectives and point-to-point on device tensors; failures become Status values
// naming the call, the group and NCCL's reason.
#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>

namespace penstock::parallel {

namespace {

std::string cuda_error(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// Makes `device` current for the calling thread (cheap when it already is).
Status use_device(int device, const std::string& who) {
    int current = -1;
    cudaError_t e = cudaGetDevice(&current);
    if (e == cudaSuccess && current == device) return ok_status();
    e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        return Status(StatusCode::kUnavailable, who + ": cudaSetDevice(" + std::to_string(device) + "): " + cuda_error(e));
    }
    return ok_status();
}

bool reduce_type(DType d, ncclDataType_t* t) {
    switch (d) {
        case DType::kF32:
            *t = ncclFloat32;
            return true;
        case DType::kF16:
            *t = ncclFloat16;
            return true;
        case DType::kBF16:
            *t = ncclBfloat16;
            return true;
        case DType::kI32:
            *t = ncclInt32;
            return true;
        case DType::kI64:
            *t = ncclInt64;
            return true;
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

ncclRedOp_t nccl_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::kSum:
            return ncclSum;
        case ReduceOp::kMax:
            return ncclMax;
    }
    return ncclSum;
}

class NcclPendingOp final : public PendingOp {
public:
    NcclPendingOp(cudaEvent_t event, int device, std::string what) : event_(event), device_(device), what_(std::move(what)) {}
    ~NcclPendingOp() override {
        if (!done_) (void)wait();
        if (event_ != nullptr) (void)cudaEventDestroy(event_);
    }
    Status wait() override {
        if (done_) return ok_status();
        done_ = true;
        if (event_ == nullptr) return ok_status();  // a zero-byte operation: nothing was enqueued
        PENSTOCK_RETURN_IF_ERROR(use_device(device_, what_));
        const cudaError_t e = cudaEventSynchronize(event_);
        if (e != cudaSuccess) return Status(StatusCode::kUnavailable, what_ + " failed: " + cuda_error(e));
        return ok_status();
    }

private:
    cudaEvent_t event_;
    int device_;
    std::string what_;
    bool done_ = false;
};

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(ncclComm_t comm, int device, cudaStream_t stream, int* scratch, std::string name)
        : comm_(comm), device_(device), stream_(stream), scratch_(scratch), name_(std::move(name)) {
        (void)ncclCommUserRank(comm_, &rank_);
        (void)ncclCommCount(comm_, &size_);
    }
    ~NcclCommunicator() override {
        if (!use_device(device_, name_).ok()) return;
        // Finalize waits for this communicator's outstanding operations, so no enqueued kernel outlives it.
        (void)ncclCommFinalize(comm_);
        (void)ncclCommDestroy(comm_);
        (void)cudaFree(scratch_);
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    Device device() const override { return Device::kCUDA; }
    std::string name() const override { return name_; }

    Status all_reduce(const TensorView& buf, ReduceOp op) override {
        PENSTOCK_RETURN_IF_ERROR(check_device(buf, "all_reduce"));
        ncclDataType_t t;
        if (!reduce_type(buf.dtype, &t)) return unsupported_reduce(buf, "all_reduce");
        if (buf.numel() == 0) return ok_status();
        return wrap(ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.numel()), t, nccl_op(op), comm_, stream_),
                    "all_reduce");
    }

    Status all_gather(const TensorView& out, const TensorView& in) override {
        PENSTOCK_RETURN_IF_ERROR(check_device(out, "all_gather"));
        PENSTOCK_RETURN_IF_ERROR(check_device(in, "all_gather"));
        if (out.nbytes() != in.nbytes() * static_cast<size_t>(size_)) return size_mismatch("all_gather", out, in);
        if (in.nbytes() == 0) return ok_status();
        return wrap(ncclAllGather(in.data, out.data, in.nbytes(), ncclUint8, comm_, stream_), "all_gather");
    }

    Status reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) override {
        PENSTOCK_RETURN_IF_ERROR(check_device(out, "reduce_scatter"));
        PENSTOCK_RETURN_IF_ERROR(check_device(in, "reduce_scatter"));
        if (in.nbytes() != out.nbytes() * static_cast<size_t>(size_)) return size_mismatch("reduce_scatter", out, in);
        ncclDataType_t t;
        if (!reduce_type(in.dtype, &t) || in.dtype != out.dtype) return unsupported_reduce(in, "reduce_scatter");
        if (out.numel() == 0) return ok_status();
        return wrap(ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()), t, nccl_op(op), comm_, stream_),
                    "reduce_scatter");
    }

    // NCCL has no all-to-all: one grouped send and receive per peer (self included).
    Status all_to_all(const TensorView& out, const TensorView& in) override {
        PENSTOCK_RETURN_IF_ERROR(check_device(out, "all_to_all"));
        PENSTOCK_RETURN_IF_ERROR(check_device(in, "all_to_all"));
        if (in.nbytes() != out.nbytes() || in.nbytes() % static_cast<size_t>(size_) != 0) {
            return size_mismatch("all_to_all", out, in);
        }
        const size_t chunk = in.nbytes() / static_cast<size_t>(size_);
        if (chunk == 0) return ok_status();
        const auto* src = static_cast<const char*>(in.data);
        auto* dst = static_cast<char*>(out.data);
        PENSTOCK_RETURN_IF_ERROR(wrap(ncclGroupStart(), "all_to_all (group start)"));
        ncclResult_t rc = ncclSuccess;
        for (int r = 0; r < size_ && rc == ncclSuccess; ++r) {
            rc = ncclSend(src + static_cast<size_t>(r) * chunk, chunk, ncclUint8, r, comm_, stream_);
            if (rc == ncclSuccess) rc = ncclRecv(dst + static_cast<size_t>(r) * chunk, chunk, ncclUint8, r, comm_, stream_);
        }
        const ncclResult_t end = ncclGroupEnd();
        PENSTOCK_RETURN_IF_ERROR(wrap(rc, "all_to_all"));
        return wrap(end, "all_to_all (group end)");
    }

    Status broadcast(const TensorView& buf, int root) override {
        PENSTOCK_RETURN_IF_ERROR(check_device(buf, "broadcast"));
        PENSTOCK_RETURN_IF_ERROR(check_peer(root, "broadcast"));
        if (buf.nbytes() == 0) return ok_status();
        return wrap(ncclBroadcast(buf.data, buf.data, buf.nbytes(), ncclUint8, root, comm_, stream_), "broadcast");
    }

    Status send(const TensorView& buf, int peer, int /*tag*/) override {
        PENSTOCK_RETURN_IF_ERROR(check_device(buf, "send"));
        PENSTOCK_RETURN_IF_ERROR(check_peer(peer, "send"));
        if (buf.nbytes() == 0) return ok_status();
        return wrap(ncclSend(buf.data, buf.nbytes(), ncclUint8, peer, comm_, stream_), "send");
    }

    Status recv(const TensorView& buf, int peer, int /*tag*/) override {
        PENSTOCK_RETURN_IF_ERROR(check_device(buf, "recv"));
        PENSTOCK_RETURN_IF_ERROR(check_peer(peer, "recv"));
        if (buf.nbytes() == 0) return ok_status();
        return wrap(ncclRecv(buf.data, buf.nbytes(), ncclUint8, peer, comm_, stream_), "recv");
    }

    // An all-reduce of one int, then a host wait on the stream: every rank has reached the barrier when it returns.
    Status barrier() override {
        PENSTOCK_RETURN_IF_ERROR(use_device(device_, name_));
        PENSTOCK_RETURN_IF_ERROR(wrap(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_), "barrier"));
        return cuda_wrap(cudaStreamSynchronize(stream_), "barrier (stream synchronize)");
    }

    Result<std::unique_ptr<PendingOp>> isend(const TensorView& buf, int peer, int tag) override {
        PENSTOCK_RETURN_IF_ERROR(send(buf, peer, tag));
        return pending(buf, name_ + " isend to " + std::to_string(peer));
    }

    Result<std::unique_ptr<PendingOp>> irecv(const TensorView& buf, int peer, int tag) override {
        PENSTOCK_RETURN_IF_ERROR(recv(buf, peer, tag));
        return pending(buf, name_ + " irecv from " + std::to_string(peer));
    }

private:
    // An event recorded after the operation just enqueued (none for a zero-byte one).
    Result<std::unique_ptr<PendingOp>> pending(const TensorView& buf, std::string what) {
        cudaEvent_t event = nullptr;
        if (buf.nbytes() > 0) {
            PENSTOCK_RETURN_IF_ERROR(cuda_wrap(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event create"));
            const Status st = cuda_wrap(cudaEventRecord(event, stream_), "event record");
            if (!st.ok()) {
                (void)cudaEventDestroy(event);
                return st;
            }
        }
        return std::unique_ptr<PendingOp>(std::make_unique<NcclPendingOp>(event, device_, std::move(what)));
    }

    Status check_device(const TensorView& v, const char* what) const {
        if (v.device != Device::kCUDA) return invalid_argument(name_ + " " + what + ": NCCL takes device tensors");
        if (!v.is_contiguous()) return invalid_argument(name_ + " " + what + ": tensor must be contiguous");
        return use_device(device_, name_);
    }
    Status check_peer(int peer, const char* what) const {
        if (peer < 0 || peer >= size_) {
            return invalid_argument(name_ + " " + what + ": peer " + std::to_string(peer) + " outside a group of " +
                                    std::to_string(size_));
        }
        return ok_status();
    }
    Status unsupported_reduce(const TensorView& v, const char* what) const {
        return unimplemented(name_ + " " + what + ": no NCCL reduction for dtype " + std::string(dtype_name(v.dtype)));
    }
    Status size_mismatch(const char* what, const TensorView& out, const TensorView& in) const {
        return invalid_argument(name_ + " " + what + ": out " + out.shape_string() + " and in " + in.shape_string() +
                                " do not fit a group of " + std::to_string(size_));
    }
    Status wrap(ncclResult_t rc, const char* what) const {
        if (rc == ncclSuccess) return ok_status();
        std::string msg = name_ + " " + what + " failed: " + ncclGetErrorString(rc);
        const char* last = ncclGetLastError(comm_);
        if (last != nullptr && last[0] != '\0') msg += std::string(" (") + last + ")";
        return Status(StatusCode::kUnavailable, msg);
    }
    Status cuda_wrap(cudaError_t e, const char* what) const {
        if (e == cudaSuccess) return ok_status();
        return Status(StatusCode::kUnavailable, name_ + " " + what + " failed: " + cuda_error(e));
    }

    ncclComm_t comm_;
    int device_;
    cudaStream_t stream_;
    int* scratch_;  // one device int for barrier()
    std::string name_;
    int rank_ = 0;
    int size_ = 1;
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap, const NcclOptions& options,
                                                             const std::string& name) {
    if (bootstrap.device() != Device::kCPU) {
        return invalid_argument(name + ": the bootstrap communicator must work on host tensors");
    }
    if (options.stream == nullptr) return invalid_argument(name + ": needs the backend's CUDA stream");
    PENSTOCK_RETURN_IF_ERROR(use_device(options.device, name));
    // Rank 0 makes the id; everyone learns it over the host link (a failure on rank 0 is broadcast as a zero id,
    // which every rank then refuses, so no rank enters ncclCommInitRank alone).
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    std::string init_error;
    if (bootstrap.rank() == 0) {
        const ncclResult_t rc = ncclGetUniqueId(&id);
        if (rc != ncclSuccess) {
            init_error = std::string("ncclGetUniqueId: ") + ncclGetErrorString(rc);
            std::memset(&id, 0, sizeof(id));
        }
    }
    const auto id_bytes = static_cast<int64_t>(sizeof(id));
    PENSTOCK_RETURN_IF_ERROR(
        bootstrap.broadcast(TensorView::contiguous(&id, DType::kU8, std::span<const int64_t>(&id_bytes, 1)), 0));
    ncclUniqueId zero;
    std::memset(&zero, 0, sizeof(zero));
    if (std::memcmp(&id, &zero, sizeof(id)) == 0) {
        return Status(StatusCode::kUnavailable,
                      name + ": rank 0 could not create the NCCL unique id" + (init_error.empty() ? "" : ": " + init_error));
    }
    ncclComm_t comm = nullptr;
    const ncclResult_t rc = ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank());
    if (rc != ncclSuccess) {
        return Status(StatusCode::kUnavailable, name + ": ncclCommInitRank (rank " + std::to_string(bootstrap.rank()) +
                                                    " of " + std::to_string(bootstrap.size()) + ", device " +
                                                    std::to_string(options.device) + "): " + ncclGetErrorString(rc));
    }
    int* scratch = nullptr;
    cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(int));
    if (e == cudaSuccess) e = cudaMemset(scratch, 0, sizeof(int));
    if (e != cudaSuccess) {
        (void)ncclCommDestroy(comm);
        return Status(StatusCode::kUnavailable, name + ": barrier scratch: " + cuda_error(e));
    }
    return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(
        comm, options.device, static_cast<cudaStream_t>(options.stream), scratch, name));
}

Result<ProcessGroups> make_nccl_groups(const ProcessGroups& host, const NcclOptions& options) {
    ProcessGroups g;
    g.sizes = host.sizes;
    g.coords = host.coords;
    PENSTOCK_ASSIGN_OR_RETURN(g.world, make_nccl_communicator(*host.world, options, "nccl:world"));
    PENSTOCK_ASSIGN_OR_RETURN(g.pp, make_nccl_communicator(*host.pp, options, "nccl:pp"));
    PENSTOCK_ASSIGN_OR_RETURN(g.tp, make_nccl_communicator(*host.tp, options, "nccl:tp"));
    PENSTOCK_ASSIGN_OR_RETURN(g.ep, make_nccl_communicator(*host.ep, options, "nccl:ep"));
    PENSTOCK_ASSIGN_OR_RETURN(g.cp, make_nccl_communicator(*host.cp, options, "nccl:cp"));
    return g;
}

}  // namespace penstock::parallel
