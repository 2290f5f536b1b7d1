// NCCL communicators under `mpirun -np 2` (one GPU per rank, GPU = local rank): every collective and point-to-point
// call on device tensors, for each reduction dtype, on the world group and the groups of two layouts, checked against
// values each rank can predict; wrong inputs are Status values. Every rank skips together (an MPI all-reduce decides)
// when the machine has fewer GPUs than ranks, so ctest passes on CPU-only machines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/device.h"
#include "parallel/layout.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"

namespace penstock::parallel {
namespace {

MpiSession* g_session = nullptr;
bool g_have_gpus = false;
std::string g_skip_reason;

// Host values as `dtype` (f32, bf16, i32, i64); every value used here is exact in each of them.
Tensor host_values(const std::vector<double>& v, DType dtype, const Shape& shape) {
    Tensor t = Tensor::empty(shape, dtype);
    for (size_t i = 0; i < v.size(); ++i) {
        switch (dtype) {
            case DType::kF32:
                t.ptr<float>()[i] = static_cast<float>(v[i]);
                break;
            case DType::kBF16:
                t.ptr<uint16_t>()[i] = float_to_bf16(static_cast<float>(v[i]));
                break;
            case DType::kI32:
                t.ptr<int32_t>()[i] = static_cast<int32_t>(v[i]);
                break;
            case DType::kI64:
                t.ptr<int64_t>()[i] = static_cast<int64_t>(v[i]);
                break;
            default:
                ADD_FAILURE() << "host_values: " << dtype_name(dtype);
        }
    }
    return t;
}

double value_at(const Tensor& t, int64_t i) {
    switch (t.dtype()) {
        case DType::kF32:
            return t.ptr<const float>()[i];
        case DType::kBF16:
            return bf16_to_float(t.ptr<const uint16_t>()[i]);
        case DType::kI32:
            return t.ptr<const int32_t>()[i];
        case DType::kI64:
            return static_cast<double>(t.ptr<const int64_t>()[i]);
        default:
            return 0;
    }
}

class NcclTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (!g_have_gpus) GTEST_SKIP() << g_skip_reason;
        device_ = g_session->local_rank();
        guard_ = std::make_unique<cuda::DeviceGuard>(device_);
        alloc_ = std::make_unique<cuda::CudaCachingAllocator>(device_);
        stream_ = std::make_unique<cuda::Stream>(device_);
    }
    NcclOptions options() const { return NcclOptions{.device = device_, .stream = stream_->handle()}; }
    Tensor up(const Tensor& host) { return cuda::to_device(host, *alloc_, *stream_); }
    Tensor down(const Tensor& dev) { return cuda::to_host(dev, *stream_); }
    Tensor dev_empty(const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype, *alloc_); }

    // Every call of the interface on `comm` (members: world ranks in group-rank order).
    void check_group(Communicator& comm, const std::vector<int>& members, int world_rank);

    int device_ = 0;
    std::unique_ptr<cuda::DeviceGuard> guard_;
    std::unique_ptr<cuda::CudaCachingAllocator> alloc_;  // outlives the stream and every tensor below
    std::unique_ptr<cuda::Stream> stream_;
};

