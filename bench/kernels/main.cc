// penstock_bench_kernels [--device N] [--warmup N] [--reps N]
//                        [--only
//                        copy|rms_norm|gemm|attention|mla|grouped|kda|fp8|fp8_quant|elementwise|dsa|wgmma_probe]:
// runs the per-op GPU benchmarks and prints one JSON line per config (grouped only when asked for: it allocates ~90 GB
// of expert weights; kda only when asked for: ~23 GB of f32 tensors at T = 65536; fp8 only when asked for: FP8 GEMMs
// beside bf16 at DeepSeek-V3 dims, ~23 GB of expert weights; dsa only when asked for: the GLM-5.3 indexer logits and
// top-k, ~50 GB of f32 logits at T = 65536; fp8_quant: fp8_act_quant alone after the copy ceiling; wgmma_probe only
// when asked for: the e4m3 wgmma issue patterns of the FP8 GEMMs without memory traffic). Exits 2 with a
// message when there is no usable GPU.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "bench/kernels/bench_harness.h"

namespace penstock::bench {
void run_grouped_gemm_bench(BenchContext& ctx);  // grouped_gemm_bench.cc
void run_kda_bench(BenchContext& ctx);           // kda_bench.cc
void run_fp8_gemm_bench(BenchContext& ctx);      // fp8_gemm_bench.cc
void run_fp8_act_quant_bench(BenchContext& ctx);  // fp8_gemm_bench.cc
void run_elementwise_bench(BenchContext& ctx);   // elementwise_bench.cc
void run_dsa_bench(BenchContext& ctx);           // dsa_bench.cc
void run_wgmma_probe_bench(BenchContext& ctx);   // wgmma_probe.cu
}  // namespace penstock::bench

namespace {

int usage(const char* argv0) {
    std::fprintf(stderr,
                 "usage: %s [--device N] [--warmup N] [--reps N]"
                 " [--only copy|rms_norm|gemm|attention|mla|grouped|kda|fp8|fp8_quant|elementwise|dsa|wgmma_probe]\n",
                 argv0);
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    penstock::bench::BenchOptions options;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (i + 1 >= argc) return usage(argv[0]);
        const char* value = argv[++i];
        if (arg == "--device") {
            options.device = std::atoi(value);
        } else if (arg == "--warmup") {
            options.warmup = std::atoi(value);
        } else if (arg == "--reps") {
            options.reps = std::atoi(value);
        } else if (arg == "--only") {
            options.only = value;
        } else {
            return usage(argv[0]);
        }
    }
    if (options.reps < 1 || options.warmup < 0) return usage(argv[0]);
    if (!options.only.empty() && options.only != "copy" && options.only != "rms_norm" && options.only != "gemm" &&
        options.only != "attention" && options.only != "mla" && options.only != "grouped" && options.only != "kda" &&
        options.only != "fp8" && options.only != "fp8_quant" && options.only != "elementwise" &&
        options.only != "dsa" && options.only != "wgmma_probe")
        return usage(argv[0]);

    auto props = penstock::cuda::device_properties(options.device);
    if (!props.ok()) {
        std::fprintf(stderr, "penstock_bench_kernels: %s\n", props.status().to_string().c_str());
        return 2;
    }
    penstock::bench::BenchContext ctx(options, std::move(props).value());
    if (options.only.empty() || options.only == "copy") penstock::bench::run_copy_bench(ctx);
    if (options.only.empty() || options.only == "rms_norm") penstock::bench::run_rms_norm_bench(ctx);
    if (options.only.empty() || options.only == "gemm") penstock::bench::run_gemm_bench(ctx);
    if (options.only.empty() || options.only == "attention") penstock::bench::run_attention_bench(ctx);
    if (options.only.empty() || options.only == "mla") penstock::bench::run_mla_bench(ctx);
    // Not part of the default run (it allocates ~90 GB of expert weights): --only grouped.
    if (options.only == "grouped") penstock::bench::run_grouped_gemm_bench(ctx);
    if (options.only == "kda") penstock::bench::run_kda_bench(ctx);
    // Also only when asked for (~23 GB of fp8 + bf16 expert weights): --only fp8.
    if (options.only == "fp8") penstock::bench::run_fp8_gemm_bench(ctx);
    if (options.only == "dsa") penstock::bench::run_dsa_bench(ctx);
    if (options.only == "wgmma_probe") penstock::bench::run_wgmma_probe_bench(ctx);
    if (options.only == "fp8_quant") {
        penstock::bench::run_copy_bench(ctx);
        penstock::bench::run_fp8_act_quant_bench(ctx);
    }
    // K3's bf16 SiTU / SiLU / sigmoid_gate / attn_res_mix after the copy ceiling of the same run (~13 GB).
    if (options.only == "elementwise") {
        penstock::bench::run_copy_bench(ctx);
        penstock::bench::run_elementwise_bench(ctx);
    }
    return 0;
}
