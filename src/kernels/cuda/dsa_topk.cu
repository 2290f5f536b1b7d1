// dsa_topk on the GPU (kernels/ops_dsa.h; reference kernels/ref/dsa.cc). The reference selects, per row, top_k
// entries of an emulated torch row of `row_len` (value, index) pairs (masked entries -FLT_MAX) with libstdc++'s
// nth_element / partial_sort, then keeps the visible picks in ascending order. The selected set is unique unless the
// top_k-th value is tied with entries outside the selection; only then does the algorithm's tie order matter.
// Keys: order-preserving u32 (NaN highest and all NaNs equal, -0 == +0): exactly the reference comparator's classes.
//
// Pass 1 (a persistent grid taking rows last-first from an atomic counter, one row per block at a time). Calls with
// n_keys > 16384, or small enough for the candidate list, run dsa_topk_stream_kernel (below: a long row is streamed
// once through a sampled bound into a candidate list, a short one held whole); the others dsa_topk_select_kernel
// (kRangeRadixRowSmem: every call): the row's visible logits are copied once into shared memory by cp.async and
// turned into keys (the first `cap` of them: 16384 at 512 threads, 3 blocks per SM, when n_keys <= 16384, else 49152
// at 1024 threads; a longer row reads the rest from global memory in every step), with their max / min and the count
// above the masked key. A
// range radix select then bins the keys of [lo, hi] into 2048 bins of width 2^shift (shift from the range, so one
// exponent's worth of logits already spreads over the bins) and narrows [lo, hi] to the bin holding the top_k-th key;
// it stops as soon as that bin is taken whole, or at width 1. The masked entries are counted analytically, never read,
// and only enter the range when fewer than top_k visible keys lie above them. Unique set: {key >= threshold}, written
// in ascending order by a two-pass warp-chunked compaction, four keys per lane (16-byte shared loads; a warp scan of
// the lanes' counts places each lane's picks; kRangeRadixScalarCompact: one key per lane and a ballot, for same-run
// comparisons; that compaction was half the select kernel's instructions). Tied boundary: the row goes on a list for
// pass 2.
//
// Pass 2 (dsa_topk_replay_kernel, one block per listed row): the queue of (key, index) entries is built in shared
// memory (global scratch when it does not fit) and libstdc++'s introselect is replayed with each Hoare partition run
// in parallel: the i-th left stop (from the left) swaps with the i-th right stop (from the right) while they have
// not crossed, so ranks from two block scans give every swap pair and the cut (the permutation is the serial one,
// element for element). The median-of-3, small ranges and the depth-limit heap select run serially on thread 0
// (stl_select.cuh). partial_sort rows (top_k * 64 <= row_len) keep only heap_select's heap, in shared memory: the
// block screens the row chunk by chunk against the heap's root, and thread 0 replays the scan's steps on the survivors
// alone (block_heap_select; the same heap, entry for entry).
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdlib>

#include "kernels/cuda/cuda_ops_dsa.h"
#include "kernels/cuda/dsa_topk_internal.h"
#include "kernels/cuda/dsa_topk_sample.h"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/stl_select.cuh"
#include "kernels/cuda/tile_util.cuh"

