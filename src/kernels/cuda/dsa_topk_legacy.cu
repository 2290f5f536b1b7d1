// The previous dsa_topk kernels, kept as cuda::TopkVariant::kLegacy (cuda_ops_dsa.h) for same-run comparisons and as
// a second implementation under the same conformance test. Pass 1 (one block per row, grid-stride): a 4-pass 8-bit
// radix select over order-preserving u32 keys read from global memory each pass; masked entries counted analytically;
// a row whose top_k-th key is needed only in part is flagged. Pass 2: thread 0 of a block replays stl_select.cuh's
// libstdc++ nth_element / partial_sort on the flagged row, serially (milliseconds for a 16K row).
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>

#include "kernels/cuda/cuda_ops_dsa.h"
#include "kernels/cuda/dsa_topk_internal.h"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/stl_select.cuh"

namespace penstock::cuda {

namespace {

constexpr int kSelectThreads = 512;
constexpr int kReplayThreads = 256;
constexpr int kMaxReplayBlocks = 264;                 // 2 per H200 SM
constexpr size_t kReplaySmemBytes = 160 * 1024;       // queues up to 20480 entries stay in shared memory
constexpr size_t kMaxQueueScratch = size_t{512} << 20;  // global queues beyond that: fewer replay blocks

// The reference's queue element is std::pair<float, int64_t>; the index type plays no part in any comparison, so the
// algorithms permute these exactly as they permute the reference's pairs.
struct Entry {
    float first;
    int32_t second;
};

// ATen's comparator for largest = true: NaN first, then descending.
struct Greater {
    __host__ __device__ bool operator()(const Entry& x, const Entry& y) const {
        return (isnan(x.first) && !isnan(y.first)) || (x.first > y.first);
    }
};

__device__ __forceinline__ uint32_t order_key(float x) {
    if (isnan(x)) return 0xffffffffu;
    uint32_t u = __float_as_uint(x);
    if (u == 0x80000000u) u = 0;  // -0 == +0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct TopkArgs {
    int32_t* indices;
    const float* logits;
    const int32_t* q_pos;
    int32_t* flags;  // [n_rows]: 1 = tied boundary, resolved by the replay pass
    int64_t i0, lg0;
    int n_rows, n_keys, top_k;
    int64_t row_len;
};

__device__ __forceinline__ int visible_keys(const TopkArgs& a, int r) {
    const int64_t v = static_cast<int64_t>(a.q_pos[r]) + 1;
    return static_cast<int>(v < 0 ? 0 : (v > a.n_keys ? a.n_keys : v));
}

// Writes the s in [0, n) with pred(s), ascending, to out[0, count); returns count to every thread. `warp_counts`:
// 32 ints of shared memory. Every thread of the block must call it.
template <class Pred>
__device__ int block_compact(int32_t* out, int n, Pred pred, int* warp_counts) {
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32;
    const int warp = tid / 32;
    const int n_warps = static_cast<int>(blockDim.x) / 32;
    int base = 0;
    for (int s0 = 0; s0 < n; s0 += static_cast<int>(blockDim.x)) {
        const int s = s0 + tid;
        const bool f = s < n && pred(s);
        const unsigned ballot = __ballot_sync(0xffffffffu, f);
        if (lane == 0) warp_counts[warp] = __popc(ballot);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < n_warps; ++w) {
            const int c = warp_counts[w];
            before += w < warp ? c : 0;
            total += c;
        }
        if (f) out[base + before + __popc(ballot & ((1u << lane) - 1u))] = s;
        base += total;
        __syncthreads();
    }
    return base;
}

__global__ void __launch_bounds__(kSelectThreads) dsa_topk_select_kernel(TopkArgs a) {
    __shared__ unsigned hist[256];
    __shared__ int warp_counts[32];
    __shared__ unsigned sel_digit, sel_remaining, sel_equal;
    const int tid = static_cast<int>(threadIdx.x);
    const uint32_t masked_key = order_key(-FLT_MAX);
    for (int r = static_cast<int>(blockIdx.x); r < a.n_rows; r += static_cast<int>(gridDim.x)) {
        const int visible = visible_keys(a, r);
        int32_t* out = a.indices + static_cast<int64_t>(r) * a.i0;
        if (visible <= a.top_k) {  // dense-causal row: every visible key
            for (int j = tid; j < a.top_k; j += kSelectThreads) out[j] = j < visible ? j : -1;
            if (tid == 0) a.flags[r] = 0;
            continue;
        }
        const float* row = a.logits + static_cast<int64_t>(r) * a.lg0;
        const unsigned n_masked = static_cast<unsigned>(a.row_len - visible);
        uint32_t prefix = 0, mask = 0;
        unsigned remaining = static_cast<unsigned>(a.top_k);  // how many of the entries matching prefix we still need
        unsigned equal = 0;
        for (int pass = 0; pass < 4; ++pass) {
            const int shift = 24 - 8 * pass;
            __syncthreads();  // the previous pass (or row) is done with hist and the sel_* values
            if (tid < 256) hist[tid] = 0;
            __syncthreads();
            for (int s = tid; s < visible; s += kSelectThreads) {
                const uint32_t key = order_key(row[s]);
                if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xffu], 1u);
            }
            if (tid == 0 && n_masked > 0 && (masked_key & mask) == prefix) {
                atomicAdd(&hist[(masked_key >> shift) & 0xffu], n_masked);
            }
            __syncthreads();
            if (tid == 0) {
                unsigned rem = remaining;
                int d = 255;
                for (; d > 0; --d) {
                    if (hist[d] >= rem) break;
                    rem -= hist[d];
                }
                sel_digit = static_cast<unsigned>(d);
                sel_remaining = rem;
                sel_equal = hist[d];
            }
            __syncthreads();
            prefix |= sel_digit << shift;
            mask |= 0xffu << shift;
            remaining = sel_remaining;
            equal = sel_equal;
        }
        // prefix is the top_k-th key; `equal` entries carry it and `remaining` of them are selected.
        if (equal != remaining) {
            if (tid == 0) a.flags[r] = 1;
            continue;
        }
        const uint32_t threshold = prefix;
        const int count =
            block_compact(out, visible, [&](int s) { return order_key(row[s]) >= threshold; }, warp_counts);
        for (int j = count + tid; j < a.top_k; j += kSelectThreads) out[j] = -1;
        if (tid == 0) a.flags[r] = 0;
    }
}

