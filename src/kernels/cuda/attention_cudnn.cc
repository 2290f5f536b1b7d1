// cuDNN SDPA path of cuda::attention (contract: attention_cudnn.h). Two graph flavours, both on the views as they are
// (q, k, v, out strided on dims 0/1: strides {-, stride(1), stride(0), 1} of a [B, H, S, d] problem, no copies):
//  - dense: one sequence (n_seqs == 1, so its lengths are total_q / total_k, known on the host) that has no row
//    without keys: a plain [1, H, S, d] problem with exact S, no padding mask, the bottom-right causal diagonal or no
//    mask. One cuDNN launch and nothing else: the configuration torch's F.scaled_dot_product_attention runs.
//  - ragged: any batch. A padded [B, H, S, d] problem over the ragged THD layout, S a power-of-two bound on every
//    sequence's length (the caller's max_seqlen hint, else the total) so that batches of similar sizes share a graph,
//    per-sequence element offsets as ragged-offset tensors and per-sequence lengths as the padding mask. cuDNN aligns
//    the bottom-right diagonal per sequence on its actual lengths, which is the absolute-position rule when the last
//    query and key share a position. Around the SDPA call: one metadata kernel (lengths + offsets from cu_seqlens,
//    attention_cudnn_prep.cu) and one empty-row kernel (rows that see no key: out 0, lse -inf).
// Stats is the fp32 natural-log lse, written straight into lse [total_q, H] (stride {-, 1, stride(0), 1}).
// Graphs are built once per key (shape, strides, flavour, mask, dtype) and cached; a key cuDNN refuses is remembered
// and logged once (a dense key that is refused is retried as ragged), and the caller falls back to its own kernel.
#include "kernels/cuda/attention_cudnn.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <array>
#include <bit>
#include <compare>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/logging.h"
#include "kernels/cuda/attention_cudnn_prep.h"
#include "kernels/cuda/cuda_check.h"