namespace penstock::cuda {

namespace {

constexpr int kBins = 2048;  // range-select bins per step (11 bits)
constexpr int kBinBits = 11;
// Short-row launch: 512 threads, up to 16384 keys in shared memory (64 KB + 8 KB of bins: three blocks per SM).
constexpr int kShortThreads = 512;
constexpr int kShortCap = 16384;
// Long-row launch (n_keys > kShortCap): 1024 threads, one block per SM, up to 49152 keys (192 KB) in shared memory.
constexpr int kLongThreads = 1024;
constexpr int kLongCap = 49152;
// Stream launch (dsa_topk_stream_kernel, the default for n_keys > kShortCap): 256 threads; candidates of a row in
// shared memory (key and index, 8 bytes each), topk_sample::candidate_cap of them (GLM-5.3's top 2048: 5632, 52 KB
// with the bins, four blocks per SM).
constexpr int kStreamThreads = 256;
constexpr int kStreamPrefetch = 1;  // L2 prefetch distance of the streaming pass, in chunks (stream_prefetch; 1 ran
                                    // 3.5% faster than none and 2.5% faster than 2 at GLM-5.3's 64K on an H100,
                                    // docs/perf/2026-12-05-s41.md)
constexpr int kReplayThreads = 1024;
constexpr size_t kReplaySmemBytes = 220 * 1024;          // queues of up to ~18.7K entries stay in shared memory
constexpr size_t kMaxReplayScratch = size_t{512} << 20;  // global queues beyond that: fewer replay blocks
constexpr int kSerialTail = 32;                          // introselect ranges this short finish on thread 0
constexpr int kHeapChunk = 8192;  // block_heap_select's screening chunk (survivors: 64 KB of shared memory)

__host__ __device__ constexpr uint32_t masked_key() { return 0x00800000u; }  // order_key(-FLT_MAX)

__device__ __forceinline__ uint32_t order_key(float x) {
    if (isnan(x)) return 0xffffffffu;
    uint32_t u = __float_as_uint(x);
    if (u == 0x80000000u) u = 0;  // -0 == +0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ unsigned lanemask_lt() { return (1u << (threadIdx.x % 32)) - 1u; }

struct RadixArgs {
    int32_t* indices;
    const float* logits;
    const int32_t* q_pos;
    int32_t* counters;  // [0]: next row (select), [1]: tied rows listed, [2]: stream rows selected from global
    int32_t* tied;      // [n_rows]: rows whose boundary is tied, for the replay
    int64_t i0, lg0;
    int n_rows, n_keys, top_k;
    int cap;       // keys per row held in shared memory by the select kernel (the stream kernel: candidates)
    int prefetch;  // stream kernel: chunks of the row prefetched into L2 ahead of the streaming pass (0: none)
    int64_t row_len;
};

__device__ __forceinline__ int visible_keys(const RadixArgs& a, int r) {
    const int64_t v = static_cast<int64_t>(a.q_pos[r]) + 1;
    return static_cast<int>(v < 0 ? 0 : (v > a.n_keys ? a.n_keys : v));
}

// Calls write(i, s) for the s in [0, n) with pred(s), ascending (i: the s's rank among them), and returns their count
// to every thread. Warp w owns the 32-aligned chunk [w * cw, (w + 1) * cw): one pass counts, the warps' offsets come
// from `warp_counts` (NT / 32 ints of shared memory), a second pass writes. Every thread of the block must call it;
// the writes are visible to the block on return.
template <int NT, class Pred, class Write>
__device__ int compact_ordered_by(int n, Pred pred, Write write, int* warp_counts) {
    constexpr int kWarps = NT / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    const int cw = (n + NT - 1) / NT * 32;
    const int begin = warp * cw, end = min(n, begin + cw);
    int cnt = 0;
    for (int s0 = begin; s0 < end; s0 += 32) {
        const int s = s0 + lane;
        cnt += __popc(__ballot_sync(0xffffffffu, s < end && pred(s)));
    }
    if (lane == 0) warp_counts[warp] = cnt;
    __syncthreads();
    int base = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
        const int c = warp_counts[w];
        base += w < warp ? c : 0;
        total += c;
    }
    for (int s0 = begin; s0 < end; s0 += 32) {
        const int s = s0 + lane;
        const bool f = s < end && pred(s);
        const unsigned b = __ballot_sync(0xffffffffu, f);
        if (f) write(base + __popc(b & lanemask_lt()), s);
        base += __popc(b);
    }
    __syncthreads();  // warp_counts reused by the caller
    return total;
}

// compact_ordered_by writing s to out[i] (remap[s] instead of s when `remap` is given: candidate positions to row
// indices).
template <int NT, class Pred>
__device__ int compact_ordered(int32_t* out, int n, Pred pred, int* warp_counts, const int32_t* remap = nullptr) {
    return compact_ordered_by<NT>(
        n, pred, [&](int i, int s) { out[i] = remap != nullptr ? remap[s] : s; }, warp_counts);
}

// compact_ordered for pred(s) = key(s) >= threshold over a row's keys (s < n_smem: keys[s] in shared memory, else
// order_key(row[s])), four consecutive keys per lane: warp w owns the 128-aligned chunk [w * cw, (w + 1) * cw); the
// count pass sums per lane, the write pass places each lane's picks by a warp scan of the lanes' counts. Same output
// and contract as compact_ordered.
template <int NT>
__device__ int compact_at_least(int32_t* out, int n, const uint32_t* keys, int n_smem, const float* __restrict__ row,
                                uint32_t threshold, int* warp_counts, const int32_t* remap = nullptr) {
    constexpr int kWarps = NT / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    const int cw = (n + NT * 4 - 1) / (NT * 4) * 128;
    const int begin = warp * cw, end = min(n, begin + cw);
    // Keys s .. s + 3 (s a multiple of 4, so the 16-byte load is aligned) as flags: key >= threshold and index < end.
    const auto picks = [&](int s, bool(&f)[4]) {
        if (s + 3 < n_smem && s + 3 < end) {
            const uint4 v = *reinterpret_cast<const uint4*>(keys + s);
            f[0] = v.x >= threshold;
            f[1] = v.y >= threshold;
            f[2] = v.z >= threshold;
            f[3] = v.w >= threshold;
            return;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int t = s + j;
            f[j] = t < end && (t < n_smem ? keys[t] : order_key(__ldg(row + t))) >= threshold;
        }
    };
    int cnt = 0;
    for (int s = begin + lane * 4; s < end; s += 128) {
        bool f[4];
        picks(s, f);
        cnt += static_cast<int>(f[0]) + static_cast<int>(f[1]) + static_cast<int>(f[2]) + static_cast<int>(f[3]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
    if (lane == 0) warp_counts[warp] = cnt;
    __syncthreads();
    int base = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
        const int c = warp_counts[w];
        base += w < warp ? c : 0;
        total += c;
    }
    for (int s0 = begin; s0 < end; s0 += 128) {  // warp-uniform bounds: every lane reaches the shuffles
        const int s = s0 + lane * 4;
        bool f[4] = {false, false, false, false};
        if (s < end) picks(s, f);
        const int c = static_cast<int>(f[0]) + static_cast<int>(f[1]) + static_cast<int>(f[2]) + static_cast<int>(f[3]);
        if (__ballot_sync(0xffffffffu, c > 0) == 0) continue;
        int incl = c;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int t = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += t;
        }
        int pos = base + incl - c;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (f[j]) out[pos++] = remap != nullptr ? remap[s + j] : s + j;
        }
        base += __shfl_sync(0xffffffffu, incl, 31);
    }
    __syncthreads();  // warp_counts reused by the caller
    return total;
}

struct RowStats {
    unsigned above;  // visible keys > masked_key()
    uint32_t kmax, kmin_above, kmin_all;
};

constexpr RowStats kNoKeys{0u, 0u, 0xffffffffu, 0xffffffffu};  // the stats of no keys (add_key's start)

__device__ __forceinline__ void add_key(RowStats& st, uint32_t key) {
    st.above += key > masked_key() ? 1u : 0u;
    st.kmax = max(st.kmax, key);
    st.kmin_above = key > masked_key() ? min(st.kmin_above, key) : st.kmin_above;
    st.kmin_all = min(st.kmin_all, key);
}

// keys[0, n_smem) = order_key(row[...]); stats over all `visible` keys (the ones past n_smem read from global). A
// 16-byte aligned row is copied raw by cp.async, every chunk in flight at once (one memory latency per row, no
// register staging); each thread then converts the chunks it copied itself (visible to it after its own wait, so no
// barrier), while the scalar rest and the global tail are read in between.
template <int NT>
__device__ void load_row(const float* __restrict__ row, int visible, int n_smem, uint32_t* keys, RowStats& st) {
    const int tid = static_cast<int>(threadIdx.x);
    const bool vec = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
    const int nv = vec ? n_smem / 4 : 0;
    const auto* row4 = reinterpret_cast<const float4*>(row);
    auto* keys4 = reinterpret_cast<uint4*>(keys);
    for (int i = tid; i < nv; i += NT) tile::cp_async_16(tile::smem_u32(keys4 + i), row4 + i, true);
    tile::cp_async_commit();
    for (int s = nv * 4 + tid; s < n_smem; s += NT) {
        const uint32_t k = order_key(__ldg(row + s));
        add_key(st, k);
        keys[s] = k;
    }
    for (int s = n_smem + tid; s < visible; s += NT) add_key(st, order_key(__ldg(row + s)));
    tile::cp_async_wait_all();
    for (int i = tid; i < nv; i += NT) {
        const uint4 raw = keys4[i];
        const uint4 k{order_key(__uint_as_float(raw.x)), order_key(__uint_as_float(raw.y)),
                      order_key(__uint_as_float(raw.z)), order_key(__uint_as_float(raw.w))};
        add_key(st, k.x);
        add_key(st, k.y);
        add_key(st, k.z);
        add_key(st, k.w);
        keys4[i] = k;
    }
}

// Shared state of the select kernels besides the keys and bins.
struct SelectShared {
    int row;
    RowStats stats;  // reset between uses (block_stats)
    unsigned sel_bin, sel_rem, sel_cnt;
    int warp_counts[32];
    unsigned warp_sums[32];
    int step_counts[2][32];  // filter_row's per-warp counts, double-buffered by step
};

// The block's stats from every thread's `st` (every thread gets them); leaves sh.stats reset for the next call. The
// first call's reset is the kernel's (before its first barrier).
template <int NT>
__device__ RowStats block_stats(RowStats st, SelectShared& sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        st.above += __shfl_xor_sync(0xffffffffu, st.above, o);
        st.kmax = max(st.kmax, __shfl_xor_sync(0xffffffffu, st.kmax, o));
        st.kmin_above = min(st.kmin_above, __shfl_xor_sync(0xffffffffu, st.kmin_above, o));
        st.kmin_all = min(st.kmin_all, __shfl_xor_sync(0xffffffffu, st.kmin_all, o));
    }
    if (threadIdx.x % 32 == 0) {
        atomicAdd(&sh.stats.above, st.above);
        atomicMax(&sh.stats.kmax, st.kmax);
        atomicMin(&sh.stats.kmin_above, st.kmin_above);
        atomicMin(&sh.stats.kmin_all, st.kmin_all);
    }
    __syncthreads();
    const RowStats total = sh.stats;
    __syncthreads();
    if (threadIdx.x == 0) sh.stats = kNoKeys;
    return total;
}

