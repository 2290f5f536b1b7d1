// MoE routing, alignment and permutation on the GPU. Same contracts as kernels/ref/moe.cc.
//   moe_routing: one warp per token (logits f32 or bf16; scores, bias and weights f32); scores and selection scores
//   staged in shared memory; top-k by k rounds of a warp
//     argmax that breaks ties toward the lower index (the reference's stable descending sort), groups likewise.
//   moe_align: a device counting sort, stable in the pair index: per-chunk histograms, a per-expert scan over chunks
//     (one block per expert), a block scan over experts (CUB BlockScan), then a scatter where one warp walks its
//     chunk in order (ranks within 32 pairs from __match_any_sync). Integer atomics on shared memory only; the
//     result is deterministic.
//   moe_permute: token order (each token row read once, stored to its top_k rows through the inverse pair -> row
//     map) for 16-byte rows, else a row gather. moe_unpermute: an inverse pair -> row map, then one block per token
//     adds its slots in increasing slot order (no float atomics: deterministic).
// Scratch for moe_align / moe_unpermute comes from cudaMallocAsync on the stream (stream-ordered, graph capturable).
// TODO(#7): take that scratch from the forward's Workspace.
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/launch_util.cuh"

namespace penstock::cuda {

namespace {

// (value, index) pair ordering: a beats b when its value is larger, or equal with a lower index.
__device__ __forceinline__ bool beats(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }

__device__ __forceinline__ void warp_argmax(float& v, int& idx) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (beats(ov, oi, v, idx)) {
            v = ov;
            idx = oi;
        }
    }
}

constexpr int kRoutingWarps = 4;