void NcclTest::check_group(Communicator& comm, const std::vector<int>& members, int world_rank) {
    const int n = comm.size();
    ASSERT_EQ(n, static_cast<int>(members.size())) << comm.name();
    ASSERT_EQ(members[static_cast<size_t>(comm.rank())], world_rank) << comm.name() << ": group rank order";
    EXPECT_EQ(comm.device(), Device::kCUDA);
    double sum = 0, mx = 0;
    for (int m : members) {
        sum += m + 1;
        mx = std::max<double>(mx, m + 1);
    }
    for (DType dt : {DType::kF32, DType::kBF16, DType::kI32, DType::kI64}) {
        SCOPED_TRACE(comm.name() + " " + std::string(dtype_name(dt)));
        // all_reduce sum and max: element i holds (world_rank + 1) * (i + 1).
        std::vector<double> v(5);
        for (size_t i = 0; i < v.size(); ++i) v[i] = (world_rank + 1) * static_cast<double>(i + 1);
        Tensor s = up(host_values(v, dt, {5}));
        ASSERT_TRUE(comm.all_reduce(s, ReduceOp::kSum).ok());
        Tensor m = up(host_values(v, dt, {5}));
        ASSERT_TRUE(comm.all_reduce(m, ReduceOp::kMax).ok());
        const Tensor sh = down(s), mh = down(m);
        for (int64_t i = 0; i < 5; ++i) {
            EXPECT_EQ(value_at(sh, i), sum * static_cast<double>(i + 1)) << "all_reduce sum, element " << i;
            EXPECT_EQ(value_at(mh, i), mx * static_cast<double>(i + 1)) << "all_reduce max, element " << i;
        }
        // reduce_scatter: in [n, 2], row r = (r, world_rank); this rank gets row rank() of the sum.
        std::vector<double> contrib;
        for (int r = 0; r < n; ++r) {
            contrib.push_back(r);
            contrib.push_back(world_rank + 1);
        }
        Tensor rs_in = up(host_values(contrib, dt, {n, 2}));
        Tensor rs_out = dev_empty({1, 2}, dt);
        ASSERT_TRUE(comm.reduce_scatter(rs_out, rs_in, ReduceOp::kSum).ok());
        const Tensor rh = down(rs_out);
        EXPECT_EQ(value_at(rh, 0), static_cast<double>(comm.rank() * n));
        EXPECT_EQ(value_at(rh, 1), sum);
    }
    // all_gather: rows arrive in group-rank order.
    Tensor row = up(host_values({1.0 * world_rank, 10.0 * world_rank, -1.0}, DType::kF32, {1, 3}));
    Tensor gathered = dev_empty({n, 3}, DType::kF32);
    ASSERT_TRUE(comm.all_gather(gathered, row).ok());
    const Tensor gh = down(gathered);
    for (int r = 0; r < n; ++r) EXPECT_EQ(value_at(gh, r * 3 + 1), 10.0 * members[static_cast<size_t>(r)]);
    // all_to_all: slice j of rank r (value 100 r + j) goes to rank j's slice r.
    std::vector<double> a2a;
    for (int j = 0; j < n; ++j) a2a.insert(a2a.end(), {100.0 * comm.rank() + j, -1.0 * j});
    Tensor a_in = up(host_values(a2a, DType::kI32, {n, 2}));
    Tensor a_out = dev_empty({n, 2}, DType::kI32);
    ASSERT_TRUE(comm.all_to_all(a_out, a_in).ok());
    const Tensor ah = down(a_out);
    for (int r = 0; r < n; ++r) {
        EXPECT_EQ(value_at(ah, r * 2), 100.0 * r + comm.rank());
        EXPECT_EQ(value_at(ah, r * 2 + 1), -1.0 * comm.rank());
    }
    // broadcast from the last group rank (bf16 bytes).
    Tensor b = up(host_values({1.0 * comm.rank(), 2.0 * comm.rank()}, DType::kBF16, {2}));
    ASSERT_TRUE(comm.broadcast(b, n - 1).ok());
    const Tensor bh = down(b);
    EXPECT_EQ(value_at(bh, 0), 1.0 * (n - 1));
    EXPECT_EQ(value_at(bh, 1), 2.0 * (n - 1));
    ASSERT_TRUE(comm.barrier().ok());
}

TEST_F(NcclTest, EveryCallOnEveryGroupOfTwoLayouts) {
    const int world = g_session->world_size();
    for (const ParallelSizes sizes : {ParallelSizes{1, world, 1, 1}, ParallelSizes{world, 1, 1, 1}}) {
        SCOPED_TRACE(sizes.to_string());
        Result<ProcessGroups> host = make_mpi_groups(*g_session, sizes);
        ASSERT_TRUE(host.ok()) << host.status().to_string();
        Result<ProcessGroups> dev = make_nccl_groups(*host, options());
        ASSERT_TRUE(dev.ok()) << dev.status().to_string();
        const int me = g_session->world_rank();
        std::vector<int> all(static_cast<size_t>(world));
        for (int r = 0; r < world; ++r) all[static_cast<size_t>(r)] = r;
        check_group(*dev->world, all, me);
        check_group(*dev->pp, group_ranks(sizes, GroupKind::kPipeline, me), me);
        check_group(*dev->tp, group_ranks(sizes, GroupKind::kTensor, me), me);
        check_group(*dev->ep, group_ranks(sizes, GroupKind::kExpert, me), me);
    }
}