struct Threshold {
    uint32_t key;  // the `remaining`-th largest key of the range (with tied: its value; else the set's lowest bin)
    bool tied;     // that key's value is needed in part (entries of equal key outside the set)
};

// Range radix select: the `remaining`-th largest of the n candidates (keys[s] for s < n_smem, order_key(row[s]) for
// n_smem <= s < n) plus n_masked entries of masked_key(), all within [lo, hi]. Each step bins [lo, hi] into kBins bins
// of width 2^shift and narrows it to the bin holding the sought key; it stops when that bin is taken whole (the set
// is then {key >= the bin's low end}) or at width 1 (tied: the key's value is needed in part). hist must be all zero
// and is left so. Every thread of the block calls it and gets the result.
template <int NT>
__device__ Threshold range_select(const uint32_t* keys, int n_smem, const float* __restrict__ row, int n,
                                  unsigned n_masked, uint32_t lo, uint32_t hi, unsigned remaining, unsigned* hist,
                                  SelectShared& sh) {
    constexpr int kPerThread = kBins / NT;  // bins per thread in the scan
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    while (true) {
        const uint32_t width = hi - lo;
        const int bits = width == 0 ? 0 : 32 - __clz(width);
        const int shift = max(0, bits - kBinBits);
        // (key - lo) wraps past `width` for key < lo, so one unsigned compare tests key in [lo, hi].
        const auto count = [&](uint32_t key) {
            const uint32_t d = key - lo;
            if (d <= width) atomicAdd(&hist[d >> shift], 1u);
        };
        const auto* keys4 = reinterpret_cast<const uint4*>(keys);
        for (int i = tid; i < n_smem / 4; i += NT) {  // 16-byte shared loads
            const uint4 k = keys4[i];
            count(k.x);
            count(k.y);
            count(k.z);
            count(k.w);
        }
        for (int s = n_smem / 4 * 4 + tid; s < n_smem; s += NT) count(keys[s]);
        for (int s = n_smem + tid; s < n; s += NT) count(order_key(__ldg(row + s)));
        if (tid == 0 && n_masked > 0 && masked_key() - lo <= width) {
            atomicAdd(&hist[(masked_key() - lo) >> shift], n_masked);
        }
        __syncthreads();
        // Thread t owns bins [kBins - kPerThread (t + 1), kBins - kPerThread t): a block scan in descending bin
        // order finds the bin where the count from the top reaches `remaining`.
        const int top = kBins - kPerThread * tid;
        unsigned sum = 0;
#pragma unroll
        for (int j = 1; j <= kPerThread; ++j) sum += hist[top - j];
        unsigned incl = sum;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned t = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += t;
        }
        if (lane == 31) sh.warp_sums[warp] = incl;
        __syncthreads();
        unsigned excl = incl - sum;
        for (int w = 0; w < warp; ++w) excl += sh.warp_sums[w];
        if (excl < remaining && remaining <= excl + sum) {
            unsigned rem = remaining - excl;
            for (int j = 1; j <= kPerThread; ++j) {
                const unsigned h = hist[top - j];
                if (h >= rem) {
                    sh.sel_bin = static_cast<unsigned>(top - j);
                    sh.sel_rem = rem;
                    sh.sel_cnt = h;
                    break;
                }
                rem -= h;
            }
        }
        // Every thread read only its own bins: clear them for the next step (or row) before the barrier.
#pragma unroll
        for (int j = 1; j <= kPerThread; ++j) hist[top - j] = 0;
        __syncthreads();
        const uint32_t bin_lo = lo + (sh.sel_bin << shift);
        const unsigned rem = sh.sel_rem, cnt = sh.sel_cnt;
        if (cnt == rem) return Threshold{bin_lo, false};  // the whole bin is taken: the set is {key >= bin_lo}
        if (shift == 0) return Threshold{bin_lo, true};   // one key value, needed in part: the tie order decides
        const uint64_t bin_hi = static_cast<uint64_t>(bin_lo) + ((uint64_t{1} << shift) - 1);
        hi = static_cast<uint32_t>(min(static_cast<uint64_t>(hi), bin_hi));
        lo = bin_lo;
        remaining = rem;
    }
}

// The selection of one row from its candidates (keys[s] for s < n_smem, order_key(row[s]) for n_smem <= s < n; with
// `remap`, candidate s is row index remap[s], else s) and n_masked entries of masked_key(); `st`: this thread's stats
// of the candidates. A unique set is written to out in ascending index order (padded with -1); a tied boundary puts
// the row on the replay list.
template <int NT, bool kVecCompact>
__device__ void select_row(const RadixArgs& a, int r, const uint32_t* keys, int n_smem, const float* __restrict__ row,
                           int n, unsigned n_masked, const RowStats& st, const int32_t* remap, unsigned* hist,
                           SelectShared& sh, int32_t* out) {
    const RowStats total = block_stats<NT>(st, sh);
    // The candidates: with top_k visible keys above the masked key, the top_k-th key is above it too and only
    // those keys count; otherwise every entry, the masked ones included.
    uint32_t lo, hi;
    if (total.above >= static_cast<unsigned>(a.top_k)) {
        lo = total.kmin_above;
        hi = total.kmax;
        n_masked = 0;
    } else {
        lo = n_masked > 0 ? min(total.kmin_all, masked_key()) : total.kmin_all;
        hi = n_masked > 0 ? max(total.kmax, masked_key()) : total.kmax;
    }
    const Threshold t =
        range_select<NT>(keys, n_smem, row, n, n_masked, lo, hi, static_cast<unsigned>(a.top_k), hist, sh);
    if (t.tied) {
        if (threadIdx.x == 0) a.tied[atomicAdd(&a.counters[1], 1)] = r;
        return;
    }
    int count;
    if constexpr (kVecCompact) {
        count = compact_at_least<NT>(out, n, keys, n_smem, row, t.key, sh.warp_counts, remap);
    } else {
        count = compact_ordered<NT>(
            out, n, [&](int s) { return (s < n_smem ? keys[s] : order_key(__ldg(row + s))) >= t.key; }, sh.warp_counts,
            remap);
    }
    for (int j = count + static_cast<int>(threadIdx.x); j < a.top_k; j += NT) out[j] = -1;
}

// Thread 0 of a persistent select block: the next row (last rows first: with causal positions, the longest first).
__device__ __forceinline__ int take_row(const RadixArgs& a) { return atomicAdd(&a.counters[0], 1); }