// Shared memory per warp: s[n_experts], c[n_experts], group_score[n_group].
template <class L>
__global__ void moe_routing_kernel(int32_t* ids, float* weights, const L* logits, const float* bias, int64_t n_tokens,
                                   int n_experts, int top_k, int n_group, int topk_group, float scaling, bool norm,
                                   bool softmax_scoring, int64_t logits_stride, int64_t ids_s0, int64_t ids_s1,
                                   int64_t w_s0, int64_t w_s1) {
    extern __shared__ float routing_smem[];
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kRoutingWarps + warp;
    if (t >= n_tokens) return;
    float* s = routing_smem + static_cast<int64_t>(warp) * (2 * n_experts + n_group);
    float* c = s + n_experts;
    float* gscore = c + n_experts;
    const L* l = logits + t * logits_stride;

    if (!softmax_scoring) {
        for (int e = lane; e < n_experts; e += 32) s[e] = 1.0f / (1.0f + expf(-to_f32(l[e])));
    } else {
        float m = -INFINITY;
        for (int e = lane; e < n_experts; e += 32) m = fmaxf(m, to_f32(l[e]));
        m = warp_reduce_max(m);
        double sum = 0.0;
        for (int e = lane; e < n_experts; e += 32) sum += static_cast<double>(expf(to_f32(l[e]) - m));
#pragma unroll
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        for (int e = lane; e < n_experts; e += 32)
            s[e] = static_cast<float>(static_cast<double>(expf(to_f32(l[e]) - m)) / sum);
    }
    for (int e = lane; e < n_experts; e += 32) c[e] = s[e] + (bias != nullptr ? bias[e] : 0.0f);
    __syncwarp();

    if (n_group > 1) {
        const int per_group = n_experts / n_group;
        for (int g = lane; g < n_group; g += 32) {
            float b1 = -INFINITY, b2 = -INFINITY;  // the two largest c of the group
            for (int i = 0; i < per_group; ++i) {
                const float v = c[g * per_group + i];
                if (v > b1) {
                    b2 = b1;
                    b1 = v;
                } else if (v > b2) {
                    b2 = v;
                }
            }
            gscore[g] = bias != nullptr ? b1 + b2 : b1;
        }
        __syncwarp();
        // Keep the best topk_group groups (a bitmask, the same in every lane).
        unsigned keep_lo = 0, keep_hi = 0;  // groups 0..31 and 32..63
        for (int round = 0; round < topk_group; ++round) {
            float v = -INFINITY;
            int idx = 0x7fffffff;
            for (int g = lane; g < n_group; g += 32) {
                const bool kept = g < 32 ? (keep_lo >> g) & 1u : (keep_hi >> (g - 32)) & 1u;
                if (!kept && beats(gscore[g], g, v, idx)) {
                    v = gscore[g];
                    idx = g;
                }
            }
            warp_argmax(v, idx);
            if (idx < 32) {
                keep_lo |= 1u << idx;
            } else {
                keep_hi |= 1u << (idx - 32);
            }
        }
        for (int e = lane; e < n_experts; e += 32) {
            const int g = e / per_group;
            const bool kept = g < 32 ? (keep_lo >> g) & 1u : (keep_hi >> (g - 32)) & 1u;
            if (!kept) c[e] = -INFINITY;
        }
        __syncwarp();
    }

    // top_k rounds of a warp argmax over c; the chosen expert's c becomes -inf. The host checked top_k <= the
    // eligible experts, whose c are finite, so a taken (or masked) expert is never chosen again.
    float sum = 0.0f;
    float my_w = 0.0f;  // lane k keeps slot k's weight (k < 32)
    int my_id = 0;
    for (int k = 0; k < top_k; ++k) {
        float v = -INFINITY;
        int idx = 0x7fffffff;
        for (int e = lane; e < n_experts; e += 32) {
            if (beats(c[e], e, v, idx)) {
                v = c[e];
                idx = e;
            }
        }
        warp_argmax(v, idx);
        const float w = s[idx];
        sum += w;
        if (lane == k) {
            my_w = w;
            my_id = idx;
        }
        if (k >= 32 && lane == 0) {  // more than 32 slots: lane 0 writes and rescales them below
            ids[t * ids_s0 + k * ids_s1] = idx;
            weights[t * w_s0 + k * w_s1] = w;
        }
        __syncwarp();
        if (lane == 0) c[idx] = -INFINITY;
        __syncwarp();
    }
    const float denom = sum + 1e-20f;
    if (lane < top_k) {
        float w = my_w;
        if (norm) w /= denom;
        w *= scaling;
        ids[t * ids_s0 + lane * ids_s1] = my_id;
        weights[t * w_s0 + lane * w_s1] = w;
    }
    if (top_k > 32 && lane == 0) {
        for (int k = 32; k < top_k; ++k) {
            float w = weights[t * w_s0 + k * w_s1];
            if (norm) w /= denom;
            w *= scaling;
            weights[t * w_s0 + k * w_s1] = w;
        }
    }
}

constexpr int kAlignChunk = 1024;  // pairs per chunk

// Per-chunk histogram: counts[chunk * n_experts + e].
__global__ void align_count_kernel(int32_t* counts, const int32_t* topk_ids, int64_t n_pairs, int n_experts,
                                   int32_t e0) {
    extern __shared__ int32_t align_smem[];
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x) align_smem[e] = 0;
    __syncthreads();
    const int64_t base = static_cast<int64_t>(blockIdx.x) * kAlignChunk;
    for (int64_t i = base + threadIdx.x; i < base + kAlignChunk && i < n_pairs; i += blockDim.x) {
        const int64_t e = static_cast<int64_t>(topk_ids[i]) - e0;
        if (e >= 0 && e < n_experts) atomicAdd(&align_smem[e], 1);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n_experts; e += blockDim.x)
        counts[blockIdx.x * static_cast<int64_t>(n_experts) + e] = align_smem[e];
}

// Per expert (one block each): its counts over chunks -> exclusive prefix (in place); totals[e] = the expert's count.
constexpr int kScanThreads = 128;
__global__ void __launch_bounds__(kScanThreads)
    align_scan_chunks_kernel(int32_t* counts, int32_t* totals, int n_chunks, int n_experts) {
    using Scan = cub::BlockScan<int32_t, kScanThreads>;
    __shared__ typename Scan::TempStorage tmp;
    const int e = static_cast<int>(blockIdx.x);
    int32_t carry = 0;
    for (int c0 = 0; c0 < n_chunks; c0 += kScanThreads) {
        const int c = c0 + static_cast<int>(threadIdx.x);
        int32_t* slot = counts + static_cast<int64_t>(c) * n_experts + e;
        const int32_t v = c < n_chunks ? *slot : 0;
        int32_t excl = 0, total = 0;
        Scan(tmp).ExclusiveSum(v, excl, total);
        if (c < n_chunks) *slot = carry + excl;
        carry += total;
        __syncthreads();  // tmp is reused by the next tile
    }
    if (threadIdx.x == 0) totals[e] = carry;
}