TEST_F(NcclTest, PointToPointAndNonBlocking) {
    Result<ProcessGroups> host = make_mpi_groups(*g_session, ParallelSizes{g_session->world_size(), 1, 1, 1});
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    Result<std::unique_ptr<Communicator>> made = make_nccl_communicator(*host->pp, options(), "nccl:pp");
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    Communicator& pp = **made;
    const int n = pp.size(), me = pp.rank();
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    // A ring with blocking calls: even ranks send first, odd ranks receive first.
    std::vector<double> mine(1000);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = me * 1000.0 + static_cast<double>(i);
    Tensor out = up(host_values(mine, DType::kF32, {1000}));
    Tensor in = dev_empty({1000}, DType::kF32);
    if (me % 2 == 0) {
        ASSERT_TRUE(pp.send(out, next, 7).ok());
        ASSERT_TRUE(pp.recv(in, prev, 7).ok());
    } else {
        ASSERT_TRUE(pp.recv(in, prev, 7).ok());
        ASSERT_TRUE(pp.send(out, next, 7).ok());
    }
    Tensor ih = down(in);
    for (int64_t i = 0; i < 1000; i += 111) EXPECT_EQ(value_at(ih, i), prev * 1000.0 + static_cast<double>(i));
    // Non-blocking, i64, and a zero-byte pair. The operations are stream-ordered (nccl_communicator.h): a receive
    // enqueued ahead of this rank's own send would hold the send back, so the ring keeps the even/odd order; the host
    // does not block until wait().
    Tensor a = up(host_values({1.0 * me, 2.0 * me, 3.0 * me}, DType::kI64, {3}));
    Tensor from_prev = dev_empty({3}, DType::kI64);
    Tensor empty_out = dev_empty({0}, DType::kF32), empty_in = dev_empty({0}, DType::kF32);
    std::vector<std::unique_ptr<PendingOp>> ops;
    const auto post = [&](bool send) {
        auto op = send ? pp.isend(a, next, 1) : pp.irecv(from_prev, prev, 1);
        ASSERT_TRUE(op.ok()) << op.status().to_string();
        ops.push_back(std::move(*op));
        auto empty = send ? pp.isend(empty_out, next, 2) : pp.irecv(empty_in, prev, 2);
        ASSERT_TRUE(empty.ok()) << empty.status().to_string();
        ops.push_back(std::move(*empty));
    };
    post(/*send=*/me % 2 == 0);
    post(/*send=*/me % 2 != 0);
    for (auto& op : ops) ASSERT_TRUE(op->wait().ok());
    ASSERT_TRUE(ops[0]->wait().ok()) << "a second wait() is a no-op";
    const Tensor fh = down(from_prev);
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(value_at(fh, i), (i + 1.0) * prev);
    ASSERT_TRUE(pp.barrier().ok());
}

TEST_F(NcclTest, WrongInputsAreStatusValues) {
    Result<ProcessGroups> host = make_mpi_groups(*g_session, ParallelSizes{1, g_session->world_size(), 1, 1});
    ASSERT_TRUE(host.ok());
    Result<std::unique_ptr<Communicator>> made = make_nccl_communicator(*host->tp, options(), "nccl:tp");
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    Communicator& tp = **made;
    Tensor host_t = Tensor::zeros({4}, DType::kF32);
    EXPECT_EQ(tp.all_reduce(host_t, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
    Tensor bytes = dev_empty({4}, DType::kU8);
    EXPECT_EQ(tp.all_reduce(bytes, ReduceOp::kSum).code(), StatusCode::kUnimplemented);
    Tensor small = dev_empty({1}, DType::kF32), big = dev_empty({3 * tp.size()}, DType::kF32);
    EXPECT_EQ(tp.all_gather(small, big).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(tp.send(small, tp.size(), 0).code(), StatusCode::kInvalidArgument);
    Result<std::unique_ptr<Communicator>> bad = make_nccl_communicator(tp, options(), "nccl:nested");
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << "a device communicator cannot bootstrap";
    ASSERT_TRUE(tp.barrier().ok());
}

}  // namespace
}  // namespace penstock::parallel

int main(int argc, char** argv) {
    using namespace penstock;
    ::testing::InitGoogleTest(&argc, argv);
    auto session = parallel::MpiSession::init(&argc, &argv);
    if (!session.ok()) {
        std::fprintf(stderr, "%s\n", session.status().to_string().c_str());
        return 1;
    }
    parallel::g_session = session->get();
    // Every rank needs its own GPU (local rank); all ranks agree before any NCCL call so that they skip together.
    const Result<int> count = cuda::device_count();
    const bool mine = count.ok() && parallel::g_session->local_rank() < *count;
    Tensor flag = Tensor::from_i32({1}, std::vector<int32_t>{mine ? 0 : 1});
    Result<parallel::ProcessGroups> world =
        parallel::make_mpi_groups(*parallel::g_session, parallel::ParallelSizes{.pp = parallel::g_session->world_size()});
    if (!world.ok() || !world->world->all_reduce(flag, parallel::ReduceOp::kMax).ok()) return 1;
    parallel::g_have_gpus = flag.ptr<int32_t>()[0] == 0;
    parallel::g_skip_reason = count.ok() ? "fewer GPUs (" + std::to_string(*count) + ") than ranks on this host"
                                         : "no usable GPU: " + count.status().to_string();
    if (parallel::g_session->world_rank() != 0) {
        ::testing::TestEventListeners& l = ::testing::UnitTest::GetInstance()->listeners();
        delete l.Release(l.default_result_printer());
    }
    return RUN_ALL_TESTS();
}