__global__ void __launch_bounds__(kReplayThreads)
    dsa_topk_replay_kernel(TopkArgs a, Entry* queues, uint8_t* marks, bool queue_in_smem) {
    extern __shared__ Entry replay_smem[];
    __shared__ int warp_counts[32];
    const int tid = static_cast<int>(threadIdx.x);
    Entry* q = queue_in_smem ? replay_smem : queues + static_cast<int64_t>(blockIdx.x) * a.row_len;
    uint8_t* mark = marks + static_cast<int64_t>(blockIdx.x) * a.n_keys;
    for (int r = static_cast<int>(blockIdx.x); r < a.n_rows; r += static_cast<int>(gridDim.x)) {
        if (a.flags[r] == 0) continue;  // block-uniform
        const int visible = visible_keys(a, r);
        const float* row = a.logits + static_cast<int64_t>(r) * a.lg0;
        for (int64_t s = tid; s < a.row_len; s += kReplayThreads) {
            q[s] = Entry{s < visible ? row[s] : -FLT_MAX, static_cast<int32_t>(s)};
        }
        for (int s = tid; s < visible; s += kReplayThreads) mark[s] = 0;
        __syncthreads();
        if (tid == 0) {
            if (static_cast<int64_t>(a.top_k) * 64 <= a.row_len) {
                stl::partial_sort(q, q + a.top_k, q + a.row_len, Greater{});
            } else {
                stl::nth_element(q, q + (a.top_k - 1), q + a.row_len, Greater{});
            }
        }
        __syncthreads();
        for (int j = tid; j < a.top_k; j += kReplayThreads) {
            const int s = q[j].second;
            if (s < visible) mark[s] = 1;  // masked picks drop out
        }
        __syncthreads();
        int32_t* out = a.indices + static_cast<int64_t>(r) * a.i0;
        const int count = block_compact(out, visible, [&](int s) { return mark[s] != 0; }, warp_counts);
        for (int j = count + tid; j < a.top_k; j += kReplayThreads) out[j] = -1;
        __syncthreads();  // q and mark reused by the next row
    }
}

}  // namespace