// One block: expert_offsets = exclusive scan of totals (n_experts + 1 entries).
constexpr int kExpertScanThreads = 1024;
__global__ void __launch_bounds__(kExpertScanThreads)
    align_scan_experts_kernel(int32_t* offsets, const int32_t* totals, int n_experts) {
    using Scan = cub::BlockScan<int32_t, kExpertScanThreads>;
    __shared__ typename Scan::TempStorage tmp;
    int32_t carry = 0;
    for (int e0 = 0; e0 < n_experts; e0 += kExpertScanThreads) {
        const int e = e0 + static_cast<int>(threadIdx.x);
        const int32_t v = e < n_experts ? totals[e] : 0;
        int32_t excl = 0, total = 0;
        Scan(tmp).ExclusiveSum(v, excl, total);
        if (e < n_experts) offsets[e] = carry + excl;
        carry += total;
        __syncthreads();
    }
    if (threadIdx.x == 0) offsets[n_experts] = carry;
}

// One warp per chunk walks its pairs in order, 32 at a time: rank among equal experts from __match_any_sync.
__global__ void align_scatter_kernel(int32_t* sorted_pairs, const int32_t* topk_ids, const int32_t* counts,
                                     const int32_t* offsets, int64_t n_pairs, int n_experts, int32_t e0) {
    extern __shared__ int32_t align_smem[];  // running count per expert within this chunk
    const int lane = static_cast<int>(threadIdx.x);
    for (int e = lane; e < n_experts; e += 32) align_smem[e] = 0;
    __syncwarp();
    const int64_t base = static_cast<int64_t>(blockIdx.x) * kAlignChunk;
    const int32_t* chunk_base = counts + static_cast<int64_t>(blockIdx.x) * n_experts;
    const unsigned lt_mask = (1u << lane) - 1u;
    for (int64_t i0 = base; i0 < base + kAlignChunk && i0 < n_pairs; i0 += 32) {
        const int64_t i = i0 + lane;
        const int64_t e64 = i < n_pairs ? static_cast<int64_t>(topk_ids[i]) - e0 : -1;
        const bool valid = e64 >= 0 && e64 < n_experts;
        int32_t e = static_cast<int32_t>(e64);
        if (!valid) e = -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        const int rank = __popc(peers & lt_mask);
        if (valid) {
            const int32_t pos = offsets[e] + chunk_base[e] + align_smem[e] + rank;
            sorted_pairs[pos] = static_cast<int32_t>(i);
        }
        __syncwarp();
        // The highest lane of each peer group advances the expert's running count.
        if (valid && (peers >> lane) == 1u) align_smem[e] += __popc(peers);
        __syncwarp();
    }
}

// sorted_pairs[i] = -1 for i in [offsets[n_experts], n_pairs) (unspecified by contract; -1 as the reference).
__global__ void align_tail_kernel(int32_t* sorted_pairs, const int32_t* offsets, int64_t n_pairs, int n_experts) {
    for (int64_t i = offsets[n_experts] + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_pairs;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        sorted_pairs[i] = -1;
    }
}