// A persistent select kernel's start: the bins cleared and sh.stats reset (the loop's first barrier orders both before
// any use); returns the first row's ticket (thread 0's; the others' is unused).
template <int NT>
__device__ int start_rows(const RadixArgs& a, unsigned* hist, SelectShared& sh) {
    const int tid = static_cast<int>(threadIdx.x);
    for (int b = tid; b < kBins; b += NT) hist[b] = 0;
    if (tid == 0) sh.stats = kNoKeys;
    return tid == 0 ? take_row(a) : 0;
}

// A persistent select kernel's loop head: the block's next row with more than top_k visible keys (r, visible); rows
// with fewer are written here (every visible key: dense-causal) and passed over. False when the rows are done. Thread
// 0 takes the ticket after it into next_idx at once, so the atomic's latency is off the critical path.
template <int NT>
__device__ bool next_select_row(const RadixArgs& a, SelectShared& sh, int& next_idx, int& r, int& visible) {
    const int tid = static_cast<int>(threadIdx.x);
    while (true) {
        __syncthreads();  // the previous row is done with every shared value
        if (tid == 0) sh.row = next_idx;
        __syncthreads();
        const int idx = sh.row;
        if (idx >= a.n_rows) return false;
        if (tid == 0) next_idx = take_row(a);
        r = a.n_rows - 1 - idx;
        visible = visible_keys(a, r);
        if (visible > a.top_k) return true;
        int32_t* out = a.indices + static_cast<int64_t>(r) * a.i0;
        for (int j = tid; j < a.top_k; j += NT) out[j] = j < visible ? j : -1;
    }
}

template <int NT, int kMinBlocks, bool kVecCompact>
__global__ void __launch_bounds__(NT, kMinBlocks) dsa_topk_select_kernel(RadixArgs a) {
    extern __shared__ __align__(16) uint32_t select_smem[];
    uint32_t* keys = select_smem;          // [cap]
    unsigned* hist = select_smem + a.cap;  // [kBins]
    __shared__ SelectShared sh;
    int next_idx = start_rows<NT>(a, hist, sh);
    int r = 0, visible = 0;
    while (next_select_row<NT>(a, sh, next_idx, r, visible)) {
        int32_t* out = a.indices + static_cast<int64_t>(r) * a.i0;
        const float* row = a.logits + static_cast<int64_t>(r) * a.lg0;
        const int n_smem = min(visible, a.cap);
        RowStats st = kNoKeys;
        load_row<NT>(row, visible, n_smem, keys, st);
        select_row<NT, kVecCompact>(a, r, keys, n_smem, row, visible, static_cast<unsigned>(a.row_len - visible), st,
                                    nullptr, hist, sh, out);
    }
}

// Asks for the 128-byte lines of row[begin, end) in L2 (one line per thread; no registers held, nothing waits).
template <int NT>
__device__ __forceinline__ void prefetch_l2(const float* row, int begin, int end) {
    const int line = (begin & ~31) + static_cast<int>(threadIdx.x) * 32;  // 32 floats per line
    if (line < end) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + line));
}

// Appends (order key, index) of every key >= t among row[0, n) to keys / idx in ascending index order (the first
// `cap` of them; the count goes on) and returns the count to every thread; `st` takes the appended keys. One read of
// the row: steps of NT * 4 consecutive keys (four per thread, 16-byte loads when the row is aligned), kUnroll steps'
// loads issued before the first is used; each step places its picks by a warp scan and the warps' counts from
// shared memory (double-buffered by step, so one barrier per step).
template <int NT>
__device__ int filter_row(const float* __restrict__ row, int n, uint32_t t, uint32_t* keys, int32_t* idx, int cap,
                          RowStats& st, SelectShared& sh, int prefetch) {
    constexpr int kWarps = NT / 32, kStep = NT * 4, kUnroll = 4, kChunk = kStep * kUnroll;
    static_assert(kChunk <= NT * 32, "prefetch_l2: one line per thread covers a chunk");
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    const bool vec = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
    int base = 0, buf = 0;
    for (int c0 = 0; c0 < n; c0 += kChunk) {
        // The chunk `prefetch` ahead (the ones before it were asked for by earlier chunks or the sample phase).
        if (prefetch > 0) prefetch_l2<NT>(row, c0 + prefetch * kChunk, min(n, c0 + (prefetch + 1) * kChunk));
        float4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int s = c0 + u * kStep + tid * 4;
            if (vec && s + 3 < n) {
                v[u] = __ldg(reinterpret_cast<const float4*>(row + s));
            } else {
                v[u].x = s < n ? __ldg(row + s) : 0.0f;
                v[u].y = s + 1 < n ? __ldg(row + s + 1) : 0.0f;
                v[u].z = s + 2 < n ? __ldg(row + s + 2) : 0.0f;
                v[u].w = s + 3 < n ? __ldg(row + s + 3) : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (c0 + u * kStep >= n) break;  // block-uniform
            const int s = c0 + u * kStep + tid * 4;
            const uint32_t k[4] = {order_key(v[u].x), order_key(v[u].y), order_key(v[u].z), order_key(v[u].w)};
            bool f[4];
            int cnt = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                f[j] = s + j < n && k[j] >= t;
                cnt += static_cast<int>(f[j]);
            }
            int incl = cnt;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int x = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += x;
            }
            if (lane == 31) sh.step_counts[buf][warp] = incl;
            __syncthreads();
            int off = 0, total = 0;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) {
                const int c = sh.step_counts[buf][w];
                off += w < warp ? c : 0;
                total += c;
            }
            int pos = base + off + incl - cnt;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (f[j]) {
                    if (pos < cap) {
                        keys[pos] = k[j];
                        idx[pos] = s + j;
                    }
                    add_key(st, k[j]);
                    ++pos;
                }
            }
            base += total;
            buf ^= 1;
        }
    }
    return base;
}

