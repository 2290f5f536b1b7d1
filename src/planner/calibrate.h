// Calibration of the planner's class rates (cluster.h ClassRates) from Penstock's own layer benchmark: each
// `penstock_model_bench --breakdown` result is split into the classes of work (scheduler::OpClass) by its profiling
// scopes, and each class's rate is its cost-model FLOPs over its measured time, inside a whole layer (so the clock a
// power-limited layer keeps is in the rate). docs/design/planner.md "Calibration" lists the scope mapping.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "loader/model_config.h"
#include "planner/cluster.h"
#include "planner/planner.h"
#include "scheduler/cost_model.h"

namespace penstock::planner {

// One layer-benchmark result (penstock_model_bench --json with --breakdown).
struct BenchRun {
    std::string source;  // "file.json[i]"
    int64_t layer_begin = 0, layer_end = 0, tokens = 0, prefix = 0;
    bool fp8_weights = false;  // "fp8_weights": "native" (block-FP8 kernels); "dequant" / absent: bf16 weights
    bool fp8_attention = false, dsa_fp8_indexer = false, dsa_fp8_accumulate = false;
    double median_ms = 0;
    std::vector<std::pair<std::string, double>> scopes;  // breakdown: scope path -> median ms
};

// Every result in a bench JSON file (an array of results or one). A result without a breakdown is an error.
[[nodiscard]] Result<std::vector<BenchRun>> read_model_bench_json(const std::string& path);

// Where a leaf scope's time goes: an OpClass (the same values), the DSA top-k, or the memory-bound rest.
enum class ScopeClass : uint8_t { kGemm, kExperts, kAttention, kSparseAttention, kIndexer, kKda, kTopk, kMemory };
static_assert(static_cast<size_t>(ScopeClass::kKda) == static_cast<size_t>(scheduler::OpClass::kKda) &&
              static_cast<size_t>(ScopeClass::kTopk) == scheduler::kNumOpClasses);
ScopeClass classify_scope(const std::string& leaf_path);

// One run split into the classes: the FLOPs and measured ms of each OpClass, the top-k's pairs and ms, the
// memory-bound bytes and ms, and the routed rows per expert. The scopes' times are scaled to the run's wall median
// (the time outside the profiled scopes spread in proportion).
struct RunSplit {
    std::array<double, scheduler::kNumOpClasses> flops{}, ms{};
    double topk_pairs = 0, topk_ms = 0;
    double bytes = 0, memory_ms = 0;
    double rows_per_expert = 0;
    double leaves_ms = 0;  // the sum of the leaf scopes (the layer's profiled time)
};
[[nodiscard]] Result<RunSplit> split_run(const loader::ModelConfig& m, const BenchRun& run);

// The class rates over runs: each class's FLOPs over its time, summed over the runs of the same format (bf16 / FP8
// weights, FP8 attention, index-key format); the routed experts' half-rate rows from a least-squares fit when the runs
// have at least two different rows per expert.
[[nodiscard]] Result<ClassRates> calibrate(const std::vector<std::pair<loader::ModelConfig, BenchRun>>& runs,
                                           std::vector<RunSplit>* splits = nullptr);

// The run's formats as a planner workload, and the planner's time for it on one GPU of `c` (compute_ms).
Workload bench_workload(const BenchRun& run);
[[nodiscard]] Result<double> predict_run_ms(const loader::ModelConfig& m, const Cluster& c, const BenchRun& run);

// The `[rates]` table of a cluster file.
std::string rates_toml(const ClassRates& r);

}  // namespace penstock::planner