template <class T>
__global__ void permute_kernel(T* out, const T* in, const int32_t* sorted_pairs, int64_t hidden, int top_k,
                               int64_t n_tokens, int64_t os, int64_t is) {
    const int64_t i = blockIdx.x;
    const int32_t pair = sorted_pairs[i];
    const int64_t token = pair / top_k;
    if (pair < 0 || token >= n_tokens) return;
    copy_row_bytes(out + i * os, in + token * is, hidden * static_cast<int64_t>(sizeof(T)),
                   static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

// The same rows in token order: warp w of the grid reads token w's row once (16-byte chunks, four in flight per lane)
// and stores it to each of its top_k rows, row_of_pair[token * top_k + k] (-1: not in out). Lane k holds slot k's
// row (top_k <= 32). A gather reads each token's row top_k times, mostly from DRAM at prefill sizes (16K tokens of 14
// KB do not stay in L2 between an expert group and the next); this reads it once: 1 + top_k row transfers per token
// instead of 2 top_k. out's bytes are the gather's (sorted_pairs' first n_rows entries are distinct).
constexpr int kScatterWarps = 8;

__global__ void __launch_bounds__(32 * kScatterWarps)
    permute_scatter_kernel(uint4* out, const uint4* in, const int32_t* row_of_pair, int64_t chunks, int top_k,
                           int64_t n_tokens, int64_t os, int64_t is) {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int64_t token = static_cast<int64_t>(blockIdx.x) * kScatterWarps + (threadIdx.x >> 5);
    if (token >= n_tokens) return;
    const int32_t my_row = lane < top_k ? row_of_pair[token * top_k + lane] : -1;
    const uint4* src = in + token * is;
    for (int64_t c = lane; c < chunks; c += 4 * 32) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (c + 32 * j < chunks) v[j] = __ldcs(src + c + 32 * j);  // read once: streaming
        }
        for (int k = 0; k < top_k; ++k) {
            const int32_t row = __shfl_sync(0xffffffffu, my_row, k);
            if (row < 0) continue;
            uint4* dst = out + row * os;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (c + 32 * j < chunks) dst[c + 32 * j] = v[j];
            }
        }
    }
}

__global__ void inverse_pairs_kernel(int32_t* row_of_pair, const int32_t* sorted_pairs, int64_t n_rows,
                                     int64_t n_pairs) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_rows;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int32_t pair = sorted_pairs[i];
        if (pair >= 0 && pair < n_pairs) row_of_pair[pair] = static_cast<int32_t>(i);
    }
}

template <class T>
__global__ void unpermute_kernel(T* out, const T* expert_out, const int32_t* row_of_pair, const float* weights,
                                 int64_t hidden, int top_k, int64_t os, int64_t es, int64_t ws0, int64_t ws1) {
    const int64_t t = blockIdx.x;
    T* dst = out + t * os;
    for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
        float acc = to_f32(dst[h]);
        for (int k = 0; k < top_k; ++k) {
            const int32_t row = row_of_pair[t * top_k + k];
            if (row < 0) continue;
            acc += weights[t * ws0 + k * ws1] * to_f32(expert_out[row * es + h]);
        }
        dst[h] = from_f32<T>(acc);
    }
}

// The same, 16 bytes per thread per row: each block stages its token's top-k rows and weights in shared memory and
// moves the expert rows as Pack<T, V> (hidden % V == 0, 16-byte aligned rows; top_k <= kUnpermuteMaxTopK).
constexpr int kUnpermuteMaxTopK = 64;

template <class T>
__global__ void unpermute_vec_kernel(T* out, const T* expert_out, const int32_t* row_of_pair, const float* weights,
                                     int64_t hidden, int top_k, int64_t os, int64_t es, int64_t ws0, int64_t ws1) {
    constexpr int V = 16 / static_cast<int>(sizeof(T));
    using P = Pack<T, V>;
    __shared__ int32_t rows[kUnpermuteMaxTopK];
    __shared__ float wts[kUnpermuteMaxTopK];
    const int64_t t = blockIdx.x;
    for (int k = static_cast<int>(threadIdx.x); k < top_k; k += static_cast<int>(blockDim.x)) {
        rows[k] = row_of_pair[t * top_k + k];
        wts[k] = weights[t * ws0 + k * ws1];
    }
    __syncthreads();
    T* dst = out + t * os;
    for (int64_t h = static_cast<int64_t>(threadIdx.x) * V; h < hidden; h += static_cast<int64_t>(blockDim.x) * V) {
        const P d = *reinterpret_cast<const P*>(dst + h);
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = to_f32(d.v[j]);
        // Four slots' loads in flight before their adds (a DRAM latency per slot otherwise); the adds stay in slot
        // order.
        for (int k0 = 0; k0 < top_k; k0 += 4) {
            P x[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int32_t row = k0 + u < top_k ? rows[k0 + u] : -1;
                if (row >= 0) x[u] = *reinterpret_cast<const P*>(expert_out + row * es + h);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                if (k0 + u >= top_k || rows[k0 + u] < 0) continue;
                const float w = wts[k0 + u];
#pragma unroll
                for (int j = 0; j < V; ++j) acc[j] = fmaf(w, to_f32(x[u].v[j]), acc[j]);
            }
        }
        P o;
#pragma unroll
        for (int j = 0; j < V; ++j) o.v[j] = from_f32<T>(acc[j]);
        *reinterpret_cast<P*>(dst + h) = o;
    }
}