// The select pass for calls with long rows (n_keys > kShortCap): a persistent grid of NT-thread blocks, several per
// SM, rows taken last-first. A row of at most `cap` visible keys is copied to shared memory whole (load_row) and
// selected as dsa_topk_select_kernel does. A longer row is streamed once instead: a strided sample of its keys gives
// a bound t (dsa_topk_sample.h) that about 1.6 top_k of the row's keys reach; filter_row keeps the keys >= t
// with their indices, and when they number between top_k and cap (and t is above the masked key, so no masked entry
// can be selected) the row's selection is theirs: the top_k-th key of the row is among them. Otherwise (rare: a
// sample far off the row's distribution) the row is selected from global memory in full, each step re-reading it.
// The result is the same in every case: the unique set {key >= threshold} or the tied-row list.
template <int NT, bool kVecCompact>
__global__ void __launch_bounds__(NT, 4) dsa_topk_stream_kernel(RadixArgs a) {
    extern __shared__ __align__(16) uint32_t stream_smem[];
    uint32_t* keys = stream_smem;                                      // [cap]
    auto* cand_idx = reinterpret_cast<int32_t*>(stream_smem + a.cap);  // [cap]
    unsigned* hist = stream_smem + 2 * a.cap;                          // [kBins]
    __shared__ SelectShared sh;
    const int tid = static_cast<int>(threadIdx.x);
    int next_idx = start_rows<NT>(a, hist, sh);
    int r = 0, visible = 0;
    while (next_select_row<NT>(a, sh, next_idx, r, visible)) {
        int32_t* out = a.indices + static_cast<int64_t>(r) * a.i0;
        const float* row = a.logits + static_cast<int64_t>(r) * a.lg0;
        const auto n_masked = static_cast<unsigned>(a.row_len - visible);
        if (visible <= a.cap) {
            RowStats st = kNoKeys;
            load_row<NT>(row, visible, visible, keys, st);
            select_row<NT, kVecCompact>(a, r, keys, visible, row, visible, n_masked, st, nullptr, hist, sh, out);
            continue;
        }
        // The sample may fill the key and index buffers both (2 cap keys, contiguous): rows of over 360K keys at top
        // 2048 need more than cap sample keys for ~32 at or above their top_k-th.
        const int n_sample = topk_sample::sample_size(visible, a.top_k, 2 * a.cap);
        // The streaming pass's first chunks into L2 while the sample is taken and searched.
        for (int c = 0; c < a.prefetch; ++c) prefetch_l2<NT>(row, c * NT * 16, min(visible, (c + 1) * NT * 16));
        RowStats st = kNoKeys;
        for (int j = tid; j < n_sample; j += NT) {
            const uint32_t k = order_key(__ldg(row + static_cast<int64_t>(j) * visible / n_sample));
            keys[j] = k;
            add_key(st, k);
        }
        const RowStats ss = block_stats<NT>(st, sh);  // (its barrier also publishes the sample)
        const Threshold bound = range_select<NT>(keys, n_sample, nullptr, n_sample, 0u, ss.kmin_all, ss.kmax,
                                                 topk_sample::sample_rank(n_sample, visible, a.top_k), hist, sh);
        st = kNoKeys;
        int n_cand = 0;
        if (bound.key > masked_key()) {
            n_cand = filter_row<NT>(row, visible, bound.key, keys, cand_idx, a.cap, st, sh, a.prefetch);
        }
        if (n_cand >= a.top_k && n_cand <= a.cap) {
            select_row<NT, kVecCompact>(a, r, keys, n_cand, nullptr, n_cand, 0u, st, cand_idx, hist, sh, out);
            continue;
        }
        if (tid == 0) atomicAdd(&a.counters[2], 1);  // the fallbacks (dsa_topk_diagnose)
        st = kNoKeys;
        load_row<NT>(row, visible, 0, keys, st);
        select_row<NT, kVecCompact>(a, r, keys, 0, row, visible, n_masked, st, nullptr, hist, sh, out);
    }
}

// The reference's queue element is std::pair<float, int64_t>; here the float is its order key (same comparisons)
// and the index type plays no part in any comparison, so the algorithms permute these exactly as the reference's.
struct Entry {
    uint32_t key;
    int32_t second;
};

struct KeyGreater {  // ATen's comparator for largest = true (NaN first, then descending), on order keys
    __host__ __device__ bool operator()(const Entry& x, const Entry& y) const { return x.key > y.key; }
};

struct ReplayShared {
    int l_count[32], r_count[32];
    int n_swaps, l_next;
};

// libstdc++'s std::nth_element(q, q + nth, q + n, KeyGreater) (stl::nth_element), with each
// __unguarded_partition_pivot's partition step done by the block. lpos / rpos: n / 2 + 1 ints each.
template <int NT>
__device__ void block_nth_element(Entry* q, int n, int nth, int32_t* lpos, int32_t* rpos, ReplayShared& sh) {
    constexpr int kWarps = NT / 32;
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    const KeyGreater comp;
    int first = 0, last = n;
    int64_t depth = int64_t{stl::lg(n)} * 2;
    while (last - first > kSerialTail) {
        if (depth == 0) {
            if (tid == 0) {
                stl::heap_select(q + first, q + nth + 1, q + last, comp);
                stl::iter_swap(q + first, q + nth);
            }
            __syncthreads();
            return;
        }
        --depth;
        if (tid == 0) {
            const int mid = first + (last - first) / 2;
            stl::move_median_to_first(q + first, q + first + 1, q + mid, q + last - 1, comp);
            sh.n_swaps = 0;
            sh.l_next = INT_MAX;
        }
        __syncthreads();
        // __unguarded_partition(q + first + 1, q + last, pivot = q + first): the left scan stops at L positions
        // (!(x > pivot)), the right scan at R positions (!(pivot > x)). The i-th L from the left swaps with the i-th R
        // from the right iff it lies left of it, i.e. iff more than i R positions follow it; the cut is the first L
        // that does not swap, or the last swapped R position if that comes first.
        const uint32_t pivot = q[first].key;
        const int pb = first + 1;
        const int cw = (last - pb + NT - 1) / NT * 32;
        const int cb = pb + warp * cw, ce = min(last, cb + cw);
        int nl = 0, nr = 0;
        for (int s0 = cb; s0 < ce; s0 += 32) {
            const int s = s0 + lane;
            const uint32_t key = s < ce ? q[s].key : 0u;
            nl += __popc(__ballot_sync(0xffffffffu, s < ce && !(key > pivot)));
            nr += __popc(__ballot_sync(0xffffffffu, s < ce && !(pivot > key)));
        }
        if (lane == 0) {
            sh.l_count[warp] = nl;
            sh.r_count[warp] = nr;
        }
        __syncthreads();
        int lb = 0, rb = 0, total_r = 0;
        for (int w = 0; w < kWarps; ++w) {
            lb += w < warp ? sh.l_count[w] : 0;
            rb += w < warp ? sh.r_count[w] : 0;
            total_r += sh.r_count[w];
        }
        int swaps = 0;
        bool stop_seen = false;  // this warp already met an L that does not swap
        for (int s0 = cb; s0 < ce; s0 += 32) {
            const int s = s0 + lane;
            const uint32_t key = s < ce ? q[s].key : 0u;
            const bool is_l = s < ce && !(key > pivot), is_r = s < ce && !(pivot > key);
            const unsigned bl = __ballot_sync(0xffffffffu, is_l), br = __ballot_sync(0xffffffffu, is_r);
            const int rank_l = lb + __popc(bl & lanemask_lt());                               // L positions before s
            const int rank_r = total_r - (rb + __popc(br & lanemask_lt())) - (is_r ? 1 : 0);  // R positions after s
            const bool l_swaps = is_l && rank_r > rank_l;
            if (l_swaps) {
                lpos[rank_l] = s;
                ++swaps;
            }
            if (is_r && rank_l > rank_r) rpos[rank_r] = s;
            const unsigned stops = __ballot_sync(0xffffffffu, is_l && !l_swaps);
            if (!stop_seen && stops != 0) {
                if (lane == 0) atomicMin(&sh.l_next, s0 + __ffs(static_cast<int>(stops)) - 1);
                stop_seen = true;
            }
            lb += __popc(bl);
            rb += __popc(br);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) swaps += __shfl_xor_sync(0xffffffffu, swaps, o);
        if (lane == 0 && swaps > 0) atomicAdd(&sh.n_swaps, swaps);
        __syncthreads();
        const int n_swaps = sh.n_swaps;
        for (int i = tid; i < n_swaps; i += NT) stl::iter_swap(q + lpos[i], q + rpos[i]);
        const int cut = n_swaps == 0 ? sh.l_next : min(sh.l_next, rpos[n_swaps - 1]);
        __syncthreads();
        if (cut <= nth) {
            first = cut;
        } else {
            last = cut;
        }
    }
    if (tid == 0) stl::introselect(q + first, q + nth, q + last, depth, comp);
    __syncthreads();
}

