// cuda::gemm (cuBLASLt, bf16, fp32 accumulation) and cuda::attention (cuDNN's SDPA path and the CUDA-core flash kernel)
// timed at model shapes; reported as TFLOP/s (and the bytes field as the operands' size). Baselines for the gap:
// PERF.md's cuBLAS bf16 754 TFLOP/s (8192^3) and cuDNN SDPA 620-655 TFLOP/s (causal, d 128 / 192-128); the same-run
// torch SDPA of the attention shapes: tools/sdpa_baseline.py.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/kernels/bench_harness.h"
#include "core/dtype.h"
#include "kernels/cuda/attention_bf16_wgmma.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/cuda_ops.h"

namespace penstock::bench {

namespace {

Tensor random_bf16(const Shape& shape, std::mt19937& rng, Allocator& alloc, const cuda::Stream& stream) {
    Tensor t = Tensor::empty(shape, DType::kBF16);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<uint16_t>()[i] = float_to_bf16(normal(rng));
    Tensor d = cuda::to_device(t, alloc, stream);
    stream.synchronize();
    return d;
}

// As random_bf16 for tensors of up to billions of values: 4M values are drawn and the tensor is tiled from them at
// rotating offsets (drawing every value on the host would take longer than the benchmark).
Tensor random_bf16_tiled(const Shape& shape, std::mt19937& rng, Allocator& alloc, const cuda::Stream& stream) {
    constexpr int64_t kDrawn = int64_t{1} << 22;
    constexpr int64_t kChunk = kDrawn / 2;
    std::vector<uint16_t> drawn(static_cast<size_t>(kDrawn));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (uint16_t& x : drawn) x = float_to_bf16(normal(rng));
    Tensor t = Tensor::empty(shape, DType::kBF16);
    uint16_t* dst = t.ptr<uint16_t>();
    for (int64_t i = 0, tile = 0; i < t.numel(); i += kChunk, ++tile) {
        const int64_t off = (tile * 7919) % kChunk;
        std::copy_n(drawn.data() + off, std::min(kChunk, t.numel() - i), dst + i);
    }
    Tensor d = cuda::to_device(t, alloc, stream);
    stream.synchronize();
    return d;
}

Tensor dev_i32(const std::vector<int32_t>& v, Allocator& alloc, const cuda::Stream& stream) {
    const Tensor h = Tensor::from_i32({static_cast<int64_t>(v.size())}, v);
    Tensor d = cuda::to_device(h, alloc, stream);
    stream.synchronize();
    return d;
}

}  // namespace

void run_gemm_bench(BenchContext& ctx) {
    std::mt19937 rng(/*seed=*/42);
    struct G {
        int64_t m, n, k;
    };
    const G kShapes[] = {{8192, 8192, 8192}, {16384, 2048, 7168}, {16384, 7168, 2048}, {4096, 24576, 1536}};
    for (const G& g : kShapes) {
        const Tensor a = random_bf16({g.m, g.k}, rng, ctx.alloc(), ctx.stream());
        const Tensor b = random_bf16({g.n, g.k}, rng, ctx.alloc(), ctx.stream());
        const Tensor out = Tensor::empty({g.m, g.n}, DType::kBF16, ctx.alloc());
        const kernels::GemmParams p{.out = out, .a = a, .b = b, .trans_b = true, .alpha = 1.0f, .beta = 0.0f};
        const Timing t = ctx.time([&] { cuda::gemm(p, ctx.stream().handle()); });
        const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
        nlohmann::json record = ctx.base_record("gemm");
        record["dtype"] = "bf16";
        record["m"] = g.m;
        record["n"] = g.n;
        record["k"] = g.k;
        record["tflops"] = flops / (t.median_us * 1e-6) / 1e12;
        ctx.report(record, t, static_cast<double>((g.m * g.k + g.n * g.k + g.m * g.n) * 2));
    }
}

// Times `op` with CUDA events: `warmup` untimed calls, then the median of `reps` (no L2 flush: attention at these
// shapes is compute-bound, and the old kernel's seconds-long calls leave nothing of the flush to matter).
Timing time_events(BenchContext& ctx, const std::function<void()>& op, int warmup, int reps) {
    for (int i = 0; i < warmup; ++i) op();
    cuda::Event start(ctx.stream().device()), end(ctx.stream().device());
    std::vector<double> us;
    for (int i = 0; i < reps; ++i) {
        start.record(ctx.stream());
        op();
        end.record(ctx.stream());
        end.synchronize();
        us.push_back(1000.0 * static_cast<double>(cuda::Event::elapsed_ms(start, end)));
    }
    std::sort(us.begin(), us.end());
    return Timing{.median_us = us[us.size() / 2], .min_us = us.front(), .max_us = us.back(), .reps = reps};
}

// Causal attention, one sequence of `seq` tokens, bf16, through both paths of cuda::attention: "cudnn_sdpa" (the
// caller's mask promise, as models/mla.cc sets it: kernels/cuda/attention_cudnn.h) and "cuda_core" (no promise: the
// CUDA-core flash kernel). The MLA shapes use models/mla.cc's layout: q [T, H, 192], k [T, H, 192] contiguous, v a
// view of kv_b's output [T, H, 128 + 128] (columns 128..255 of each head). DeepSeek-V3's MHA form is 128 heads.
// The same shapes' torch baseline: tools/sdpa_baseline.py (PERF.md: cuDNN SDPA through F.scaled_dot_product_attention).
void run_attention_bench(BenchContext& ctx) {
    std::mt19937 rng(/*seed=*/43);
    struct A {
        const char* name;
        int64_t heads, kv_heads, seq, d_qk, d_v;
        bool mla_layout;
        bool ragged;  // described as two sequences (the second empty): cuDNN's ragged flavour, cudnn_sdpa only
    };
    const A kShapes[] = {{"mha_d128", 32, 32, 4096, 128, 128, false, false},
                         {"mla_mha_192_128", 16, 16, 4096, 192, 128, true, false},
                         {"dsv3_mha_h128", 128, 128, 4096, 192, 128, true, false},
                         {"dsv3_mha_h128", 128, 128, 16384, 192, 128, true, false},
                         {"dsv3_mha_h128_ragged", 128, 128, 4096, 192, 128, true, true},
                         {"dsv3_mha_h128_ragged", 128, 128, 16384, 192, 128, true, true}};
    for (const A& s : kShapes) {
        const Tensor q = random_bf16_tiled({s.seq, s.heads, s.d_qk}, rng, ctx.alloc(), ctx.stream());
        const Tensor k = random_bf16_tiled({s.seq, s.kv_heads, s.d_qk}, rng, ctx.alloc(), ctx.stream());
        const int64_t v_row = s.mla_layout ? s.d_qk - 64 + s.d_v : s.d_v;  // kv_b's per-head row: nope + d_v
        const Tensor v_store = random_bf16_tiled({s.seq, s.kv_heads, v_row}, rng, ctx.alloc(), ctx.stream());
        const TensorView v = v_store.view().slice(2, v_row - s.d_v, v_row);
        const Tensor out = Tensor::empty({s.seq, s.heads, s.d_v}, DType::kBF16, ctx.alloc());
        const Tensor lse = Tensor::empty({s.seq, s.heads}, DType::kF32, ctx.alloc());
        const auto len = static_cast<int32_t>(s.seq);
        const Tensor cu =
            s.ragged ? dev_i32({0, len, len}, ctx.alloc(), ctx.stream()) : dev_i32({0, len}, ctx.alloc(), ctx.stream());
        const Tensor pos0 =
            s.ragged ? dev_i32({0, 0}, ctx.alloc(), ctx.stream()) : dev_i32({0}, ctx.alloc(), ctx.stream());
        kernels::AttentionParams p{.out = out,
                                   .lse = lse,
                                   .q = q,
                                   .k = k,
                                   .v = v,
                                   .cu_seqlens_q = cu,
                                   .cu_seqlens_k = cu,
                                   .q_pos0 = pos0,
                                   .k_pos0 = pos0,
                                   .scale = 0.08f,
                                   .causal = true,
                                   .max_seqlen_q = len,
                                   .max_seqlen_k = len};
        // Causal: half of the 2 * seq^2 * heads * (d_qk + d_v) FLOPs of the full score and value products.
        const double flops = static_cast<double>(s.seq) * static_cast<double>(s.seq) * static_cast<double>(s.heads) *
                             static_cast<double>(s.d_qk + s.d_v);
        // cudnn_sdpa (cuDNN's heuristic choice), cudnn_sdpa_autotuned (PENSTOCK_CUDNN_AUTOTUNE=1: the fastest engine
        // config, timed on the first call), cuda_core.
        // cudnn_sdpa_no_lse (variant 3): the heuristic choice with no lse output (a one-round prefill's call).
        // wgmma_bf16 / wgmma_bf16_no_lse (variants 4, 5): Penstock's bf16 wgmma kernel (attention_bf16_wgmma.h),
        // which cuda::attention tries first; the cuDNN variants run with PENSTOCK_ATTENTION_KERNEL=cudnn. Variant 6:
        // no lse, the warpgroups' ping-pong off (PENSTOCK_ATTN_PINGPONG=0); 7: no lse, PENSTOCK_ATTN_PROBE=mma (the
        // loads and products without the softmax: not attention, the pipeline's ceiling); 8: no lse,
        // PENSTOCK_ATTN_MAX_SLACK=0 (the softmax's exact running max).
        for (const int variant : {4, 5, 6, 7, 8, 0, 1, 3, 2}) {
            const bool wgmma = variant >= 4;
            if (variant == 6) setenv("PENSTOCK_ATTN_PINGPONG", "0", /*overwrite=*/1);
            if (variant == 7) setenv("PENSTOCK_ATTN_PROBE", "mma", /*overwrite=*/1);
            if (variant == 8) setenv("PENSTOCK_ATTN_MAX_SLACK", "0", /*overwrite=*/1);
            const bool cudnn = variant != 2 && !wgmma;
            if ((!cudnn || variant != 0) && s.ragged && !wgmma) continue;
            if (variant == 1) setenv("PENSTOCK_CUDNN_AUTOTUNE", "1", /*overwrite=*/1);
            if (cudnn) setenv("PENSTOCK_ATTENTION_KERNEL", "cudnn", /*overwrite=*/1);
            p.lse = variant == 3 || variant >= 5 ? TensorView{} : lse.view();
            p.mask_kind = cudnn || wgmma ? kernels::AttentionMaskKind::kCausalBottomRight
                                         : kernels::AttentionMaskKind::kGeneral;
            bool taken = false;
            if (wgmma) {
                taken = cuda::attention_bf16_wgmma_covers(p);
            } else if (cudnn) {
                taken = cuda::attention_cudnn(p, ctx.stream().handle());  // also builds the plan (outside timing)
                ctx.stream().synchronize();
            }
            // The CUDA-core kernel runs ~5 TFLOP/s: seconds per call at 16K, so few reps there.
            const bool slow = !taken && flops > 1e12;
            const Timing t = time_events(
                ctx, [&] { cuda::attention(p, ctx.stream().handle()); }, slow ? 1 : 5, slow ? 2 : (taken ? 30 : 5));
            nlohmann::json record = ctx.base_record("attention");
            record["shape"] = s.name;
            unsetenv("PENSTOCK_CUDNN_AUTOTUNE");
            unsetenv("PENSTOCK_ATTENTION_KERNEL");
            unsetenv("PENSTOCK_ATTN_PINGPONG");
            unsetenv("PENSTOCK_ATTN_PROBE");
            unsetenv("PENSTOCK_ATTN_MAX_SLACK");
            record["impl"] = wgmma          ? (variant == 4   ? "wgmma_bf16"
                                               : variant == 5 ? "wgmma_bf16_no_lse"
                                               : variant == 6 ? "wgmma_bf16_no_lse_no_pp"
                                               : variant == 7 ? "wgmma_bf16_no_lse_mma_probe"
                                                              : "wgmma_bf16_no_lse_slack0")
                             : !cudnn       ? "cuda_core"
                             : s.ragged     ? "cudnn_sdpa_ragged"
                             : variant == 1 ? "cudnn_sdpa_autotuned"
                             : variant == 3 ? "cudnn_sdpa_no_lse"
                                            : "cudnn_sdpa";
            record["cudnn_taken"] = taken;
            record["dtype"] = "bf16";
            record["heads"] = s.heads;
            record["seq"] = s.seq;
            record["d_qk"] = s.d_qk;
            record["d_v"] = s.d_v;
            record["time_ms"] = t.median_us * 1e-3;
            record["tflops"] = flops / (t.median_us * 1e-6) / 1e12;
            ctx.report(record, t,
                       static_cast<double>(s.seq * (s.heads * (s.d_qk + s.d_v) + s.kv_heads * (s.d_qk + s.d_v)) * 2));
        }
        if (s.ragged) continue;
        // FP8 (per-tensor e4m3 q / k / v and out, kernels/ops.h): cuDNN's FP8 SDPA (the heuristic's choice; FP8
        // graphs are never autotuned, attention_cudnn.cc), with and without the lse output; the timed call is
        // cuda::attention (its scale kernel included), the quantisation of the inputs (quantize_qkv_ms) is not.
        Tensor scales = Tensor::empty({4}, DType::kF32, ctx.alloc());
        auto scale = [&](int64_t i) { return scales.view().slice(0, i, i + 1); };
        const Tensor q8 = Tensor::empty({s.seq, s.heads, s.d_qk}, DType::kF8E4M3, ctx.alloc());
        const Tensor k8 = Tensor::empty({s.seq, s.kv_heads, s.d_qk}, DType::kF8E4M3, ctx.alloc());
        const Tensor v8 = Tensor::empty({s.seq, s.kv_heads, s.d_v}, DType::kF8E4M3, ctx.alloc());
        const Tensor o8 = Tensor::empty({s.seq, s.heads, s.d_v}, DType::kF8E4M3, ctx.alloc());
        const Timing tq = time_events(
            ctx,
            [&] {
                cuda::fp8_quantize_tensor({.out = q8, .scale = scale(0), .in = q}, ctx.stream().handle());
                cuda::fp8_quantize_tensor({.out = k8, .scale = scale(1), .in = k}, ctx.stream().handle());
                cuda::fp8_quantize_tensor({.out = v8, .scale = scale(2), .in = v}, ctx.stream().handle());
            },
            2, 10);
        {
            // The quantisers one by one: per tensor (fp8_quantize_tensor: amax, then the cast) against per row
            // (fp8_quantize_heads, block 1: q) and per 128-key block of the sequence with k read as two column pieces
            // ([k_nope ; k_pe], models/mla.cc's form: in_tail; the whole k when d_qk <= 64).
            const Tensor q_rows = Tensor::empty({s.seq, s.heads}, DType::kF32, ctx.alloc());
            const Tensor k_rows = Tensor::empty({s.seq, s.kv_heads}, DType::kF32, ctx.alloc());
            const Tensor cu_k =
                cuda::to_device(Tensor::from_i32({2}, std::vector<int32_t>{0, static_cast<int32_t>(s.seq)}),
                                ctx.alloc(), ctx.stream());
            const int64_t kn = s.d_qk > 64 ? s.d_qk - 64 : s.d_qk;
            const TensorView kv = k.view();
            const TensorView k_tail = kn < s.d_qk ? kv.slice(2, kn, s.d_qk) : TensorView{};
            auto one = [&](auto&& fn) { return time_events(ctx, fn, 2, 10).median_us * 1e-3; };
            void* const st = ctx.stream().handle();
            nlohmann::json record = ctx.base_record("fp8_quantize");
            record["shape"] = s.name;
            record["seq"] = s.seq;
            record["impl"] = "fp8_quantize";
            record["q_tensor_ms"] = one([&] { cuda::fp8_quantize_tensor({.out = q8, .scale = scale(0), .in = q}, st); });
            record["k_tensor_ms"] = one([&] { cuda::fp8_quantize_tensor({.out = k8, .scale = scale(1), .in = k}, st); });
            record["v_tensor_ms"] = one([&] { cuda::fp8_quantize_tensor({.out = v8, .scale = scale(2), .in = v}, st); });
            record["q_rows_ms"] = one([&] { cuda::fp8_quantize_heads({.out = q8, .scale = q_rows, .in = q}, st); });
            record["k_blocks_ms"] = one([&] {
                cuda::fp8_quantize_heads({.out = k8,
                                          .scale = k_rows,
                                          .in = kv.slice(2, 0, kn),
                                          .in_tail = k_tail,
                                          .cu_seqlens = cu_k,
                                          .block = kernels::kFp8AttnKeyBlock},
                                         st);
            });
            if (s.d_qk > 64) {
                // q's RoPE (the last 64 columns, interleaved, models/mla.cc's FP8 path): kernels::rope in place then
                // the per-row quantiser, against the quantiser's fused RoPE (the same bytes)
                std::vector<int32_t> pos(static_cast<size_t>(s.seq));
                for (int64_t i = 0; i < s.seq; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
                std::vector<float> freq(32);
                for (int i = 0; i < 32; ++i) freq[static_cast<size_t>(i)] = std::pow(10000.0f, -i / 32.0f);
                const Tensor pos_d = cuda::to_device(Tensor::from_i32({s.seq}, pos), ctx.alloc(), ctx.stream());
                const Tensor freq_d = cuda::to_device(Tensor::from_f32({32}, freq), ctx.alloc(), ctx.stream());
                const kernels::RopeParams rope{.x = q.view().slice(2, s.d_qk - 64, s.d_qk),
                                               .positions = pos_d,
                                               .inv_freq = freq_d,
                                               .attention_factor = 1.0f,
                                               .interleaved = true};
                record["q_rope_ms"] = one([&] { cuda::rope(rope, st); });
                record["q_rows_rope_ms"] = one([&] {
                    cuda::fp8_quantize_heads(
                        {.out = q8, .scale = q_rows, .in = q, .rope = rope, .rope_col = s.d_qk - 64}, st);
                });
            }
            ctx.report(record, Timing{}, 0.0);
        }
        kernels::AttentionParams f = p;
        f.mask_kind = kernels::AttentionMaskKind::kCausalBottomRight;
        f.equal_lengths = true;
        f.q = q8;
        f.k = k8;
        f.v = v8;
        f.out = o8;
        f.q_descale = scale(0);
        f.k_descale = scale(1);
        f.v_descale = scale(2);
        f.out_descale = scale(3);
        // Penstock's FP8 wgmma kernel (attention_fp8_wgmma.h; FP8 out with and without lse, bf16 out without), then
        // cuDNN's FP8 SDPA (PENSTOCK_FP8_ATTENTION_KERNEL=cudnn) in the same run.
        // (env: _pp PENSTOCK_FP8_ATTN_PINGPONG=1, the consumer warpgroups take turns issuing; _qsmem
        // PENSTOCK_FP8_ATTN_QREGS=0, q read from shared memory by every score product; _mma_probe
        // PENSTOCK_FP8_ATTN_PROBE=mma, the loads and products without the softmax: not attention, a ceiling; _expfmaN
        // PENSTOCK_FP8_ATTN_EXP_FMA=N, N of 16 column blocks' exponentials on the FMA pipes)
        struct V {
            const char* impl;
            bool lse, bf16_out, cudnn;
            const char* env;  // NAME=VALUE or null
        };
        const V kVariants[] = {
            {"wgmma_fp8", true, false, false, nullptr},
            {"wgmma_fp8_no_lse", false, false, false, nullptr},
            {"wgmma_fp8_bf16_out_no_lse", false, true, false, nullptr},
            {"wgmma_fp8_bf16_out_no_lse_pp", false, true, false, "PENSTOCK_FP8_ATTN_PINGPONG=1"},
            {"wgmma_fp8_bf16_out_no_lse_qsmem", false, true, false, "PENSTOCK_FP8_ATTN_QREGS=0"},
            {"wgmma_fp8_bf16_out_no_lse_mma_probe", false, true, false, "PENSTOCK_FP8_ATTN_PROBE=mma"},
            {"wgmma_fp8_bf16_out_no_lse_expfma0", false, true, false, "PENSTOCK_FP8_ATTN_EXP_FMA=0"},
            {"wgmma_fp8_bf16_out_no_lse_expfma4", false, true, false, "PENSTOCK_FP8_ATTN_EXP_FMA=4"},
            {"wgmma_fp8_bf16_out_no_lse_expfma6", false, true, false, "PENSTOCK_FP8_ATTN_EXP_FMA=6"},
            {"wgmma_fp8_bf16_out_no_lse_expfma8", false, true, false, "PENSTOCK_FP8_ATTN_EXP_FMA=8"},
            {"cudnn_fp8", true, false, true, nullptr},
            {"cudnn_fp8_no_lse", false, false, true, nullptr}};
        for (const V& var : kVariants) {
            f.lse = var.lse ? lse.view() : TensorView{};
            f.out = var.bf16_out ? out.view() : o8.view();
            if (var.cudnn) setenv("PENSTOCK_FP8_ATTENTION_KERNEL", "cudnn", /*overwrite=*/1);
            std::string env_name;
            if (var.env != nullptr) {
                const std::string e = var.env;
                env_name = e.substr(0, e.find('='));
                setenv(env_name.c_str(), e.substr(e.find('=') + 1).c_str(), /*overwrite=*/1);
            }
            cuda::attention(f, ctx.stream().handle());  // builds the plan outside timing
            ctx.stream().synchronize();
            const Timing t = time_events(
                ctx, [&] { cuda::attention(f, ctx.stream().handle()); }, 5, 30);
            unsetenv("PENSTOCK_FP8_ATTENTION_KERNEL");
            if (!env_name.empty()) unsetenv(env_name.c_str());
            nlohmann::json record = ctx.base_record("attention");
            record["shape"] = s.name;
            record["impl"] = var.impl;
            record["dtype"] = "fp8_e4m3";
            record["heads"] = s.heads;
            record["seq"] = s.seq;
            record["d_qk"] = s.d_qk;
            record["d_v"] = s.d_v;
            record["time_ms"] = t.median_us * 1e-3;
            record["tflops"] = flops / (t.median_us * 1e-6) / 1e12;
            record["quantize_qkv_ms"] = tq.median_us * 1e-3;
            ctx.report(record, t,
                       static_cast<double>(s.seq * (s.heads * (s.d_qk + s.d_v) + s.kv_heads * (s.d_qk + s.d_v))));
        }
    }
}

}  // namespace penstock::bench