// Stream-ordered scratch, freed on the stream when the guard leaves scope.
class StreamScratch {
public:
    StreamScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
        PENSTOCK_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes > 0 ? bytes : 4, stream));
    }
    ~StreamScratch() { (void)cudaFreeAsync(ptr_, stream_); }
    StreamScratch(const StreamScratch&) = delete;
    StreamScratch& operator=(const StreamScratch&) = delete;
    int32_t* i32() const { return static_cast<int32_t*>(ptr_); }

private:
    void* ptr_ = nullptr;
    cudaStream_t stream_;
};

void check_i32(const TensorView& v, int ndim, const char* op, const char* name) {
    check_on_gpu(v, op, name);
    PENSTOCK_CHECK(v.dtype == DType::kI32) << op << ": " << name << " must be i32";
    PENSTOCK_CHECK_EQ(v.ndim, ndim) << op << ": " << name << " " << v.shape_string();
}

}  // namespace

void moe_routing(const kernels::MoeRoutingParams& p, void* stream) {
    const char* op = "moe_routing";
    check_on_gpu(p.logits, op, "logits");
    PENSTOCK_CHECK(p.logits.ndim == 2 && is_float_dtype(p.logits.dtype) && p.logits.stride(1) == 1)
        << op << ": logits [n_tokens, n_experts] f32 or bf16, contiguous rows";
    const int64_t n_tokens = p.logits.size(0);
    const int64_t n_experts = p.logits.size(1);
    check_i32(p.topk_ids, 2, op, "topk_ids");
    check_on_gpu(p.topk_weights, op, "topk_weights");
    PENSTOCK_CHECK(p.topk_weights.ndim == 2 && p.topk_weights.dtype == DType::kF32) << op << ": topk_weights f32";
    const int64_t top_k = p.topk_ids.size(1);
    PENSTOCK_CHECK(p.topk_ids.size(0) == n_tokens && p.topk_weights.size(0) == n_tokens &&
                   p.topk_weights.size(1) == top_k)
        << op << ": output shapes";
    const bool has_bias = p.bias.data != nullptr;
    if (has_bias) {
        check_on_gpu(p.bias, op, "bias");
        PENSTOCK_CHECK(p.bias.ndim == 1 && p.bias.dtype == DType::kF32 && p.bias.size(0) == n_experts &&
                       p.bias.stride(0) == 1)
            << op << ": bias [n_experts] f32";
    }
    PENSTOCK_CHECK(p.n_group >= 1 && p.n_group <= 64) << op << ": n_group " << p.n_group << " (1..64)";
    PENSTOCK_CHECK_EQ(n_experts % p.n_group, 0) << op << ": n_experts must divide into n_group groups";
    PENSTOCK_CHECK(1 <= p.topk_group && p.topk_group <= p.n_group) << op << ": topk_group " << p.topk_group;
    const int64_t per_group = n_experts / p.n_group;
    const int64_t n_eligible = p.n_group > 1 ? p.topk_group * per_group : n_experts;
    PENSTOCK_CHECK(1 <= top_k && top_k <= n_eligible) << op << ": top_k " << top_k << " vs " << n_eligible;
    if (p.n_group > 1 && has_bias) PENSTOCK_CHECK_GE(per_group, 2) << op;
    if (n_tokens == 0) return;
    const size_t smem = sizeof(float) * kRoutingWarps * static_cast<size_t>(2 * n_experts + p.n_group);
    PENSTOCK_CHECK_LE(smem, size_t{48} * 1024) << op << ": n_experts " << n_experts << " too large";
    const auto s = static_cast<cudaStream_t>(stream);
    dispatch_float(p.logits.dtype, op, [&](auto l) {
        using L = decltype(l);
        moe_routing_kernel<L><<<blocks_for(n_tokens, kRoutingWarps), kRoutingWarps * 32, smem, s>>>(
            p.topk_ids.ptr<int32_t>(), p.topk_weights.ptr<float>(), p.logits.ptr<const L>(),
            has_bias ? p.bias.ptr<const float>() : nullptr, n_tokens, static_cast<int>(n_experts),
            static_cast<int>(top_k), p.n_group, p.topk_group, p.routed_scaling_factor, p.norm_topk_prob,
            p.scoring == kernels::MoeScoring::kSoftmax, p.logits.stride(0), p.topk_ids.stride(0), p.topk_ids.stride(1),
            p.topk_weights.stride(0), p.topk_weights.stride(1));
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void moe_align(const kernels::MoeAlignParams& p, void* stream) {
    const char* op = "moe_align";
    check_i32(p.topk_ids, 2, op, "topk_ids");
    check_i32(p.expert_offsets, 1, op, "expert_offsets");
    check_i32(p.sorted_pairs, 1, op, "sorted_pairs");
    PENSTOCK_CHECK(p.topk_ids.is_contiguous() && p.expert_offsets.is_contiguous() && p.sorted_pairs.is_contiguous())
        << op << ": contiguous tensors";
    const int64_t n_pairs = p.topk_ids.numel();
    const int64_t n_experts = p.expert_offsets.size(0) - 1;
    PENSTOCK_CHECK_GE(n_experts, 0) << op;
    PENSTOCK_CHECK_EQ(p.sorted_pairs.size(0), n_pairs) << op;
    PENSTOCK_CHECK_LE(n_pairs, int64_t{0x7fffffff}) << op;
    PENSTOCK_CHECK_LE(n_experts, 12 * 1024) << op << ": n_experts";
    const auto s = static_cast<cudaStream_t>(stream);
    const int ne = static_cast<int>(n_experts);
    const int n_chunks = static_cast<int>((n_pairs + kAlignChunk - 1) / kAlignChunk);
    StreamScratch scratch(
        sizeof(int32_t) * (static_cast<size_t>(n_chunks) * static_cast<size_t>(ne) + static_cast<size_t>(ne)), s);
    int32_t* counts = scratch.i32();
    int32_t* totals = counts + static_cast<int64_t>(n_chunks) * ne;
    const size_t smem = sizeof(int32_t) * static_cast<size_t>(ne > 0 ? ne : 1);
    if (n_chunks > 0 && ne > 0) {
        align_count_kernel<<<static_cast<unsigned>(n_chunks), 256, smem, s>>>(counts, p.topk_ids.ptr<const int32_t>(),
                                                                              n_pairs, ne, p.expert_begin);
        PENSTOCK_CUDA_LAUNCH_CHECK();
        align_scan_chunks_kernel<<<static_cast<unsigned>(ne), kScanThreads, 0, s>>>(counts, totals, n_chunks, ne);
        PENSTOCK_CUDA_LAUNCH_CHECK();
    } else if (ne > 0) {
        PENSTOCK_CUDA_CHECK(cudaMemsetAsync(totals, 0, sizeof(int32_t) * static_cast<size_t>(ne), s));
    }
    align_scan_experts_kernel<<<1, kExpertScanThreads, 0, s>>>(p.expert_offsets.ptr<int32_t>(), totals, ne);
    PENSTOCK_CUDA_LAUNCH_CHECK();
    if (n_chunks > 0 && ne > 0) {
        align_scatter_kernel<<<static_cast<unsigned>(n_chunks), 32, smem, s>>>(
            p.sorted_pairs.ptr<int32_t>(), p.topk_ids.ptr<const int32_t>(), counts, p.expert_offsets.ptr<int32_t>(),
            n_pairs, ne, p.expert_begin);
        PENSTOCK_CUDA_LAUNCH_CHECK();
    }
    if (n_pairs > 0) {
        align_tail_kernel<<<blocks_for(n_pairs, 256), 256, 0, s>>>(p.sorted_pairs.ptr<int32_t>(),
                                                                   p.expert_offsets.ptr<const int32_t>(), n_pairs, ne);
        PENSTOCK_CUDA_LAUNCH_CHECK();
    }
}

void moe_permute(const kernels::MoePermuteParams& p, void* stream) {
    const char* op = "moe_permute";
    check_on_gpu(p.out, op, "out");
    check_on_gpu(p.in, op, "in");
    PENSTOCK_CHECK(p.out.ndim == 2 && p.in.ndim == 2 && p.out.size(1) == p.in.size(1)) << op << ": shapes";
    PENSTOCK_CHECK(p.out.stride(1) == 1 && p.in.stride(1) == 1) << op << ": last dim must be contiguous";
    PENSTOCK_CHECK(p.out.dtype == p.in.dtype) << op << ": dtypes differ";
    check_i32(p.sorted_pairs, 1, op, "sorted_pairs");
    PENSTOCK_CHECK_GE(p.sorted_pairs.size(0), p.out.size(0)) << op;
    PENSTOCK_CHECK_GE(p.top_k, 1) << op;
    const int64_t n_rows = p.out.size(0);
    if (n_rows == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    const int64_t n_tokens = p.in.size(0);
    const int64_t n_pairs = n_tokens * p.top_k;
    const int64_t es = static_cast<int64_t>(dtype_bytes(p.in.dtype, 1));
    const int64_t row_bytes = p.out.size(1) * es;
    // Token order (one read of each token row, one warp per token) for 16-byte rows and top_k <= 32; else the
    // gather (one block per out row). Small rows gain too: FP8 activations' block scales (224-byte rows at 7168
    // columns) took one 128-thread block per row.
    if (p.top_k <= 32 && row_bytes % 16 == 0 && (p.out.stride(0) * es) % 16 == 0 && (p.in.stride(0) * es) % 16 == 0 &&
        is_aligned16(p.out.data) && is_aligned16(p.in.data) && n_tokens > 0) {
        StreamScratch row_of_pair(sizeof(int32_t) * static_cast<size_t>(n_pairs), s);
        PENSTOCK_CUDA_CHECK(
            cudaMemsetAsync(row_of_pair.i32(), 0xff, sizeof(int32_t) * static_cast<size_t>(n_pairs), s));
        inverse_pairs_kernel<<<blocks_for(n_rows, 256), 256, 0, s>>>(
            row_of_pair.i32(), p.sorted_pairs.ptr<const int32_t>(), n_rows, n_pairs);
        PENSTOCK_CUDA_LAUNCH_CHECK();
        const auto blocks = static_cast<unsigned>((n_tokens + kScatterWarps - 1) / kScatterWarps);  // a warp a token
        permute_scatter_kernel<<<blocks, 32 * kScatterWarps, 0, s>>>(
            static_cast<uint4*>(p.out.data), static_cast<const uint4*>(p.in.data), row_of_pair.i32(), row_bytes / 16,
            p.top_k, n_tokens, p.out.stride(0) * es / 16, p.in.stride(0) * es / 16);
        PENSTOCK_CUDA_LAUNCH_CHECK();
        return;
    }
    if (p.out.dtype == DType::kF8E4M3) {  // e4m3 activations: rows of bytes
        permute_kernel<uint8_t><<<static_cast<unsigned>(n_rows), 128, 0, s>>>(
            static_cast<uint8_t*>(p.out.data), static_cast<const uint8_t*>(p.in.data),
            p.sorted_pairs.ptr<const int32_t>(), p.out.size(1), p.top_k, p.in.size(0), p.out.stride(0), p.in.stride(0));
    } else {
        dispatch_float(p.out.dtype, op, [&](auto t) {
            using T = decltype(t);
            permute_kernel<T><<<static_cast<unsigned>(n_rows), 128, 0, s>>>(
                p.out.ptr<T>(), p.in.ptr<const T>(), p.sorted_pairs.ptr<const int32_t>(), p.out.size(1), p.top_k,
                p.in.size(0), p.out.stride(0), p.in.stride(0));
        });
    }
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

void moe_unpermute(const kernels::MoeUnpermuteParams& p, void* stream) {
    const char* op = "moe_unpermute";
    check_on_gpu(p.out, op, "out");
    check_on_gpu(p.expert_out, op, "expert_out");
    check_on_gpu(p.topk_weights, op, "topk_weights");
    PENSTOCK_CHECK(p.out.ndim == 2 && p.expert_out.ndim == 2 && p.topk_weights.ndim == 2) << op << ": shapes";
    PENSTOCK_CHECK(p.out.dtype == p.expert_out.dtype) << op << ": out and expert_out dtypes differ";
    PENSTOCK_CHECK(p.topk_weights.dtype == DType::kF32) << op << ": topk_weights must be f32";
    check_i32(p.sorted_pairs, 1, op, "sorted_pairs");
    const int64_t n_tokens = p.out.size(0);
    const int64_t hidden = p.out.size(1);
    const int64_t n_rows = p.expert_out.size(0);
    const int64_t top_k = p.topk_weights.size(1);
    PENSTOCK_CHECK_EQ(p.expert_out.size(1), hidden) << op;
    PENSTOCK_CHECK_EQ(p.topk_weights.size(0), n_tokens) << op;
    PENSTOCK_CHECK(p.out.stride(1) == 1 && p.expert_out.stride(1) == 1) << op << ": last dim must be contiguous";
    PENSTOCK_CHECK_GE(p.sorted_pairs.size(0), n_rows) << op;
    const int64_t n_pairs = n_tokens * top_k;
    if (n_tokens == 0 || hidden == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    StreamScratch scratch(sizeof(int32_t) * static_cast<size_t>(n_pairs), s);
    PENSTOCK_CUDA_CHECK(cudaMemsetAsync(scratch.i32(), 0xff, sizeof(int32_t) * static_cast<size_t>(n_pairs), s));
    if (n_rows > 0) {
        inverse_pairs_kernel<<<blocks_for(n_rows, 256), 256, 0, s>>>(scratch.i32(), p.sorted_pairs.ptr<const int32_t>(),
                                                                     n_rows, n_pairs);
        PENSTOCK_CUDA_LAUNCH_CHECK();
    }
    dispatch_float(p.out.dtype, op, [&](auto t) {
        using T = decltype(t);
        constexpr int64_t V = 16 / static_cast<int64_t>(sizeof(T));
        const bool vec = top_k <= kUnpermuteMaxTopK && hidden % V == 0 && p.out.stride(0) % V == 0 &&
                         p.expert_out.stride(0) % V == 0 && is_aligned16(p.out.data) && is_aligned16(p.expert_out.data);
        if (vec) {
            const int threads = hidden / V >= 256 ? 256 : 128;
            unpermute_vec_kernel<T><<<static_cast<unsigned>(n_tokens), threads, 0, s>>>(
                p.out.ptr<T>(), p.expert_out.ptr<const T>(), scratch.i32(), p.topk_weights.ptr<const float>(), hidden,
                static_cast<int>(top_k), p.out.stride(0), p.expert_out.stride(0), p.topk_weights.stride(0),
                p.topk_weights.stride(1));
        } else {
            unpermute_kernel<T><<<static_cast<unsigned>(n_tokens), hidden >= 256 ? 256 : 128, 0, s>>>(
                p.out.ptr<T>(), p.expert_out.ptr<const T>(), scratch.i32(), p.topk_weights.ptr<const float>(), hidden,
                static_cast<int>(top_k), p.out.stride(0), p.expert_out.stride(0), p.topk_weights.stride(0),
                p.topk_weights.stride(1));
        }
    });
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

}  // namespace penstock::cuda