// libstdc++'s std::__heap_select(q, q + k, q + n, KeyGreater) on the emulated row q[s] = (key(s), s), keeping only
// its heap q[0, k) (in `heap`, shared memory): the caller needs the selected set, and the rest of the permuted row
// plays no part in it. Element s changes the heap iff it beats the root (stl::heap_select_step), and the root only
// moves up the order, so the block screens each chunk of `chunk` elements against the root at the chunk's start
// (compacting the survivors, in row order, into `cand`) and thread 0 runs heap_select_step on the survivors alone.
// The heap is the serial scan's, entry for entry; the serial work falls from n steps to about k ln(n / k) pops on
// random rows (the whole row still, when the keys rise along it), each in int indices with a hole's children read
// by one 16-byte load (`heap` must sit 8 bytes past a 16-byte boundary).
template <int NT>
__device__ void block_heap_select(const float* __restrict__ row, int visible, int n, int k, Entry* heap, Entry* cand,
                                  int chunk, ReplayShared& sh) {
    const KeyGreater comp;
    const int tid = static_cast<int>(threadIdx.x);
    const auto key_at = [&](int s) { return s < visible ? order_key(__ldg(row + s)) : masked_key(); };
    for (int s = tid; s < k; s += NT) heap[s] = Entry{key_at(s), s};
    __syncthreads();
    if (tid == 0) stl::make_heap(heap, heap + k, comp);
    __syncthreads();
    for (int b = k; b < n; b += chunk) {
        const uint32_t root = heap[0].key;
        if (b >= visible && root >= masked_key()) break;  // only masked entries remain, and none beats the root
        const int count = compact_ordered_by<NT>(
            min(chunk, n - b), [&](int s) { return key_at(b + s) > root; },
            [&](int i, int s) {
                cand[i] = Entry{key_at(b + s), b + s};
            },
            sh.l_count);
        if (tid == 0) {
            // heap is 8 bytes past a 16-byte boundary, so a hole's two children are one aligned 16-byte load
            const auto children = [heap](int c, Entry& l, Entry& r) {
                const uint4 v = *reinterpret_cast<const uint4*>(heap + c);
                l = Entry{v.x, static_cast<int32_t>(v.y)};
                r = Entry{v.z, static_cast<int32_t>(v.w)};
            };
            uint32_t top = heap[0].key;
            for (int j = 0; j < count; ++j) {
                const Entry e = cand[j];
                if (e.key > top) {  // stl::heap_select_step
                    stl::replace_top(heap, k, e, comp, children);
                    top = heap[0].key;
                }
            }
        }
        __syncthreads();
    }
}

// Where a replay block works (dsa_topk_radix chooses per call).
struct ReplayLayout {
    char* gscratch;  // per_block bytes of global memory per block
    int64_t per_block;
    bool queue_in_smem;  // the queue and lpos / rpos in dynamic shared memory, else in gscratch
    // > 0: partial_sort calls (top_k * 64 <= row_len) run block_heap_select with the heap and `heap_chunk` survivors
    // in dynamic shared memory, and the mark bits in gscratch; 0: the queue's serial stl::partial_sort on thread 0.
    int heap_chunk;
};

// One block per tied row (rows a.tied[0, a.counters[1])): the reference's selection (the queue where the layout
// keeps it, or the heap alone), then its visible picks in ascending order.
template <int NT>
__global__ void __launch_bounds__(NT) dsa_topk_replay_kernel(RadixArgs a, ReplayLayout lay) {
    extern __shared__ __align__(16) char replay_smem[];
    __shared__ ReplayShared sh;
    const int tid = static_cast<int>(threadIdx.x);
    char* base = lay.queue_in_smem ? replay_smem : lay.gscratch + static_cast<int64_t>(blockIdx.x) * lay.per_block;
    const int row_len = static_cast<int>(a.row_len);
    const bool partial = static_cast<int64_t>(a.top_k) * 64 <= a.row_len;
    const bool heap_only = partial && lay.heap_chunk > 0;
    auto* q = reinterpret_cast<Entry*>(base);                                           // [row_len]
    auto* lpos = reinterpret_cast<int32_t*>(base + static_cast<int64_t>(row_len) * 8);  // [row_len / 2 + 1]
    int32_t* rpos = lpos + (row_len / 2 + 1);                                           // [row_len / 2 + 1]
    auto* heap = reinterpret_cast<Entry*>(replay_smem + 8);  // heap_only: [top_k] (block_heap_select's alignment)
    const int n_tied = a.counters[1];
    for (int i = static_cast<int>(blockIdx.x); i < n_tied; i += static_cast<int>(gridDim.x)) {
        const int r = a.tied[i];
        const int visible = visible_keys(a, r);
        const float* row = a.logits + static_cast<int64_t>(r) * a.lg0;
        const Entry* picks = q;
        // [ceil(visible / 32)] bits: the block's global scratch (heap_only), else lpos once the selection is done
        auto* mark = reinterpret_cast<uint32_t*>(heap_only ? base : reinterpret_cast<char*>(lpos));
        if (heap_only) {
            block_heap_select<NT>(row, visible, row_len, a.top_k, heap, heap + a.top_k, lay.heap_chunk, sh);
            picks = heap;
        } else {
            for (int s = tid; s < row_len; s += NT) q[s] = Entry{s < visible ? order_key(row[s]) : masked_key(), s};
            __syncthreads();
            if (partial) {
                if (tid == 0) stl::partial_sort(q, q + a.top_k, q + row_len, KeyGreater{});
                __syncthreads();
            } else {
                block_nth_element<NT>(q, row_len, a.top_k - 1, lpos, rpos, sh);
            }
        }
        for (int w = tid; w < (visible + 31) / 32; w += NT) mark[w] = 0;
        __syncthreads();
        for (int j = tid; j < a.top_k; j += NT) {
            const int s = picks[j].second;
            if (s < visible) atomicOr(&mark[s / 32], 1u << (s % 32));  // masked picks drop out
        }
        __syncthreads();
        int32_t* out = a.indices + static_cast<int64_t>(r) * a.i0;
        const int count = compact_ordered<NT>(
            out, visible, [&](int s) { return ((mark[s / 32] >> (s % 32)) & 1u) != 0; }, sh.l_count);
        for (int j = count + tid; j < a.top_k; j += NT) out[j] = -1;
        __syncthreads();  // q, lpos, the heap and the marks reused by the next row
    }
}

struct DeviceLimits {
    int sms;
    size_t smem_optin;  // dynamic shared memory a block may opt into, less 1 KB for the kernels' static shared memory
};