namespace penstock::cuda {

namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the graph's variant pack.
enum Uid : int64_t {
    kQ = 1,
    kK,
    kV,
    kO,
    kStats,
    kScale,
    kSeqLenQ,
    kSeqLenKv,
    kOffQ,
    kOffK,
    kOffV,
    kOffO,
    kOffStats,
    // FP8 graphs: per-tensor descales of q / k / v (the caller's device scalars), the probabilities' scale and descale
    // (constants of the entry), the output scale (the caller's) and the two amax outputs (scratch, unused).
    kDescaleQ,
    kDescaleK,
    kDescaleV,
    kDescaleS,
    kScaleS,
    kScaleO,
    kAmaxS,
    kAmaxO,
};

// Everything a built graph depends on (the scale is a pass-by-value input, pointers are bound at execute).
struct GraphKey {
    bool ragged;  // the ragged flavour (else dense: b == 1, exact s_q / s_kv)
    int64_t b, h, h_kv, s_q, s_kv, d_qk, d_v;
    int64_t q0, q1, k0, k1, v0, v1, o0, o1, l0;
    int mask;       // kernels::AttentionMaskKind
    int dtype;      // DType (f8e4m3: the FP8 graph, causal masks top-left aligned; see attention_cudnn.h)
    bool autotune;  // PENSTOCK_CUDNN_AUTOTUNE: every engine config built, the fastest kept on the first call
    bool stats;     // the lse (Stats) output (an lse-less call has none)
    auto operator<=>(const GraphKey&) const = default;
};

struct Plan {
    std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused this key (logged once)
    int64_t workspace_bytes = 0;              // of the chosen plan (of every plan while autotune is pending)
    bool tune_pending = false;                // autotune on the first execution
};

// One per (host thread, device, stream): a handle bound to the stream, the plans built on it and the stream's scratch.
struct Entry {
    cudnnHandle_t handle = nullptr;
    bool unusable = false;  // cudnnCreate failed (library or engines missing): decline every call
    std::map<GraphKey, Plan> plans;
    void* scratch = nullptr;
    size_t scratch_bytes = 0;
    float* fp8_consts = nullptr;  // {scale_s, descale_s} = {448, 1 / 448}: FP8 probabilities span e4m3's range
};

class CudnnCache {
public:
    CudnnCache() = default;
    CudnnCache(const CudnnCache&) = delete;
    CudnnCache& operator=(const CudnnCache&) = delete;
    ~CudnnCache() {
        for (auto& [key, e] : entries_) {
            // Errors ignored: at process exit the driver may already be shutting down.
            (void)cudaSetDevice(key.first);
            e.plans.clear();
            if (e.scratch != nullptr) (void)cudaFree(e.scratch);
            if (e.fp8_consts != nullptr) (void)cudaFree(e.fp8_consts);
            if (e.handle != nullptr) (void)cudnnDestroy(e.handle);
        }
    }
    // The entry of (current device, stream), created (handle included) on first use; null when it cannot be.
    Entry* get(int device, cudaStream_t stream, bool capturing) {
        auto it = entries_.find({device, stream});
        if (it != entries_.end()) return it->second.unusable ? nullptr : &it->second;
        if (capturing) return nullptr;  // cudnnCreate is no stream operation: never inside a capture
        Entry& e = entries_[{device, stream}];
        const cudnnStatus_t st = cudnnCreate(&e.handle);
        if (st != CUDNN_STATUS_SUCCESS || cudnnSetStream(e.handle, stream) != CUDNN_STATUS_SUCCESS) {
            PENSTOCK_LOG_WARN("attention: cuDNN unavailable on device {} ({}); using the CUDA-core kernel", device,
                              cudnnGetErrorString(st));
            e.unusable = true;
            return nullptr;
        }
        PENSTOCK_LOG_INFO("attention: cuDNN {} (frontend {}) on device {}", cudnnGetVersion(), CUDNN_FRONTEND_VERSION,
                          device);
        const float consts[2] = {448.0f, 1.0f / 448.0f};
        PENSTOCK_CUDA_CHECK(cudaMalloc(&e.fp8_consts, sizeof(consts)));
        PENSTOCK_CUDA_CHECK(cudaMemcpy(e.fp8_consts, consts, sizeof(consts), cudaMemcpyHostToDevice));
        return &e;
    }

private:
    std::map<std::pair<int, cudaStream_t>, Entry> entries_;
};

CudnnCache& cache() {
    thread_local CudnnCache c;
    return c;
}

int64_t bucket(int64_t n) {
    return std::max<int64_t>(64, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n))));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Dims 0/1 of a 3-d bf16 or e4m3 view: strides in whole 16-byte vectors, last dim contiguous, 16-byte aligned start.
bool tma_friendly(const TensorView& v) {
    const int64_t per16 = v.dtype == DType::kF8E4M3 ? 16 : 8;
    return v.ndim == 3 && v.stride(2) == 1 && v.stride(0) % per16 == 0 && v.stride(1) % per16 == 0 && v.stride(0) > 0 &&
           v.stride(1) > 0 && aligned16(v.data);
}

bool scalar_on_gpu(const TensorView& t) {
    return t.device == Device::kCUDA && t.data != nullptr && t.dtype == DType::kF32 && t.numel() == 1;
}