void dsa_topk_legacy(const kernels::DsaTopkParams& p, Allocator& alloc, void* stream) {
    const TopkShape shape = check_topk_params(p, alloc);
    const int64_t n_rows = shape.n_rows, top_k = shape.top_k, n_keys = shape.n_keys, row_len = shape.row_len;
    if (n_rows == 0) return;

    const bool queue_in_smem = static_cast<size_t>(row_len) * sizeof(Entry) <= kReplaySmemBytes;
    int64_t replay_blocks = std::min<int64_t>(n_rows, kMaxReplayBlocks);
    if (!queue_in_smem) {
        const int64_t fit = static_cast<int64_t>(kMaxQueueScratch / (static_cast<size_t>(row_len) * sizeof(Entry)));
        replay_blocks = std::max<int64_t>(1, std::min(replay_blocks, fit));
    }
    const size_t flags_bytes = (static_cast<size_t>(n_rows) * sizeof(int32_t) + 255) / 256 * 256;
    const size_t queue_bytes =
        queue_in_smem ? 0 : static_cast<size_t>(replay_blocks) * static_cast<size_t>(row_len) * sizeof(Entry);
    const size_t mark_bytes = static_cast<size_t>(replay_blocks) * static_cast<size_t>(n_keys);
    // Scratch from the caching allocator: returned at the end of this call while the kernels may still run, which is
    // safe for stream-ordered users of the same allocator (its contract).
    Tensor scratch = Tensor::empty({static_cast<int64_t>(flags_bytes + queue_bytes + mark_bytes + 16)}, DType::kU8, alloc);
    char* base = static_cast<char*>(scratch.view().data);

    TopkArgs a{};
    a.indices = p.indices.ptr<int32_t>();
    a.logits = p.logits.ptr<const float>();
    a.q_pos = p.q_pos.ptr<const int32_t>();
    a.flags = reinterpret_cast<int32_t*>(base);
    a.i0 = p.indices.stride(0);
    a.lg0 = p.logits.stride(0);
    a.n_rows = static_cast<int>(n_rows);
    a.n_keys = static_cast<int>(n_keys);
    a.top_k = static_cast<int>(top_k);
    a.row_len = row_len;
    auto* queues = queue_in_smem ? nullptr : reinterpret_cast<Entry*>(base + flags_bytes);
    auto* marks = reinterpret_cast<uint8_t*>(base + flags_bytes + queue_bytes);

    const auto s = static_cast<cudaStream_t>(stream);
    const int64_t select_blocks = std::min<int64_t>(n_rows, int64_t{1} << 20);
    dsa_topk_select_kernel<<<static_cast<unsigned>(select_blocks), kSelectThreads, 0, s>>>(a);
    PENSTOCK_CUDA_LAUNCH_CHECK();
    const size_t smem = queue_in_smem ? static_cast<size_t>(row_len) * sizeof(Entry) : 0;
    PENSTOCK_CUDA_CHECK(cudaFuncSetAttribute(dsa_topk_replay_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(kReplaySmemBytes)));
    dsa_topk_replay_kernel<<<static_cast<unsigned>(replay_blocks), kReplayThreads, smem, s>>>(a, queues, marks,
                                                                                            queue_in_smem);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