DeviceLimits device_limits() {
    int dev = 0, sms = 0, optin = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&dev));
    PENSTOCK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    PENSTOCK_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return DeviceLimits{sms, static_cast<size_t>(optin) - 1024};
}

// Launches a persistent select kernel (select or stream: rows from the atomic counter) with `smem` bytes of dynamic
// shared memory: as many blocks as fit on every SM, at most one per row.
void launch_persistent(void (*kernel)(RadixArgs), int threads, size_t smem, const RadixArgs& a, int sms,
                       cudaStream_t s) {
    PENSTOCK_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    int per_sm = 0;
    PENSTOCK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    const int64_t grid = std::min<int64_t>(a.n_rows, static_cast<int64_t>(std::max(per_sm, 1)) * sms);
    kernel<<<static_cast<unsigned>(grid), threads, smem, s>>>(a);
    PENSTOCK_CUDA_LAUNCH_CHECK();
}

template <int NT, int kMinBlocks, bool kVecCompact>
void launch_select(const RadixArgs& a, int sms, cudaStream_t s) {
    launch_persistent(dsa_topk_select_kernel<NT, kMinBlocks, kVecCompact>, NT,
                      (static_cast<size_t>(a.cap) + kBins) * sizeof(uint32_t), a, sms, s);
}

template <bool kVecCompact>
void launch_stream(const RadixArgs& a, int sms, cudaStream_t s) {
    launch_persistent(dsa_topk_stream_kernel<kStreamThreads, kVecCompact>, kStreamThreads,
                      (2 * static_cast<size_t>(a.cap) + kBins) * sizeof(uint32_t), a, sms, s);
}

// The stream kernel's candidate capacity for `top_k` (topk_sample::candidate_cap), or 0 when it does not fit the
// device's shared memory (the row-in-shared-memory launch then takes long calls).
int stream_cap(int64_t top_k, size_t smem_optin) {
    const int64_t cap = topk_sample::candidate_cap(top_k);
    const size_t bytes = (2 * static_cast<size_t>(cap) + kBins) * sizeof(uint32_t);
    return bytes <= smem_optin ? static_cast<int>(cap) : 0;
}

// The stream kernel's L2 prefetch distance in chunks of 4096 keys (RadixArgs::prefetch): kStreamPrefetch, or
// PENSTOCK_TOPK_PREFETCH (0-4; a measurement knob, read once per process).
int stream_prefetch() {
    static const int value = [] {
        const char* e = std::getenv("PENSTOCK_TOPK_PREFETCH");
        if (e == nullptr || *e == '\0') return kStreamPrefetch;
        return std::clamp(std::atoi(e), 0, 4);
    }();
    return value;
}

enum class LongRows : uint8_t {
    kStream,        // n_keys > kShortCap or <= the stream cap: dsa_topk_stream_kernel (where stream_cap fits)
    kRowSmem,       // the select kernel only (the previous default: 1024 threads for n_keys > kShortCap)
    kAlwaysStream,  // every call on dsa_topk_stream_kernel (tests: its paths on short rows too)
};

// Runs both passes (`vec_compact`: the selected indices compacted four keys per lane, else one; `serial_replay`: tied
// partial_sort rows replayed on the whole queue by thread 0, the previous replay, for same-run comparisons); returns
// the scratch tensor, whose first three i32 are the counters (RadixArgs::counters).
Tensor dsa_topk_radix(const kernels::DsaTopkParams& p, bool vec_compact, LongRows long_rows, bool serial_replay,
                      Allocator& alloc, void* stream) {
    const TopkShape shape = check_topk_params(p, alloc);
    const int64_t n_rows = shape.n_rows, row_len = shape.row_len;
    PENSTOCK_CHECK_LT(row_len, int64_t{1} << 30) << "dsa_topk: the replay's block scans index rows in int";
    const size_t list_bytes = (static_cast<size_t>(n_rows) * sizeof(int32_t) + 255) / 256 * 256;
    const DeviceLimits dev = device_limits();
    const size_t replay_smem_max = std::min(kReplaySmemBytes, dev.smem_optin);
    const int sms = dev.sms;
    // The replay's layout: partial_sort calls keep only the heap, in shared memory with a chunk of survivors, when it
    // fits (top_k up to ~19K), and mark bits in global memory; other calls keep the whole queue with lpos / rpos, in
    // shared memory when it fits (rows up to ~18.7K entries), else in global memory.
    ReplayLayout lay{};
    if (!serial_replay && shape.top_k * 64 <= row_len) {
        const auto room = (static_cast<int64_t>(replay_smem_max) - 16 - shape.top_k * int64_t{sizeof(Entry)}) /
                          static_cast<int64_t>(sizeof(Entry));
        if (room >= kReplayThreads) lay.heap_chunk = static_cast<int>(std::min<int64_t>(kHeapChunk, room / 32 * 32));
    }
    size_t replay_bytes = 0;  // per block
    size_t replay_smem = 0;
    if (lay.heap_chunk > 0) {
        replay_bytes = static_cast<size_t>((row_len + 31) / 32) * sizeof(uint32_t);
        replay_smem = 16 + static_cast<size_t>(shape.top_k + lay.heap_chunk) * sizeof(Entry);
    } else {
        replay_bytes =
            static_cast<size_t>(row_len) * sizeof(Entry) + 2 * static_cast<size_t>(row_len / 2 + 1) * sizeof(int32_t);
        lay.queue_in_smem = replay_bytes <= replay_smem_max;
        replay_smem = lay.queue_in_smem ? replay_bytes : 0;
    }
    int64_t replay_blocks = std::min<int64_t>(std::max<int64_t>(n_rows, 1), sms);
    if (!lay.queue_in_smem) {
        const auto fit = static_cast<int64_t>(kMaxReplayScratch / replay_bytes);
        replay_blocks = std::max<int64_t>(1, std::min(replay_blocks, fit));
    }
    const size_t per_block = (replay_bytes + 255) / 256 * 256;
    const size_t queue_bytes = lay.queue_in_smem ? 0 : static_cast<size_t>(replay_blocks) * per_block;
    // Scratch from the caching allocator: returned when the caller drops it while the kernels may still run, which is
    // safe for stream-ordered users of the same allocator (its contract).
    Tensor scratch = Tensor::empty({static_cast<int64_t>(256 + list_bytes + queue_bytes)}, DType::kU8, alloc);
    if (n_rows == 0) return scratch;
    char* base = static_cast<char*>(scratch.view().data);
    const auto s = static_cast<cudaStream_t>(stream);
    PENSTOCK_CUDA_CHECK(cudaMemsetAsync(base, 0, 3 * sizeof(int32_t), s));

    RadixArgs a{};
    a.indices = p.indices.ptr<int32_t>();
    a.logits = p.logits.ptr<const float>();
    a.q_pos = p.q_pos.ptr<const int32_t>();
    a.counters = reinterpret_cast<int32_t*>(base);
    a.tied = reinterpret_cast<int32_t*>(base + 256);
    a.i0 = p.indices.stride(0);
    a.lg0 = p.logits.stride(0);
    a.n_rows = static_cast<int>(n_rows);
    a.n_keys = static_cast<int>(shape.n_keys);
    a.top_k = static_cast<int>(shape.top_k);
    a.row_len = row_len;
    a.prefetch = stream_prefetch();
    const auto smem_keys = static_cast<int64_t>(dev.smem_optin / sizeof(uint32_t)) - kBins;
    const int cap_stream = stream_cap(shape.top_k, dev.smem_optin);
    // The stream kernel takes long calls and calls whose rows it holds whole (n_keys <= its cap: 256-thread blocks,
    // four per SM, ran 1.15x the 512-thread launch at T 4096); calls in between stay on the short launch (at 16K the
    // stream kernel ran 0.95x).
    const bool use_stream =
        cap_stream > 0 &&
        (long_rows == LongRows::kAlwaysStream ||
         (long_rows == LongRows::kStream && (shape.n_keys > kShortCap || shape.n_keys <= cap_stream)));
    if (use_stream) {
        a.cap = cap_stream;
        if (vec_compact) {
            launch_stream<true>(a, sms, s);
        } else {
            launch_stream<false>(a, sms, s);
        }
    } else if (shape.n_keys <= kShortCap) {
        a.cap = static_cast<int>(std::min<int64_t>(shape.n_keys, smem_keys));
        if (vec_compact) {
            launch_select<kShortThreads, 3, true>(a, sms, s);
        } else {
            launch_select<kShortThreads, 3, false>(a, sms, s);
        }
    } else {
        a.cap = static_cast<int>(std::min({shape.n_keys, int64_t{kLongCap}, smem_keys}));
        if (vec_compact) {
            launch_select<kLongThreads, 1, true>(a, sms, s);
        } else {
            launch_select<kLongThreads, 1, false>(a, sms, s);
        }
    }
    auto* kernel = dsa_topk_replay_kernel<kReplayThreads>;
    PENSTOCK_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(replay_smem_max)));
    lay.gscratch = base + 256 + list_bytes;
    lay.per_block = static_cast<int64_t>(per_block);
    kernel<<<static_cast<unsigned>(replay_blocks), kReplayThreads, replay_smem, s>>>(a, lay);
    PENSTOCK_CUDA_LAUNCH_CHECK();
    return scratch;
}

}  // namespace