// The shape checks of attention_cudnn.h; false means "not a case this path covers" (the caller's kernel then checks
// and reports real misuse).
bool covered(const kernels::AttentionParams& p) {
    using kernels::AttentionMaskKind;
    if (p.mask_kind == AttentionMaskKind::kGeneral) return false;
    if (p.mask_kind == AttentionMaskKind::kCausalBottomRight && (!p.causal || p.q_pos_step != 1)) return false;
    if (p.k_rope.data != nullptr) return false;  // (cuda::attention concatenates k and k_rope first)
    const bool fp8 = p.q.dtype == DType::kF8E4M3;
    const DType io = fp8 ? DType::kF8E4M3 : DType::kBF16;
    const bool stats = p.lse.data != nullptr;  // calls may omit lse (kernels/ops.h): no Stats output then
    if (p.q.dtype != io || p.k.dtype != io || p.v.dtype != io || p.out.dtype != io ||
        (stats && p.lse.dtype != DType::kF32)) {
        return false;
    }
    // FP8 (Hopper): the output is FP8 too, the causal diagonal only top-left aligned (= bottom-right when every
    // sequence has as many keys as queries), and the head dims multiples of 16.
    if (fp8) {
        if (!scalar_on_gpu(p.q_descale) || !scalar_on_gpu(p.k_descale) || !scalar_on_gpu(p.v_descale) ||
            !scalar_on_gpu(p.out_descale)) {
            return false;
        }
        if (p.q.size(2) % 16 != 0 || p.v.size(2) % 16 != 0) return false;
        const bool one_equal_seq =
            p.cu_seqlens_q.ndim == 1 && p.cu_seqlens_q.size(0) == 2 && p.q.size(0) == p.k.size(0);
        if (!p.equal_lengths && !one_equal_seq) return false;  // (so no row is without keys either)
    }
    for (const TensorView* t : {&p.q, &p.k, &p.v, &p.out, &p.cu_seqlens_q, &p.cu_seqlens_k, &p.q_pos0, &p.k_pos0}) {
        if (t->device != Device::kCUDA || t->data == nullptr) return false;
    }
    if (stats && p.lse.device != Device::kCUDA) return false;
    if (!tma_friendly(p.q) || !tma_friendly(p.k) || !tma_friendly(p.v) || !tma_friendly(p.out)) return false;
    const int64_t total_q = p.q.size(0), h = p.q.size(1), d_qk = p.q.size(2);
    const int64_t total_k = p.k.size(0), h_kv = p.k.size(1), d_v = p.v.size(2);
    if (total_q == 0 || total_k == 0 || h == 0 || h_kv == 0 || h % h_kv != 0) return false;
    if (p.k.size(2) != d_qk || p.v.size(0) != total_k || p.v.size(1) != h_kv) return false;
    if (p.out.size(0) != total_q || p.out.size(1) != h || p.out.size(2) != d_v) return false;
    if (stats && (p.lse.ndim != 2 || p.lse.size(0) != total_q || p.lse.size(1) != h || p.lse.stride(1) != 1)) {
        return false;
    }
    if (d_qk % 8 != 0 || d_v % 8 != 0 || d_qk > 256 || d_v > 256) return false;
    // Metadata: contiguous i32 vectors of n_seqs + 1 (cu_seqlens) and n_seqs (pos0) entries, n_seqs >= 1.
    const int64_t n_seqs = p.cu_seqlens_q.ndim == 1 ? p.cu_seqlens_q.size(0) - 1 : 0;
    auto meta_ok = [](const TensorView& t, int64_t n) {
        return t.ndim == 1 && t.size(0) == n && t.dtype == DType::kI32 && (t.stride(0) == 1 || n == 1);
    };
    if (n_seqs < 1 || !meta_ok(p.cu_seqlens_q, n_seqs + 1) || !meta_ok(p.cu_seqlens_k, n_seqs + 1) ||
        !meta_ok(p.q_pos0, n_seqs) || !meta_ok(p.k_pos0, n_seqs)) {
        return false;
    }
    return p.q_pos_step >= 1 && p.max_seqlen_q >= 0 && p.max_seqlen_k >= 0 && total_q < (int64_t{1} << 31) &&
           total_k < (int64_t{1} << 31);
}

// PENSTOCK_CUDNN_AUTOTUNE=1 (read at every call, so a benchmark can compare both): build every engine config cuDNN
// offers for a new shape and keep the fastest, timed by the frontend's autotune on that first call's own buffers
// (one device sync and a few executions per config). Off by default: a serving process sees many shapes.
bool autotune_requested() {
    const char* v = std::getenv("PENSTOCK_CUDNN_AUTOTUNE");
    return v != nullptr && v[0] == '1';
}

