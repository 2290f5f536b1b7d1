// DSA lightning-indexer logits (kernels/ops_dsa.h DsaIndexerLogitsParams, fp8) and causal top-k at GLM-5.3 dims: 32
// index heads x 128, top-2048, one sequence of T = 4096, 16384, 65536 tokens with no prefix (rows = keys = T,
// q_pos[r] = r), i.e. the model's call for a whole-prompt chunk (src/models/dsa_indexer.cc; the model does not score
// rows below top_k, the bench does). Inputs: q, k f32 uniform on the device, quantised as the model does
// (dsa_quantize_fp8: Hadamard, e4m3, ue8m0 scale per (row, head) / key); weights uniform.
// Variants: kWgmma (dsa_indexer_wgmma.cu: e4m3 widened to f16, exact; kAuto's choice), kWgmmaFp8 (e4m3 wgmma,
// Hopper's reduced-precision accumulation; opt-in) and kMma (mma.sync), all with q_pos (causal tile skipping), and
// kMma without q_pos (every key: the call before q_pos existed) at T <= 16384; the default f32 indexer's tensor-core
// kernels on the unquantised f32 q / k (kWgmmaF16x3, kAuto's; kWgmmaTf32), causal. Alternatives of the wgmma kernels
// (WgmmaIndexerOptions): the consumers' ping-pong instead of free-running (the default of both since session 17),
// the ping-pong with the hand-over after the wgmmas retired, and a diagnostic without the epilogue.
// FLOPs = 2 * heads * head_dim * sum_r (q_pos[r] + 1) (the causal half); % of FP8 peak against the datasheet dense
// 1979 TFLOP/s and the 1324 TFLOP/s torch._scaled_mm anchor (PERF.md). Sanity: max |wgmma - mma| and
// |wgmma_fp8 - mma| over the visible keys of 8 sampled rows (mma.sync matches the reference to f32 rounding).
// Top-k: the default kernel (TopkVariant::kRangeRadix), kRangeRadixScalarCompact (interleaved: scalar, default,
// scalar, default), kRangeRadixRowSmem (the previous long-row kernel; interleaved likewise; its speed-up and the
// stream kernel's rows selected from global memory), kRangeRadixStream (the stream kernel at every T) and kLegacy on
// the same logits, same run; then a 16K chunk after 48K and 112K prefixes on the FP8-accumulate and exact logits
// (run_topk_after_prefix; beside kRangeRadixSerialReplay, the tied rows' previous replay); the rows whose boundary
// was tied (replayed), and the count of indices where the variants disagree with kLegacy (must be 0: all match the
// reference); at T <= 16384 also on the logits rounded through bf16, where nearly every row is tied (the replay's
// throughput).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "bench/kernels/bench_harness.h"
#include "bench/layer/random_fill.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_dsa.h"
#include "kernels/cuda/dsa_indexer_wgmma.h"

