// MoE grouped GEMM (bf16, fp32 accumulation) at the real expert shapes: the device kernel (kernels/cuda/grouped_gemm.h,
// offsets read on the device) against the cuBLASLt path (host copy of the offsets + one GEMM per non-empty group) in
// the same run (every device kernel: kTmaCluster, kTma, kTmaK32, kWsCpAsync, kCpAsync). DeepSeek-V3 (256 experts,
// top-8: gate_up 7168 -> 4096, down 2048 -> 7168) and Kimi K3 (896 experts, top-16: gate_up 3584 -> 6144, down 3072 ->
// 3584) at T = 4096 and 16384 tokens; routing: each token picks top-k distinct experts with probabilities from
// log-normal popularity weights (sigma 0.5), so rows per expert ~ T top-k / E with realistic variance. Reports TFLOP/s
// of each, the ratio, and the max |device - cuBLASLt| over 64 sampled rows. PENSTOCK_GROUPED_OFFSETS_DIR=dir writes
// each case's offsets to dir/<model>_<T>.txt (tools/grouped_mm_baseline.py times torch._grouped_mm on exactly those).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/kernels/bench_harness.h"
#include "bench/kernels/moe_route.h"
#include "bench/layer/random_fill.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/grouped_gemm.h"

namespace penstock::bench {

namespace {

std::vector<float> read_row(const Tensor& t, int64_t row, const cuda::Stream& stream) {
    const Tensor h = cuda::to_host(t.view().slice(0, row, row + 1), stream);
    std::vector<float> f(static_cast<size_t>(h.numel()));
    for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_float(h.ptr<uint16_t>()[i]);
    return f;
}

}  // namespace

void run_grouped_gemm_bench(BenchContext& ctx) {
    struct Model {
        const char* name;
        int experts, topk;
        int64_t hidden, inter;  // gate_up: hidden -> 2 inter; down: inter -> hidden
    };
    const Model kModels[] = {{"deepseek_v3", 256, 8, 7168, 2048}, {"kimi_k3", 896, 16, 3584, 3072}};
    const int64_t kTokens[] = {4096, 16384};
    const char* off_dir = std::getenv("PENSTOCK_GROUPED_OFFSETS_DIR");
    // PENSTOCK_BENCH_GG_KERNELS=name[,name...]: only those device kernels (default: all);
    // PENSTOCK_BENCH_GG_CASE=model:proj:T: only that case (profiling runs).
    const char* only_env = std::getenv("PENSTOCK_BENCH_GG_KERNELS");
    std::string only;
    if (only_env != nullptr) {
        only.append(1, ',').append(only_env).append(1, ',');
    }
    const char* case_env = std::getenv("PENSTOCK_BENCH_GG_CASE");
    // PENSTOCK_BENCH_ENERGY_S=seconds: each kernel also runs back to back for that long (BenchContext::sustain) and
    // reports its sustained time and joules per call (the big shapes run at the power limit).
    const char* energy_env = std::getenv("PENSTOCK_BENCH_ENERGY_S");
    const double energy_s = energy_env != nullptr ? std::atof(energy_env) : 0.0;
    struct Kernel {
        const char* name;
        cuda::GroupedGemmVariant v;
    };
    const Kernel kKernels[] = {{"tma_cluster", cuda::GroupedGemmVariant::kTmaCluster},
                               {"tma", cuda::GroupedGemmVariant::kTma},
                               {"tma_k32", cuda::GroupedGemmVariant::kTmaK32},
                               {"ws_cp_async", cuda::GroupedGemmVariant::kWsCpAsync},
                               {"tma_dyn", cuda::GroupedGemmVariant::kTmaDyn},
                               {"cp_async", cuda::GroupedGemmVariant::kCpAsync},
                               {"tma_dyn_cluster", cuda::GroupedGemmVariant::kTmaDynCluster}};
    std::mt19937 rng(/*seed=*/7);
    uint64_t seed = 100;
    for (const Model& m : kModels) {
        struct Proj {
            const char* name;
            int64_t n, k;
        };
        const Proj projs[] = {{"gate_up", 2 * m.inter, m.hidden}, {"down", m.hidden, m.inter}};
        for (const Proj& pr : projs) {
            const Tensor b = Tensor::empty({m.experts, pr.n, pr.k}, DType::kBF16, ctx.alloc());
            fill_uniform(b.view(), seed++, 0.0f, 1.0f, ctx.stream().handle());
            for (int64_t T : kTokens) {
                std::string case_name(m.name);
                case_name.append(1, ':').append(pr.name).append(1, ':').append(std::to_string(T));
                if (case_env != nullptr && case_name != case_env) continue;
                std::mt19937 rrng(static_cast<uint32_t>(1000 + T + m.experts));
                const std::vector<int32_t> off = simulate_moe_routing(T, m.experts, m.topk, rrng);
                const int64_t rows = off.back();
                if (off_dir != nullptr && std::string(pr.name) == "gate_up") {
                    const std::string path = std::string(off_dir) + "/" + m.name + "_" + std::to_string(T) + ".txt";
                    if (FILE* f = std::fopen(path.c_str(), "w")) {
                        for (int32_t o : off) std::fprintf(f, "%d\n", o);
                        std::fclose(f);
                    }
                }
                const Tensor off_host = Tensor::from_i32({static_cast<int64_t>(off.size())}, off);
                const Tensor off_dev = cuda::to_device(off_host, ctx.alloc(), ctx.stream());
                const Tensor a = Tensor::empty({rows, pr.k}, DType::kBF16, ctx.alloc());
                fill_uniform(a.view(), seed++, 0.0f, 1.0f, ctx.stream().handle());
                const Tensor out_dev = Tensor::empty({rows, pr.n}, DType::kBF16, ctx.alloc());
                const Tensor out_lt = Tensor::empty({rows, pr.n}, DType::kBF16, ctx.alloc());
                const kernels::GroupedGemmParams pd{
                    .out = out_dev.view(), .a = a.view(), .b = b.view(), .offsets = off_dev.view()};
                const kernels::GroupedGemmParams pl{
                    .out = out_lt.view(), .a = a.view(), .b = b.view(), .offsets = off_dev.view()};
                ctx.stream().synchronize();
                const bool dev_ok = cuda::grouped_gemm_device_supported(pd);
                const Timing tl = ctx.time(
                    [&] { cuda::grouped_gemm_variant(pl, cuda::GroupedGemmVariant::kCublasLt, ctx.stream().handle()); },
                    2, 8);
                Sustained sl;
                if (energy_s > 0.0) {
                    sl = ctx.sustain(
                        [&] {
                            cuda::grouped_gemm_variant(pl, cuda::GroupedGemmVariant::kCublasLt, ctx.stream().handle());
                        },
                        energy_s, tl.median_us);
                }
                struct Run {
                    const char* name;
                    cuda::GroupedGemmVariant v;
                    Timing t{};
                    Sustained sus{};
                    double max_diff = -1.0, max_ref = 0.0;
                };
                std::vector<Run> runs;
                if (dev_ok) {
                    for (const Kernel& kn : kKernels) {
                        std::string key(1, ',');
                        key.append(kn.name).append(1, ',');
                        if (!only.empty() && only.find(key) == std::string::npos) continue;
                        runs.push_back({kn.name, kn.v});
                    }
                }
                for (Run& r : runs) {
                    r.t = ctx.time([&] { cuda::grouped_gemm_variant(pd, r.v, ctx.stream().handle()); }, 2, 8);
                    if (energy_s > 0.0) {
                        r.sus = ctx.sustain([&] { cuda::grouped_gemm_variant(pd, r.v, ctx.stream().handle()); },
                                            energy_s, r.t.median_us);
                    }
                    ctx.stream().synchronize();
                    r.max_diff = 0.0;
                    for (int i = 0; i < 64; ++i) {
                        const int64_t row = (rows - 1) * i / 63;
                        const std::vector<float> x = read_row(out_dev, row, ctx.stream()),
                                                 y = read_row(out_lt, row, ctx.stream());
                        for (size_t j = 0; j < x.size(); ++j) {
                            r.max_diff = std::max(r.max_diff, static_cast<double>(std::fabs(x[j] - y[j])));
                            r.max_ref = std::max(r.max_ref, static_cast<double>(std::fabs(y[j])));
                            if (std::isnan(x[j])) r.max_diff = INFINITY;
                        }
                    }
                    // The next kernel must write every element itself.
                    cuda::fill_bytes_async(out_dev.view(), 0xff, ctx.stream());
                }
                const double flops =
                    2.0 * static_cast<double>(rows) * static_cast<double>(pr.n) * static_cast<double>(pr.k);
                const double bytes = 2.0 * static_cast<double>(rows * pr.k + m.experts * pr.n * pr.k + rows * pr.n);
                int32_t min_rows = off[1] - off[0], max_rows = min_rows;
                for (size_t e = 0; e + 1 < off.size(); ++e) {
                    min_rows = std::min(min_rows, off[e + 1] - off[e]);
                    max_rows = std::max(max_rows, off[e + 1] - off[e]);
                }
                for (size_t v = 0; v <= runs.size(); ++v) {
                    const Timing& t = v == 0 ? tl : runs[v - 1].t;
                    nlohmann::json record = ctx.base_record("grouped_gemm");
                    record["variant"] = v == 0 ? "cublaslt" : runs[v - 1].name;
                    record["model"] = m.name;
                    record["proj"] = pr.name;
                    record["tokens"] = T;
                    record["experts"] = m.experts;
                    record["topk"] = m.topk;
                    record["rows"] = rows;
                    record["rows_per_expert_min_max"] = {min_rows, max_rows};
                    record["n"] = pr.n;
                    record["k"] = pr.k;
                    record["tflops"] = flops / (t.median_us * 1e-6) / 1e12;
                    if (energy_s > 0.0) {
                        const Sustained& su = v == 0 ? sl : runs[v - 1].sus;
                        BenchContext::add_sustained(record, su);
                        record["sustained_tflops"] = flops / (su.us_per_call * 1e-6) / 1e12;
                    }
                    if (v > 0 && std::string(runs[v - 1].name).find("cluster") != std::string::npos) {
                        record["cluster_ctas"] = cuda::grouped_gemm_tma_cluster_ctas();
                    }
                    if (v > 0) {
                        record["speedup_vs_cublaslt"] = tl.median_us / t.median_us;
                        record["max_abs_diff_vs_cublaslt_64rows"] = runs[v - 1].max_diff;
                        record["max_abs_ref_64rows"] = runs[v - 1].max_ref;
                    }
                    ctx.report(record, t, bytes);
                }
                // The fused gated form (gate_up only; names glu_dyn / glu_dyn_cluster in PENSTOCK_BENCH_GG_KERNELS):
                // kTmaDyn's and kTmaDynCluster's SiLU epilogue, timed, and the pair's 64 sampled rows compared with
                // the single-CTA kernel's (they must be equal).
                const bool glu_one = only.find(",glu_dyn,") != std::string::npos;
                const bool glu_pair = only.find(",glu_dyn_cluster,") != std::string::npos;
                if (dev_ok && std::string(pr.name) == "gate_up" && (glu_one || glu_pair)) {
                    const Tensor g1 = Tensor::empty({rows, m.inter}, DType::kBF16, ctx.alloc());
                    const Tensor g2 = Tensor::empty({rows, m.inter}, DType::kBF16, ctx.alloc());
                    int dev = 0, sms = 0;
                    cudaGetDevice(&dev);
                    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
                    auto glu = [&](const Tensor& out, bool pairs) {
                        cuda::grouped_gemm_glu_tma(
                            {.out = out.view(), .a = a.view(), .b = b.view(), .offsets = off_dev.view()},
                            cuda::GluEpilogue::kSilu, 1.0f, 1.0f, sms, ctx.stream().handle(), pairs);
                    };
                    for (int pairs = 0; pairs < 2; ++pairs) {
                        if (!(pairs ? glu_pair : glu_one)) continue;
                        const Tensor& out = pairs ? g2 : g1;
                        const Timing t = ctx.time([&] { glu(out, pairs != 0); }, 2, 8);
                        nlohmann::json record = ctx.base_record("grouped_gemm");
                        record["variant"] = pairs ? "glu_dyn_cluster" : "glu_dyn";
                        record["model"] = m.name;
                        record["proj"] = "gate_up_silu";
                        record["tokens"] = T;
                        record["rows"] = rows;
                        record["n"] = pr.n;
                        record["k"] = pr.k;
                        record["tflops"] = flops / (t.median_us * 1e-6) / 1e12;
                        record["speedup_vs_cublaslt_gemm"] = tl.median_us / t.median_us;
                        if (energy_s > 0.0) {
                            const Sustained su = ctx.sustain([&] { glu(out, pairs != 0); }, energy_s, t.median_us);
                            BenchContext::add_sustained(record, su);
                            record["sustained_tflops"] = flops / (su.us_per_call * 1e-6) / 1e12;
                        }
                        ctx.report(record, t,
                                   2.0 * static_cast<double>(rows * pr.k + m.experts * pr.n * pr.k + rows * m.inter));
                    }
                    if (glu_one && glu_pair) {
                        ctx.stream().synchronize();
                        int64_t differ = 0;
                        for (int i = 0; i < 64; ++i) {
                            const int64_t row = (rows - 1) * i / 63;
                            const std::vector<float> x = read_row(g1, row, ctx.stream()),
                                                     y = read_row(g2, row, ctx.stream());
                            for (size_t j = 0; j < x.size(); ++j) differ += !(x[j] == y[j]);
                        }
                        std::printf("[grouped] %s glu pair vs single: %lld of 64 x %lld sampled values differ\n",
                                    case_name.c_str(), static_cast<long long>(differ), static_cast<long long>(m.inter));
                    }
                }
            }
        }
    }
}

}  // namespace penstock::bench