// The dense flavour when it computes the contract exactly (one sequence, no row without keys), unless `ragged`.
GraphKey key_of(const kernels::AttentionParams& p, bool ragged) {
    const int64_t n_seqs = p.cu_seqlens_q.size(0) - 1;
    const int64_t total_q = p.q.size(0), total_k = p.k.size(0);
    ragged =
        ragged || n_seqs != 1 || (p.mask_kind == kernels::AttentionMaskKind::kCausalBottomRight && total_q > total_k);
    int64_t s_q = total_q, s_kv = total_k;
    if (ragged) {
        s_q = bucket(p.max_seqlen_q > 0 ? std::min<int64_t>(p.max_seqlen_q, total_q) : total_q);
        s_kv = bucket(p.max_seqlen_k > 0 ? std::min<int64_t>(p.max_seqlen_k, total_k) : total_k);
    }
    return GraphKey{.ragged = ragged,
                    .b = n_seqs,
                    .h = p.q.size(1),
                    .h_kv = p.k.size(1),
                    .s_q = s_q,
                    .s_kv = s_kv,
                    .d_qk = p.q.size(2),
                    .d_v = p.v.size(2),
                    .q0 = p.q.stride(0),
                    .q1 = p.q.stride(1),
                    .k0 = p.k.stride(0),
                    .k1 = p.k.stride(1),
                    .v0 = p.v.stride(0),
                    .v1 = p.v.stride(1),
                    .o0 = p.out.stride(0),
                    .o1 = p.out.stride(1),
                    .l0 = p.lse.data != nullptr ? p.lse.stride(0) : 0,
                    .mask = static_cast<int>(p.mask_kind),
                    .dtype = static_cast<int>(p.q.dtype),
                    // Never for FP8: with cuDNN 9.19 an engine config tried while autotuning an FP8 d 192 / 128
                    // graph faulted (illegal address, 2026-12-01); the heuristic's choice runs.
                    .autotune = autotune_requested() && p.q.dtype != DType::kF8E4M3,
                    .stats = p.lse.data != nullptr};
}

std::shared_ptr<fe::graph::Tensor_attributes> index_tensor(fe::graph::Graph& g, const char* name, Uid uid, int64_t n,
                                                           fe::DataType_t type) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(type));
}

std::string describe(const GraphKey& k) {
    return std::string(k.ragged ? "ragged" : "dense") + " B " + std::to_string(k.b) + " H " + std::to_string(k.h) +
           "/" + std::to_string(k.h_kv) + " S " + std::to_string(k.s_q) + "/" + std::to_string(k.s_kv) + " d " +
           std::to_string(k.d_qk) + "/" + std::to_string(k.d_v) + " mask " + std::to_string(k.mask);
}