namespace penstock::bench {

namespace {

constexpr double kFp8DatasheetTflops = 1979.0;
constexpr double kFp8ScaledMmTflops = 1324.0;  // PERF.md: torch._scaled_mm (cuBLASLt) on one H200

// Entries where two device i32 tensors of one shape differ (synchronises the stream).
int64_t count_mismatches(const Tensor& a_dev, const Tensor& b_dev, const cuda::Stream& stream) {
    const Tensor a = cuda::to_host(a_dev, stream);
    const Tensor b = cuda::to_host(b_dev, stream);
    int64_t n = 0;
    for (int64_t i = 0; i < a.numel(); ++i) n += a.ptr<int32_t>()[i] != b.ptr<int32_t>()[i];
    return n;
}

std::vector<float> read_row(const Tensor& t, int64_t row, int64_t n, const cuda::Stream& stream) {
    const Tensor h = cuda::to_host(t.view().slice(0, row, row + 1).slice(1, 0, n), stream);
    return std::vector<float>(h.ptr<float>(), h.ptr<float>() + h.numel());
}

constexpr int64_t kHeads = 32, kDim = 128, kTopK = 2048;  // GLM-5.3's indexer

// The indexer's inputs for `rows` queries (q_pos = first_pos + r) over `n_keys` keys: f32 q / k uniform on [0, 1)
// (seeds `seed`, `seed` + 1), their FP8 quantisation as the model makes it (dsa_quantize_fp8: Hadamard, e4m3, ue8m0
// scale per (row, head) / key), the head weights uniform on [0, 0.2) (`seed` + 2). Advances `seed` by 3.
struct IndexerInputs {
    Tensor qf, kf, q8, q_scale, k8, k_scale, w, pos;
};

IndexerInputs make_indexer_inputs(BenchContext& ctx, int64_t rows, int64_t n_keys, int64_t first_pos, uint64_t& seed) {
    void* s = ctx.stream().handle();
    IndexerInputs in;
    in.qf = Tensor::empty({rows * kHeads, kDim}, DType::kF32, ctx.alloc());
    in.kf = Tensor::empty({n_keys, kDim}, DType::kF32, ctx.alloc());
    fill_uniform(in.qf.view(), seed++, 0.0f, 1.0f, s);
    fill_uniform(in.kf.view(), seed++, 0.0f, 1.0f, s);
    in.q8 = Tensor::empty({rows * kHeads, kDim}, DType::kF8E4M3, ctx.alloc());
    in.q_scale = Tensor::empty({rows * kHeads}, DType::kF32, ctx.alloc());
    in.k8 = Tensor::empty({n_keys, kDim}, DType::kF8E4M3, ctx.alloc());
    in.k_scale = Tensor::empty({n_keys}, DType::kF32, ctx.alloc());
    cuda::dsa_quantize_fp8({.out = in.q8, .scale = in.q_scale, .in = in.qf, .rotate = true, .ue8m0 = true}, s);
    cuda::dsa_quantize_fp8({.out = in.k8, .scale = in.k_scale, .in = in.kf, .rotate = true, .ue8m0 = true}, s);
    in.w = Tensor::empty({rows, kHeads}, DType::kF32, ctx.alloc());
    fill_uniform(in.w.view(), seed++, 0.0f, 0.2f, s);
    std::vector<int32_t> p(static_cast<size_t>(rows));
    std::iota(p.begin(), p.end(), static_cast<int32_t>(first_pos));
    in.pos = cuda::to_device(Tensor::from_i32({rows}, p).view(), ctx.alloc(), ctx.stream());
    ctx.stream().synchronize();
    return in;
}

// The FP8 indexer's logits call on `in` (causal by in.pos) into `logits`.
kernels::DsaIndexerLogitsParams fp8_logits_params(const IndexerInputs& in, const Tensor& logits) {
    const int64_t rows = in.w.size(0);
    return {.logits = logits,
            .q = in.q8.view().reshape({rows, kHeads, kDim}),
            .k = in.k8,
            .weights = in.w,
            .q_scale = in.q_scale.view().reshape({rows, kHeads}),
            .k_scale = in.k_scale,
            .q_pos = in.pos,
            .scale = 1.0f / std::sqrt(static_cast<float>(kDim))};
}

// The top-k of one chunk of `rows` queries after a `prefix` (q_pos = prefix + r, n_keys = prefix + rows: the model's
// call for a chunk after a long prefix) on the logits of the FP8 indexer as the GLM-5.3 layer runs it with
// --dsa-fp8-accumulate (kWgmmaFp8) and of the exact kWgmma: the default and kRangeRadixRowSmem, interleaved, with
// the tied rows (the replay; serial partial_sort once top_k * 64 <= n_keys) and the stream kernel's global
// fallbacks, and the indices of the two variants compared.
void run_topk_after_prefix(BenchContext& ctx, int64_t rows, int64_t prefix, uint64_t seed) {
    void* s = ctx.stream().handle();
    const int64_t n_keys = prefix + rows;
    const IndexerInputs in = make_indexer_inputs(ctx, rows, n_keys, prefix, seed);
    const Tensor logits = Tensor::empty({rows, n_keys}, DType::kF32, ctx.alloc());
    const Tensor idx = Tensor::empty({rows, kTopK}, DType::kI32, ctx.alloc());
    const Tensor idx_row = Tensor::empty({rows, kTopK}, DType::kI32, ctx.alloc());
    const kernels::DsaIndexerLogitsParams lp = fp8_logits_params(in, logits);
    const Tensor& pos = in.pos;
    if (!cuda::dsa_indexer_wgmma_supported(lp)) return;
    const kernels::DsaTopkParams tp{.indices = idx, .logits = logits, .q_pos = pos, .torch_row_len = 0};
    kernels::DsaTopkParams tp_row = tp;
    tp_row.indices = idx_row;
    const Tensor idx_serial = Tensor::empty({rows, kTopK}, DType::kI32, ctx.alloc());
    kernels::DsaTopkParams tp_serial = tp;
    tp_serial.indices = idx_serial;
    const auto serial = [&] { cuda::dsa_topk(tp_serial, cuda::TopkVariant::kRangeRadixSerialReplay, ctx.alloc(), s); };
    for (const bool fp8_acc : {true, false}) {
        cuda::dsa_indexer_logits(lp, fp8_acc ? cuda::IndexerVariant::kWgmmaFp8 : cuda::IndexerVariant::kWgmma, s);
        const cuda::TopkDiagnosis diag = cuda::dsa_topk_diagnose(tp, cuda::TopkVariant::kRangeRadix, ctx.alloc(), s);
        const Timing t_row_a =
            ctx.time([&] { cuda::dsa_topk(tp_row, cuda::TopkVariant::kRangeRadixRowSmem, ctx.alloc(), s); }, 1, 3);
        const Timing t_a = ctx.time([&] { cuda::dsa_topk(tp, ctx.alloc(), s); }, 1, 3);
        const Timing t_row_b =
            ctx.time([&] { cuda::dsa_topk(tp_row, cuda::TopkVariant::kRangeRadixRowSmem, ctx.alloc(), s); }, 1, 3);
        const Timing t_b = ctx.time([&] { cuda::dsa_topk(tp, ctx.alloc(), s); }, 1, 3);
        const Timing t_serial = ctx.time(serial, 1, 3);
        nlohmann::json rec = ctx.base_record("dsa_topk");
        rec["variant"] = "range_radix";
        rec["input"] = fp8_acc ? "kWgmmaFp8 logits (fp8-accumulate)" : "kWgmma logits (exact f16)";
        rec["rows"] = rows;
        rec["prefix"] = prefix;
        rec["n_keys"] = n_keys;
        rec["top_k"] = kTopK;
        rec["ms"] = {t_a.median_us * 1e-3, t_b.median_us * 1e-3};
        rec["row_smem_ms"] = {t_row_a.median_us * 1e-3, t_row_b.median_us * 1e-3};
        rec["speedup_vs_row_smem"] = (t_row_a.median_us + t_row_b.median_us) / (t_a.median_us + t_b.median_us);
        rec["tied_rows"] = diag.tied_rows;
        rec["rows_from_global"] = diag.global_rows;
        rec["mismatches_vs_row_smem"] = count_mismatches(idx, idx_row, ctx.stream());
        // The tied rows' previous replay (serial partial_sort on the whole queue), same inputs.
        rec["serial_replay_ms"] = t_serial.median_us * 1e-3;
        rec["mismatches_vs_serial_replay"] = count_mismatches(idx, idx_serial, ctx.stream());
        ctx.report(rec, t_a, 4.0 * static_cast<double>(rows) * static_cast<double>(prefix + (rows + 1) / 2));
    }
}

// PENSTOCK_DSA_EPI_AB=1: only the e4m3 logits kernel's epilogues (WgmmaIndexerOptions::epilogue: kChains2,
// kChains4, kChains4FaddAbs, kChains2FaddAbs), interleaved over three rounds at T = 16384 and 65536 (causal, prefix
// 0), with sampled rows' visible logits of kChains4FaddAbs / kChains2FaddAbs compared byte for byte with kChains4 /
// kChains2 and the largest |kChains4 - kChains2|.
void run_epilogue_ab(BenchContext& ctx) {
    void* s = ctx.stream().handle();
    uint64_t seed = 1900;
    using E = cuda::IndexerEpilogue;
    const E kForms[] = {E::kChains2, E::kChains4, E::kChains4FaddAbs, E::kChains2FaddAbs};
    const char* kNames[] = {"chains2", "chains4", "chains4_fadd_abs", "chains2_fadd_abs"};
    constexpr int kN = 4;
    for (const int64_t T : {int64_t{16384}, int64_t{65536}}) {
        const IndexerInputs in = make_indexer_inputs(ctx, T, T, 0, seed);
        const Tensor logits = Tensor::empty({T, T}, DType::kF32, ctx.alloc());
        const kernels::DsaIndexerLogitsParams lp = fp8_logits_params(in, logits);
        if (!cuda::dsa_indexer_wgmma_supported(lp)) return;
        const int reps = T >= 65536 ? 3 : 10;
        const double flops = 2.0 * kHeads * kDim * static_cast<double>(T) * static_cast<double>(T + 1) / 2.0;
        // Sample rows' visible logits per form (last rows: the most keys).
        std::vector<float> rows[kN];
        for (int f = 0; f < kN; ++f) {
            cuda::dsa_indexer_logits_wgmma(lp, {.fp8_accumulate = true, .epilogue = kForms[f]}, s);
            for (const int64_t r : {T - 1, T / 2, int64_t{7}}) {
                const std::vector<float> v = read_row(logits, r, r + 1, ctx.stream());
                rows[f].insert(rows[f].end(), v.begin(), v.end());
            }
        }
        int64_t differ = 0, differ2 = 0;
        double max_diff = 0.0;
        for (size_t i = 0; i < rows[1].size(); ++i) {
            differ += std::memcmp(&rows[1][i], &rows[2][i], sizeof(float)) != 0 ? 1 : 0;
            differ2 += std::memcmp(&rows[0][i], &rows[3][i], sizeof(float)) != 0 ? 1 : 0;
            max_diff = std::max(max_diff, static_cast<double>(std::fabs(rows[1][i] - rows[0][i])));
        }
        for (int round = 0; round < 3; ++round) {
            for (int f = 0; f < kN; ++f) {
                const cuda::WgmmaIndexerOptions o{.fp8_accumulate = true, .epilogue = kForms[f]};
                const Timing t = ctx.time([&] { cuda::dsa_indexer_logits_wgmma(lp, o, s); }, 2, reps * 2);
                nlohmann::json rec = ctx.base_record("dsa_indexer_logits_epilogue");
                rec["variant"] = kNames[f];
                rec["round"] = round;
                rec["tokens"] = T;
                rec["ms"] = t.median_us * 1e-3;
                rec["tflops"] = flops / (t.median_us * 1e-6) / 1e12;
                rec["sample_values_fadd_abs_differ_from_chains4"] = differ;
                rec["sample_values_chains2_fadd_abs_differ_from_chains2"] = differ2;
                rec["sample_max_abs_chains4_vs_chains2"] = max_diff;
                ctx.report(rec, t, 4.0 * static_cast<double>(T) * static_cast<double>(T) / 2.0);
            }
        }
    }
}

}  // namespace

void run_dsa_bench(BenchContext& ctx) {
    if (const char* e = std::getenv("PENSTOCK_DSA_EPI_AB"); e != nullptr && std::strcmp(e, "1") == 0) {
        run_epilogue_ab(ctx);
        return;
    }
    const int64_t kTokens[] = {4096, 16384, 65536};
    uint64_t seed = 900;
    void* s = ctx.stream().handle();
    for (const int64_t T : kTokens) {
        Tensor logits, logits_mma, logits_fp8, idx;
        // f32 q / k (the default indexer's; kept for its kernels' timings below), and their fp8 quantisation.
        const IndexerInputs in = make_indexer_inputs(ctx, T, T, 0, seed);
        const Tensor &qf = in.qf, &kf = in.kf, &w = in.w, &pos = in.pos;
        logits = Tensor::empty({T, T}, DType::kF32, ctx.alloc());
        logits_mma = Tensor::empty({T, T}, DType::kF32, ctx.alloc());
        logits_fp8 = Tensor::empty({T, T}, DType::kF32, ctx.alloc());
        idx = Tensor::empty({T, kTopK}, DType::kI32, ctx.alloc());
        const Tensor idx_legacy = Tensor::empty({T, kTopK}, DType::kI32, ctx.alloc());
        kernels::DsaIndexerLogitsParams lp = fp8_logits_params(in, logits);
        kernels::DsaIndexerLogitsParams lm = lp;
        lm.logits = logits_mma;
        kernels::DsaIndexerLogitsParams lf8 = lp;
        lf8.logits = logits_fp8;
        kernels::DsaIndexerLogitsParams lfull = lm;
        lfull.q_pos = {};
        ctx.stream().synchronize();
        const bool big = T >= 65536;
        const int reps = big ? 3 : 10;
        const bool wgmma_ok = cuda::dsa_indexer_wgmma_supported(lp);
        Timing t_wg{}, t_f8{}, t_wg_pp{}, t_f8_pp{}, t_wg_mma{}, t_f8_mma{}, t_wg_late{}, t_f8_late{};
        Timing t_mma{}, t_full{}, t_topk{};
        if (wgmma_ok) {
            // The ping-pong runs first, so the default runs write the compared logits last.
            using Opt = cuda::WgmmaIndexerOptions;
            const Opt pp_f16{.fp8_accumulate = false, .ping_pong = true, .mma_only = false};
            const Opt pp_fp8{.fp8_accumulate = true, .ping_pong = true, .mma_only = false};
            const Opt mma_f16{.fp8_accumulate = false, .ping_pong = true, .mma_only = true};
            const Opt mma_fp8{.fp8_accumulate = true, .ping_pong = true, .mma_only = true};
            const Opt late_f16{
                .fp8_accumulate = false, .ping_pong = true, .mma_only = false, .hand_over_after_wait = true};
            const Opt late_fp8{
                .fp8_accumulate = true, .ping_pong = true, .mma_only = false, .hand_over_after_wait = true};
            t_wg_late = ctx.time([&] { cuda::dsa_indexer_logits_wgmma(lp, late_f16, s); }, 2, reps * 2);
            t_f8_late = ctx.time([&] { cuda::dsa_indexer_logits_wgmma(lf8, late_fp8, s); }, 2, reps * 2);
            t_wg_pp = ctx.time([&] { cuda::dsa_indexer_logits_wgmma(lp, pp_f16, s); }, 2, reps * 2);
            t_f8_pp = ctx.time([&] { cuda::dsa_indexer_logits_wgmma(lf8, pp_fp8, s); }, 2, reps * 2);
            t_wg_mma = ctx.time([&] { cuda::dsa_indexer_logits_wgmma(lp, mma_f16, s); }, 2, reps * 2);
            t_f8_mma = ctx.time([&] { cuda::dsa_indexer_logits_wgmma(lf8, mma_fp8, s); }, 2, reps * 2);
            t_wg = ctx.time([&] { cuda::dsa_indexer_logits(lp, cuda::IndexerVariant::kWgmma, s); }, 2, reps * 2);
            t_f8 = ctx.time([&] { cuda::dsa_indexer_logits(lf8, cuda::IndexerVariant::kWgmmaFp8, s); }, 2, reps * 2);
        }
        // The f32 indexer's tensor-core kernels (causal; into logits_mma, which the mma runs below overwrite).
        kernels::DsaIndexerLogitsParams l32{.logits = logits_mma,
                                            .q = qf.view().reshape({T, kHeads, kDim}),
                                            .k = kf,
                                            .weights = w,
                                            .q_scale = {},
                                            .k_scale = {},
                                            .q_pos = pos,
                                            .scale = lp.scale};
        const bool f32_wgmma_ok = cuda::dsa_indexer_wgmma_tf32_supported(l32);
        Timing t_f16x3{}, t_tf32{};
        if (f32_wgmma_ok) {
            t_f16x3 = ctx.time([&] { cuda::dsa_indexer_logits(l32, cuda::IndexerVariant::kWgmmaF16x3, s); }, 1, reps);
            t_tf32 = ctx.time([&] { cuda::dsa_indexer_logits(l32, cuda::IndexerVariant::kWgmmaTf32, s); }, 1, reps);
        }
        t_mma = ctx.time([&] { cuda::dsa_indexer_logits(lm, cuda::IndexerVariant::kMma, s); }, 1, reps);
        if (!big) t_full = ctx.time([&] { cuda::dsa_indexer_logits(lfull, cuda::IndexerVariant::kMma, s); }, 1, reps);
        // mma without q_pos wrote every key of logits_mma; re-run the causal call (its entries past q_pos then hold
        // stale all-key values, which are never compared).
        cuda::dsa_indexer_logits(lm, cuda::IndexerVariant::kMma, s);
        const Tensor& topk_logits = wgmma_ok ? logits : logits_mma;
        const kernels::DsaTopkParams tp{.indices = idx, .logits = topk_logits, .q_pos = pos, .torch_row_len = 0};
        kernels::DsaTopkParams tp_legacy = tp;
        tp_legacy.indices = idx_legacy;
        // The legacy kernel first (its output compared below), then the default one.
        const Timing t_topk_legacy =
            ctx.time([&] { cuda::dsa_topk(tp_legacy, cuda::TopkVariant::kLegacy, ctx.alloc(), s); }, 1, reps);
        // kRangeRadixScalarCompact (one key per lane in the compaction) before and after the default (which writes
        // last).
        const Timing t_topk_scalar_a =
            ctx.time([&] { cuda::dsa_topk(tp, cuda::TopkVariant::kRangeRadixScalarCompact, ctx.alloc(), s); }, 1, reps);
        const int64_t scalar_mismatches = count_mismatches(idx, idx_legacy, ctx.stream());
        t_topk = ctx.time([&] { cuda::dsa_topk(tp, ctx.alloc(), s); }, 1, reps);
        const Timing t_topk_scalar_b =
            ctx.time([&] { cuda::dsa_topk(tp, cuda::TopkVariant::kRangeRadixScalarCompact, ctx.alloc(), s); }, 1, reps);
        const Timing t_topk2 = ctx.time([&] { cuda::dsa_topk(tp, ctx.alloc(), s); }, 1, reps);
        ctx.stream().synchronize();
        const cuda::TopkDiagnosis diag = cuda::dsa_topk_diagnose(tp, cuda::TopkVariant::kRangeRadix, ctx.alloc(), s);
        const int64_t tied_rows = diag.tied_rows;
        const int64_t topk_mismatches = count_mismatches(idx, idx_legacy, ctx.stream());
        // kRangeRadixRowSmem (long calls with each row in shared memory, the default before the stream kernel),
        // interleaved with the default: row-smem, default, row-smem, default.
        const Timing t_topk_row_a =
            ctx.time([&] { cuda::dsa_topk(tp, cuda::TopkVariant::kRangeRadixRowSmem, ctx.alloc(), s); }, 1, reps);
        const int64_t row_mismatches = count_mismatches(idx, idx_legacy, ctx.stream());
        const Timing t_topk3 = ctx.time([&] { cuda::dsa_topk(tp, ctx.alloc(), s); }, 1, reps);
        const Timing t_topk_row_b =
            ctx.time([&] { cuda::dsa_topk(tp, cuda::TopkVariant::kRangeRadixRowSmem, ctx.alloc(), s); }, 1, reps);
        const Timing t_topk4 = ctx.time([&] { cuda::dsa_topk(tp, ctx.alloc(), s); }, 1, reps);
        const int64_t topk_mismatches_4 = count_mismatches(idx, idx_legacy, ctx.stream());
        // kRangeRadixStream: the stream kernel on this call whatever its n_keys (the default takes it above 16384).
        const Timing t_topk_stream =
            ctx.time([&] { cuda::dsa_topk(tp, cuda::TopkVariant::kRangeRadixStream, ctx.alloc(), s); }, 1, reps);
        const int64_t stream_mismatches = count_mismatches(idx, idx_legacy, ctx.stream());
        double max_diff = 0.0, max_diff_f8 = 0.0, max_ref = 0.0;
        if (wgmma_ok) {
            for (int i = 0; i < 8; ++i) {
                const int64_t r = (T - 1) * i / 7;
                const std::vector<float> a = read_row(logits, r, r + 1, ctx.stream());
                const std::vector<float> f = read_row(logits_fp8, r, r + 1, ctx.stream());
                const std::vector<float> b = read_row(logits_mma, r, r + 1, ctx.stream());
                for (size_t j = 0; j < a.size(); ++j) {
                    max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[j] - b[j])));
                    max_diff_f8 = std::max(max_diff_f8, static_cast<double>(std::fabs(f[j] - b[j])));
                    max_ref = std::max(max_ref, static_cast<double>(std::fabs(b[j])));
                    if (std::isnan(a[j])) max_diff = INFINITY;
                    if (std::isnan(f[j])) max_diff_f8 = INFINITY;
                }
            }
        }
        // Tie-heavy top-k (T <= 16384): the same logits rounded through bf16 (8 mantissa bits), so nearly every row's
        // boundary value is tied and takes the replay: the parallel replay against the legacy serial one.
        Timing t_ties{}, t_ties_legacy{};
        int64_t ties_rows = 0, ties_mismatches = 0;
        if (!big) {
            {
                const Tensor lb = Tensor::empty({T, T}, DType::kBF16, ctx.alloc());
                cuda::copy({.out = lb, .in = topk_logits}, s);
                cuda::copy({.out = logits_mma, .in = lb}, s);
                ctx.stream().synchronize();
            }
            kernels::DsaTopkParams tt = tp, tt_legacy = tp_legacy;
            tt.logits = logits_mma;
            tt_legacy.logits = logits_mma;
            t_ties_legacy =
                ctx.time([&] { cuda::dsa_topk(tt_legacy, cuda::TopkVariant::kLegacy, ctx.alloc(), s); }, 1, 3);
            t_ties = ctx.time([&] { cuda::dsa_topk(tt, ctx.alloc(), s); }, 1, reps);
            ctx.stream().synchronize();
            ties_rows = cuda::dsa_topk_tied_rows(tt, ctx.alloc(), s);
            ties_mismatches = count_mismatches(idx, idx_legacy, ctx.stream());
        }
        const double flops = 2.0 * kHeads * kDim * (static_cast<double>(T) * static_cast<double>(T + 1) / 2.0);
        const double flops_full = 2.0 * kHeads * kDim * static_cast<double>(T) * static_cast<double>(T);
        // Bytes: q, k (e4m3) + scales + weights read once, the causal half of the f32 logits written.
        const double bytes =
            static_cast<double>(T) * kHeads * (kDim + 8.0) + T * (kDim + 4.0) + 4.0 * T * (T + 1) / 2.0;
        auto emit = [&](const char* variant, const Timing& t, double fl, bool causal,
                        const char* dtype = "e4m3 q/k, f32 logits") {
            nlohmann::json rec = ctx.base_record("dsa_indexer_logits");
            rec["variant"] = variant;
            rec["dtype"] = dtype;
            rec["tokens"] = T;
            rec["heads"] = kHeads;
            rec["head_dim"] = kDim;
            rec["causal_q_pos"] = causal;
            rec["ms"] = t.median_us * 1e-3;
            const double tf = fl / (t.median_us * 1e-6) / 1e12;
            rec["tflops"] = tf;
            rec["pct_fp8_datasheet_1979"] = 100.0 * tf / kFp8DatasheetTflops;
            rec["pct_fp8_scaled_mm_1324"] = 100.0 * tf / kFp8ScaledMmTflops;
            rec["flop_model"] = causal ? "2*H*D*T(T+1)/2" : "2*H*D*T*T";
            if (wgmma_ok && t_wg.median_us > 0) rec["wgmma_speedup"] = t.median_us / t_wg.median_us;
            ctx.report(rec, t, bytes);
        };
        if (wgmma_ok) emit("wgmma", t_wg, flops, true);
        if (wgmma_ok) emit("wgmma_fp8_accumulate", t_f8, flops, true);
        if (wgmma_ok) emit("wgmma_ping_pong", t_wg_pp, flops, true);
        if (wgmma_ok) emit("wgmma_fp8_accumulate_ping_pong", t_f8_pp, flops, true);
        if (wgmma_ok) emit("wgmma_hand_over_after_wait", t_wg_late, flops, true);
        if (wgmma_ok) emit("wgmma_fp8_accumulate_hand_over_after_wait", t_f8_late, flops, true);
        // Diagnostics (logits not written): the operand pipeline and wgmmas alone, i.e. the epilogue's share.
        if (wgmma_ok) emit("diag_wgmma_mma_only", t_wg_mma, flops, true);
        if (wgmma_ok) emit("diag_wgmma_fp8_accumulate_mma_only", t_f8_mma, flops, true);
        emit("mma", t_mma, flops, true);
        // (their bytes are counted as the fp8 ones': the f32 q / k are 4x those, still small against the logits)
        if (f32_wgmma_ok) emit("f32_wgmma_f16x3", t_f16x3, flops, true, "f32 q/k, f32 logits");
        if (f32_wgmma_ok) emit("f32_wgmma_tf32", t_tf32, flops, true, "f32 q/k, f32 logits");
        if (!big) emit("mma_all_keys", t_full, flops_full, false);
        nlohmann::json rec = ctx.base_record("dsa_topk");
        rec["tokens"] = T;
        rec["top_k"] = kTopK;
        rec["variant"] = "range_radix";
        rec["ms"] = t_topk.median_us * 1e-3;
        rec["legacy_ms"] = t_topk_legacy.median_us * 1e-3;
        rec["speedup_vs_legacy"] = t_topk_legacy.median_us / t_topk.median_us;
        rec["ms_second_round"] = t_topk2.median_us * 1e-3;
        rec["scalar_compact_ms"] = {t_topk_scalar_a.median_us * 1e-3, t_topk_scalar_b.median_us * 1e-3};
        rec["speedup_vs_scalar_compact"] =
            (t_topk_scalar_a.median_us + t_topk_scalar_b.median_us) / (t_topk.median_us + t_topk2.median_us);
        rec["scalar_compact_mismatches_vs_legacy"] = scalar_mismatches;
        rec["ms_rounds_3_4"] = {t_topk3.median_us * 1e-3, t_topk4.median_us * 1e-3};
        rec["row_smem_ms"] = {t_topk_row_a.median_us * 1e-3, t_topk_row_b.median_us * 1e-3};
        rec["speedup_vs_row_smem"] =
            (t_topk_row_a.median_us + t_topk_row_b.median_us) / (t_topk3.median_us + t_topk4.median_us);
        rec["row_smem_mismatches_vs_legacy"] = row_mismatches;
        rec["mismatches_vs_legacy_round_4"] = topk_mismatches_4;
        rec["rows_from_global"] = diag.global_rows;
        rec["stream_forced_ms"] = t_topk_stream.median_us * 1e-3;
        rec["stream_forced_mismatches_vs_legacy"] = stream_mismatches;
        rec["tied_rows"] = tied_rows;
        rec["mismatches_vs_legacy"] = topk_mismatches;
        rec["logits_ms_wgmma"] = t_wg.median_us * 1e-3;
        rec["wgmma_vs_mma_max_abs_diff_8rows"] = max_diff;
        rec["wgmma_fp8_vs_mma_max_abs_diff_8rows"] = max_diff_f8;
        rec["max_abs_ref_8rows"] = max_ref;
        ctx.report(rec, t_topk, 4.0 * T * (T + 1) / 2.0 + 4.0 * T * kTopK);
        if (!big) {
            nlohmann::json rt = ctx.base_record("dsa_topk");
            rt["variant"] = "range_radix";
            rt["input"] = "logits rounded to bf16 (tie-heavy)";
            rt["tokens"] = T;
            rt["top_k"] = kTopK;
            rt["ms"] = t_ties.median_us * 1e-3;
            rt["legacy_ms"] = t_ties_legacy.median_us * 1e-3;
            rt["speedup_vs_legacy"] = t_ties_legacy.median_us / t_ties.median_us;
            rt["tied_rows"] = ties_rows;
            rt["mismatches_vs_legacy"] = ties_mismatches;
            ctx.report(rt, t_ties, 4.0 * T * (T + 1) / 2.0 + 4.0 * T * kTopK);
        }
    }
    // Long rows: a 16K chunk after 48K and 112K prefixes (rows of up to 65536 and 131072 keys).
    run_topk_after_prefix(ctx, 16384, 49152, seed++);
    run_topk_after_prefix(ctx, 16384, 114688, seed++);
}

}  // namespace penstock::bench
