// The planner's hardware description (SPEC §8): GPUs, their memory and the compute rates a whole layer reaches, and
// the links inside a node and between nodes, with measured collective points where they exist. A cluster is read from
// a TOML file or taken from a built-in profile; docs/design/planner.md has the format and where each number comes
// from.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace penstock::planner {

// A link class for NCCL collectives and point-to-point sends: bus bandwidth (nccl-tests' busbw: an all-reduce of B
// bytes over n ranks takes latency + 2 (n - 1) / n * B / busbw) and a per-operation latency.
struct Link {
    double busbw_gbps = 0;  // GB/s (1e9 bytes / s)
    double p2p_gbps = 0;    // GB/s of one send / recv (a pipeline boundary)
    double latency_us = 0;
};

// One measured all-reduce (nccl-tests all_reduce_perf): `ranks` GPUs, `bytes` per rank, `ms` per operation. Where a
// point exists for a TP group's size, its bus bandwidth replaces the link's.
struct AllReducePoint {
    int ranks = 0;
    double bytes = 0;
    double ms = 0;
    double busbw_gbps() const;
};

// The rates of the classes of work a layer runs (scheduler::OpClass), measured inside whole layers: the layer
// benchmark's --breakdown scopes over the cost model's FLOPs of each class (planner/calibrate.h derives them), and the
// memory-bound rest. TFLOP/s; 0 = not measured: that class runs at the cluster's layer rate.
struct ClassRates {
    double gemm = 0, gemm_fp8 = 0;        // dense linears with bf16 / block-FP8 weights
    double experts = 0, experts_fp8 = 0;  // routed experts at many rows per expert
    // Rows per expert at which the routed experts run at half their rate: rate(r) = experts · r / (r + half_rows)
    // (partial tiles and per-expert set-up weigh more as the rows per expert fall). 0: one rate.
    double experts_half_rows = 0, experts_fp8_half_rows = 0;
    double attention = 0, attention_fp8 = 0;  // MHA form (bf16; --fp8-attention with its quantisers)
    double sparse_attention = 0;              // DSA's sparse MLA
    double indexer_f32 = 0, indexer_fp8 = 0, indexer_fp8_accumulate = 0;  // DSA logits by index-key format
    double kda = 0;               // KDA's kernels (conv, gates, delta rule, gated norm) over their nominal FLOPs
    double topk_ps_per_pair = 0;  // DSA top-k: picoseconds per causal (query, key) pair scanned
    double copy_gbps = 0;         // effective GB/s of the memory-bound rest (norms, residual adds, RoPE, MoE permute)
    bool any() const;
};

struct Cluster {
    std::string name;
    std::string gpu;
    int nodes = 1;
    int gpus_per_node = 8;
    double memory_gib = 0;  // per GPU
    // The rates a whole decoder layer reaches (FLOPs of scheduler/cost_model.h over its time), not the datasheet's
    // peak: they carry the kernels' efficiency. bf16 for bf16 weights, fp8 for block-FP8 weights.
    double bf16_tflops = 0;
    double fp8_tflops = 0;
    // The GPU's dense datasheet peaks (TFLOP/s; 0: not given): the calibration report's share of peak per class.
    double peak_bf16_tflops = 0;
    double peak_fp8_tflops = 0;
    Link intra;  // GPUs of one node
    Link inter;  // GPUs of different nodes
    std::vector<AllReducePoint> all_reduce;
    ClassRates rates;                // where measured, each class of work at its own rate (planner.md "Compute")
    std::vector<std::string> notes;  // where the numbers come from, printed with the plan

    int world() const { return nodes * gpus_per_node; }
    // Time of one all-reduce of `bytes` per rank over `ranks` GPUs first_rank, first_rank + stride, ... (ms).
    double all_reduce_ms(double bytes, int ranks, int first_rank = 0, int stride = 1) const;
    // All-gather over the same kind of group: each GPU contributes bytes / ranks, all end with `bytes` (ms).
    double all_gather_ms(double bytes, int ranks, int first_rank = 0, int stride = 1) const;
    // One send of `bytes` from rank `from` to rank `to` (ms).
    double send_ms(double bytes, int from, int to) const;
    bool same_node(int a, int b) const { return a / gpus_per_node == b / gpus_per_node; }
};

// The built-in profiles: "h200x8" (one node of 8 H200 on NVLink; collective and layer rates measured by Penstock's
// benchmarks) and "rtx6000d-4x8" (the Deep-PP study's 4 nodes of 8 RTX 6000D on PCIe, 4 x 400G RoCE; SPEC §8's NCCL
// measurements). Names for the error message: builtin_cluster_names().
[[nodiscard]] Result<Cluster> builtin_cluster(const std::string& name);
std::string builtin_cluster_names();

// Reads a cluster TOML file (format: docs/design/planner.md). Every problem is one InvalidArgument naming the file
// and the key; unknown keys are errors.
[[nodiscard]] Result<Cluster> load_cluster(const std::string& path);
[[nodiscard]] Result<Cluster> parse_cluster(const std::string& toml_text, const std::string& source);

// A built-in profile's name, else a TOML file's path.
[[nodiscard]] Result<Cluster> cluster_from_arg(const std::string& name_or_path);

}  // namespace penstock::planner