// Builds and plans the graph of `k`; an empty Plan (and a warning naming the shape) when cuDNN refuses it.
Plan build_plan(const GraphKey& k, cudnnHandle_t handle) {
    const bool fp8 = k.dtype == static_cast<int>(DType::kF8E4M3);
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fp8 ? fe::DataType_t::FP8_E4M3 : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    // Ragged: the element offset of each sequence's first row, [B + 1] i64 (attention_cudnn_prep.cu fills them).
    auto ragged_offset = [&](std::shared_ptr<fe::graph::Tensor_attributes> t, const char* name, Uid uid) {
        if (k.ragged) t->set_ragged_offset(index_tensor(*g, name, uid, k.b + 1, fe::DataType_t::INT64));
        return t;
    };
    auto qkv = [&](const char* name, Uid uid, Uid off_uid, const char* off_name, int64_t heads, int64_t s, int64_t d,
                   int64_t s0, int64_t s1) {
        return ragged_offset(g->tensor(fe::graph::Tensor_attributes()
                                           .set_name(name)
                                           .set_uid(uid)
                                           .set_dim({k.b, heads, s, d})
                                           .set_stride({s * s0, s1, s0, 1})),
                             off_name, off_uid);
    };
    auto q = qkv("Q", kQ, kOffQ, "off_q", k.h, k.s_q, k.d_qk, k.q0, k.q1);
    auto kt = qkv("K", kK, kOffK, "off_k", k.h_kv, k.s_kv, k.d_qk, k.k0, k.k1);
    auto v = qkv("V", kV, kOffV, "off_v", k.h_kv, k.s_kv, k.d_v, k.v0, k.v1);
    auto scale = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("scale")
                               .set_uid(kScale)
                               .set_dim({1, 1, 1, 1})
                               .set_stride({1, 1, 1, 1})
                               .set_is_pass_by_value(true)
                               .set_data_type(fe::DataType_t::FLOAT));
    auto opts =
        fe::graph::SDPA_attributes().set_name("penstock_attention").set_generate_stats(k.stats).set_attn_scale(scale);
    if (k.ragged) {
        opts.set_padding_mask(true)
            .set_seq_len_q(index_tensor(*g, "seq_len_q", kSeqLenQ, k.b, fe::DataType_t::INT32))
            .set_seq_len_kv(index_tensor(*g, "seq_len_kv", kSeqLenKv, k.b, fe::DataType_t::INT32));
    }
    if (k.mask == static_cast<int>(kernels::AttentionMaskKind::kCausalBottomRight)) {
        // FP8: top-left, equal to bottom-right for the calls covered() lets through (equal lengths).
        opts.set_diagonal_alignment(fp8 ? fe::DiagonalAlignment_t::TOP_LEFT : fe::DiagonalAlignment_t::BOTTOM_RIGHT)
            .set_diagonal_band_right_bound(0);
    }
    std::shared_ptr<fe::graph::Tensor_attributes> o, stats;
    if (fp8) {
        auto scalar = [&](const char* name, Uid uid) {
            return g->tensor(fe::graph::Tensor_attributes()
                                 .set_name(name)
                                 .set_uid(uid)
                                 .set_dim({1, 1, 1, 1})
                                 .set_stride({1, 1, 1, 1})
                                 .set_data_type(fe::DataType_t::FLOAT));
        };
        auto outs = g->sdpa_fp8(q, kt, v, scalar("descale_q", kDescaleQ), scalar("descale_k", kDescaleK),
                                scalar("descale_v", kDescaleV), scalar("descale_s", kDescaleS),
                                scalar("scale_s", kScaleS), scalar("scale_o", kScaleO), opts);
        o = outs[0];
        stats = outs[1];
        for (auto [t, uid] : {std::pair{outs[2], kAmaxS}, std::pair{outs[3], kAmaxO}}) {
            t->set_output(true)
                .set_uid(uid)
                .set_dim({1, 1, 1, 1})
                .set_stride({1, 1, 1, 1})
                .set_data_type(fe::DataType_t::FLOAT);
        }
    } else {
        auto outs = g->sdpa(q, kt, v, opts);
        o = outs[0];
        stats = outs[1];
    }
    o->set_output(true).set_uid(kO).set_dim({k.b, k.h, k.s_q, k.d_v}).set_stride({k.s_q * k.o0, k.o1, k.o0, 1});
    ragged_offset(o, "off_o", kOffO);
    if (k.stats) {
        stats->set_output(true)
            .set_uid(kStats)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim({k.b, k.h, k.s_q, 1})
            .set_stride({k.s_q * k.l0, 1, k.l0, 1});
        ragged_offset(stats, "off_stats", kOffStats);
    }

    std::string why;
    try {
        fe::error_t st = g->validate();
        if (st.is_good()) st = g->build_operation_graph(handle);
        if (st.is_good()) st = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
        if (st.is_good()) st = g->check_support(handle);
        if (st.is_good()) {
            st = g->build_plans(handle,
                                k.autotune ? fe::BuildPlanPolicy_t::ALL : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
        }
        int64_t ws = 0;
        if (st.is_good() && k.autotune) ws = g->get_autotune_workspace_size();
        if (st.is_good() && !k.autotune) st = g->get_workspace_size(ws);
        if (st.is_good()) return Plan{.graph = g, .workspace_bytes = ws, .tune_pending = k.autotune};
        why = st.get_message();
    } catch (const std::exception& e) {  // the frontend can throw (e.g. from its JSON): an unsupported case, not fatal
        why = e.what();
    }
    PENSTOCK_LOG_WARN("attention: cuDNN SDPA refused {} ({}); using the CUDA-core kernel for this shape", describe(k),
                      why);
    return Plan{};
}