TopkShape check_topk_params(const kernels::DsaTopkParams& p, const Allocator& alloc) {
    const char* op = "dsa_topk";
    check_on_gpu(p.indices, op, "indices");
    check_on_gpu(p.logits, op, "logits");
    check_on_gpu(p.q_pos, op, "q_pos");
    PENSTOCK_CHECK(p.indices.ndim == 2 && p.indices.dtype == DType::kI32 && p.indices.stride(1) == 1)
        << op << ": indices [n_rows, top_k] i32, got " << p.indices.shape_string();
    const int64_t n_rows = p.indices.size(0), top_k = p.indices.size(1);
    PENSTOCK_CHECK_GT(top_k, 0) << op;
    PENSTOCK_CHECK(p.logits.ndim == 2 && p.logits.dtype == DType::kF32 && p.logits.size(0) == n_rows &&
                   (p.logits.stride(1) == 1 || p.logits.size(1) <= 1))
        << op << ": logits [n_rows, n_keys] f32, got " << p.logits.shape_string();
    const int64_t n_keys = p.logits.size(1);
    PENSTOCK_CHECK(p.q_pos.ndim == 1 && p.q_pos.dtype == DType::kI32 && p.q_pos.size(0) == n_rows &&
                   (p.q_pos.stride(0) == 1 || n_rows <= 1))
        << op << ": q_pos [n_rows] i32 contiguous, got " << p.q_pos.shape_string();
    const int64_t row_len = p.torch_row_len == 0 ? n_keys : p.torch_row_len;
    PENSTOCK_CHECK_GE(row_len, n_keys) << op << ": torch_row_len must cover every key";
    PENSTOCK_CHECK(row_len < (int64_t{1} << 31) && top_k < (int64_t{1} << 31)) << op << ": sizes";
    PENSTOCK_CHECK(alloc.device() == Device::kCUDA) << op << ": scratch needs a CUDA allocator";
    return TopkShape{n_rows, top_k, n_keys, row_len};
}

void dsa_topk(const kernels::DsaTopkParams& p, Allocator& alloc, void* stream) {
    dsa_topk(p, TopkVariant::kAuto, alloc, stream);
}

void dsa_topk(const kernels::DsaTopkParams& p, TopkVariant variant, Allocator& alloc, void* stream) {
    switch (variant) {
        case TopkVariant::kAuto:
        case TopkVariant::kRangeRadix:
            (void)dsa_topk_radix(p, /*vec_compact=*/true, LongRows::kStream, false, alloc, stream);
            return;
        case TopkVariant::kRangeRadixScalarCompact:
            (void)dsa_topk_radix(p, /*vec_compact=*/false, LongRows::kStream, false, alloc, stream);
            return;
        case TopkVariant::kRangeRadixRowSmem:
            (void)dsa_topk_radix(p, /*vec_compact=*/true, LongRows::kRowSmem, false, alloc, stream);
            return;
        case TopkVariant::kRangeRadixStream:
            (void)dsa_topk_radix(p, /*vec_compact=*/true, LongRows::kAlwaysStream, false, alloc, stream);
            return;
        case TopkVariant::kRangeRadixSerialReplay:
            (void)dsa_topk_radix(p, /*vec_compact=*/true, LongRows::kStream, true, alloc, stream);
            return;
        case TopkVariant::kLegacy:
            dsa_topk_legacy(p, alloc, stream);
            return;
    }
}

TopkDiagnosis dsa_topk_diagnose(const kernels::DsaTopkParams& p, TopkVariant variant, Allocator& alloc, void* stream) {
    PENSTOCK_CHECK(variant != TopkVariant::kLegacy) << "dsa_topk_diagnose: the range-radix variants only";
    const LongRows long_rows = variant == TopkVariant::kRangeRadixRowSmem  ? LongRows::kRowSmem
                               : variant == TopkVariant::kRangeRadixStream ? LongRows::kAlwaysStream
                                                                           : LongRows::kStream;
    const Tensor scratch = dsa_topk_radix(p, variant != TopkVariant::kRangeRadixScalarCompact, long_rows,
                                          variant == TopkVariant::kRangeRadixSerialReplay, alloc, stream);
    if (p.indices.size(0) == 0) return {};
    int32_t c[3] = {0, 0, 0};
    PENSTOCK_CUDA_CHECK(
        cudaMemcpyAsync(c, scratch.view().data, sizeof(c), cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)));
    PENSTOCK_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    return TopkDiagnosis{.tied_rows = c[1], .global_rows = c[2]};
}

int64_t dsa_topk_tied_rows(const kernels::DsaTopkParams& p, Allocator& alloc, void* stream) {
    return dsa_topk_diagnose(p, TopkVariant::kRangeRadix, alloc, stream).tied_rows;
}

}  // namespace penstock::cuda