size_t round_up(size_t n) { return (n + 255) & ~size_t{255}; }

}  // namespace

bool attention_cudnn_built() { return true; }

bool attention_cudnn(const kernels::AttentionParams& p, void* stream, const float* fp8_scale_o) {
    if (!covered(p)) return false;
    const bool fp8 = p.q.dtype == DType::kF8E4M3;
    if (fp8 && fp8_scale_o == nullptr) return false;
    const auto s = static_cast<cudaStream_t>(stream);
    int device = 0;
    PENSTOCK_CUDA_CHECK(cudaGetDevice(&device));
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    PENSTOCK_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    Entry* e = cache().get(device, s, capturing);
    if (e == nullptr) return false;

    // The plan of `key`, built on first use (never inside a capture: graph building is no stream operation).
    auto plan_of = [&](const GraphKey& key) -> Plan* {
        auto it = e->plans.find(key);
        if (it == e->plans.end()) {
            if (capturing) return nullptr;
            it = e->plans.emplace(key, build_plan(key, e->handle)).first;
        }
        return it->second.graph != nullptr ? &it->second : nullptr;
    };
    GraphKey key = key_of(p, /*ragged=*/false);
    Plan* plan = plan_of(key);
    if (plan == nullptr && !key.ragged) {
        key = key_of(p, /*ragged=*/true);
        plan = plan_of(key);
    }
    if (plan == nullptr || (plan->tune_pending && capturing)) return false;

    // Scratch: ragged: seq_len_q, seq_len_kv [B] i32 and five [B + 1] i64 offset vectors; cuDNN's workspace.
    const auto n = static_cast<size_t>(key.b);
    const size_t lens_bytes = key.ragged ? round_up(n * sizeof(int32_t)) : 0;
    const size_t off_bytes = key.ragged ? round_up((n + 1) * sizeof(int64_t)) : 0;
    const size_t meta_bytes = 2 * lens_bytes + 5 * off_bytes + (fp8 ? 256 : 0);  // FP8: the two amax outputs
    const size_t need = meta_bytes + round_up(static_cast<size_t>(plan->workspace_bytes));
    if (need > e->scratch_bytes) {
        if (capturing) return false;
        if (e->scratch != nullptr) {
            PENSTOCK_CUDA_CHECK(cudaStreamSynchronize(s));  // earlier calls on this stream may still read it
            PENSTOCK_CUDA_CHECK(cudaFree(e->scratch));
            e->scratch = nullptr;
            e->scratch_bytes = 0;
        }
        const size_t bytes = std::max(need, size_t{1} << 20);
        PENSTOCK_CUDA_CHECK(cudaMalloc(&e->scratch, bytes));
        e->scratch_bytes = bytes;
    }
    char* base = static_cast<char*>(e->scratch);
    void* workspace = base + meta_bytes;
    float scale = p.scale;
    std::unordered_map<int64_t, void*> pack = {
        {kQ, p.q.data}, {kK, p.k.data}, {kV, p.v.data}, {kO, p.out.data}, {kScale, &scale},
    };
    if (key.stats) pack.insert({kStats, p.lse.data});
    if (fp8) {
        auto* amax = reinterpret_cast<float*>(base + meta_bytes - 256);
        pack.insert({{kDescaleQ, p.q_descale.data},
                     {kDescaleK, p.k_descale.data},
                     {kDescaleV, p.v_descale.data},
                     {kScaleS, e->fp8_consts},
                     {kDescaleS, e->fp8_consts + 1},
                     {kScaleO, const_cast<float*>(fp8_scale_o)},
                     {kAmaxS, amax},
                     {kAmaxO, amax + 1}});
    }
    if (key.ragged) {
        auto* seq_len_q = reinterpret_cast<int32_t*>(base);
        auto* seq_len_k = reinterpret_cast<int32_t*>(base + lens_bytes);
        std::array<int64_t*, 5> off{};
        for (size_t i = 0; i < off.size(); ++i) {
            off[i] = reinterpret_cast<int64_t*>(base + 2 * lens_bytes + i * off_bytes);
        }
        sdpa_prepare_metadata({.cu_q = p.cu_seqlens_q.ptr<const int32_t>(),
                               .cu_k = p.cu_seqlens_k.ptr<const int32_t>(),
                               .seq_len_q = seq_len_q,
                               .seq_len_k = seq_len_k,
                               .off_q = off[0],
                               .off_k = off[1],
                               .off_v = off[2],
                               .off_o = off[3],
                               .off_lse = off[4],
                               .q_row = key.q0,
                               .k_row = key.k0,
                               .v_row = key.v0,
                               .o_row = key.o0,
                               .lse_row = key.l0,
                               .n_seqs = static_cast<int>(key.b)},
                              stream);
        pack.insert({{kSeqLenQ, seq_len_q},
                     {kSeqLenKv, seq_len_k},
                     {kOffQ, off[0]},
                     {kOffK, off[1]},
                     {kOffV, off[2]},
                     {kOffO, off[3]}});
        if (key.stats) pack.insert({kOffStats, off[4]});
    }
    if (plan->tune_pending) {  // first call of an autotuned key (never inside a capture: it synchronises)
        plan->tune_pending = false;
        const fe::error_t tuned = plan->graph->autotune(e->handle, pack, workspace);
        int64_t ws = plan->workspace_bytes;
        if (tuned.is_good() && plan->graph->get_workspace_size(ws).is_good()) plan->workspace_bytes = ws;
        PENSTOCK_LOG_INFO("attention: cuDNN autotune of {}: {}", describe(key), tuned.is_good() ? "ok" : tuned.err_msg);
    }
    fe::error_t st = plan->graph->execute(e->handle, pack, workspace);
    if (!st.is_good()) {
        // Nothing of the SDPA ran (a metadata kernel's output is unused): the caller's kernel computes the result.
        PENSTOCK_LOG_WARN("attention: cuDNN SDPA execute failed for {} ({}); using the CUDA-core kernel", describe(key),
                          st.get_message());
        plan->graph = nullptr;  // do not try this key again
        return false;
    }
    if (key.ragged && !fp8) {  // the dense flavour has no row without keys, nor has FP8 (equal lengths)
        sdpa_fill_empty_rows({.out = p.out.data,
                              .lse = static_cast<float*>(p.lse.data),  // null when the call wants no lse
                              .cu_q = p.cu_seqlens_q.ptr<const int32_t>(),
                              .cu_k = p.cu_seqlens_k.ptr<const int32_t>(),
                              .q_pos0 = p.q_pos0.ptr<const int32_t>(),
                              .k_pos0 = p.k_pos0.ptr<const int32_t>(),
                              .o0 = key.o0,
                              .o1 = key.o1,
                              .l0 = key.l0,
                              .l1 = 1,
                              .n_seqs = static_cast<int>(key.b),
                              .n_heads = static_cast<int>(key.h),
                              .d_v = static_cast<int>(key.d_v),
                              .q_pos_step = p.q_pos_step,
                              .causal = p.causal},
                             stream);
    }
    return true;
}

}  // namespace penstock::cuda
