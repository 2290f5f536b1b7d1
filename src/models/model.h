// The model interface every family implements, and the registry by Hugging Face `model_type`. A Model instance holds
// the weights of one layer range [begin, end) (a pipeline stage); stage 0 also embeds, the last stage also computes
// logits. Forward methods are const: all per-request state lives in the ModelCache the caller owns.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "kernels/ops.h"
#include "kv_cache/paged_cache.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/decision_pins.h"
#include "models/forward_batch.h"
#include "models/tensor_parallel.h"

namespace penstock::models {

// How the weights of a block-FP8 checkpoint (config quantization_config quant_method fp8: e4m3 + one f32
// `weight_scale_inv` per 128 x 128 block) are held (docs/design/models.md "FP8 weights"). `--fp8-weights`.
enum class Fp8Weights : uint8_t {
    kAuto,     // kNative on the CUDA backend when the config is block-FP8, else kDequant
    kNative,   // the projections and experts that run fp8_gemm / fp8_grouped_gemm keep e4m3 + scales
    kDequant,  // every weight dequantised on load into the matrix dtype (the CPU reference default)
};

// "auto" | "native" | "dequant" -> Fp8Weights; anything else InvalidArgument naming the option.
[[nodiscard]] Result<Fp8Weights> parse_fp8_weights(const std::string& text);
const char* fp8_weights_name(Fp8Weights mode);

enum class MlaForm : uint8_t {
    kMha,       // expand the cached latent through kv_b_proj in pieces, attend per head (prefill form)
    kAbsorbed,  // absorb W_UK / W_UV into q and the output: MQA over the (kv_lora + rope)-d latent
};

struct ModelOptions {
    MlaForm mla_form = MlaForm::kMha;
    // MHA form: at most this many prefix tokens are expanded at once, split across the batch's sequences.
    int64_t max_kv_chunk_capacity = 128 * 1024;
    // DSA (glm_moe_dsa, deepseek_v32): a forward whose longest KV (prefix + chunk) is <= dsa_dense_max_kv uses the
    // dense causal MLA of `mla_form`; beyond, the indexer's top-k and sparse absorbed MLA. -1 = index_topk (where the
    // two are equal: every row sees <= index_topk keys); 0 forces the sparse path (tests).
    int64_t dsa_dense_max_kv = -1;
    // DSA indexer logits [rows, L] f32 are computed in row slices of at most this many bytes. 0 = the backend
    // default: 256 MiB on the CPU (GPU: min(20% of the memory free outside the static pool, 30% of device memory)).
    int64_t dsa_logits_budget_bytes = 0;
    // DSA FP8 indexer (DeepSeek-V3.2 reference): Hadamard-rotated q and k quantised to e4m3 with one scale per row;
    // the index-K cache then holds 132 bytes per token per full layer. false: f32 keys (as transformers computes).
    bool dsa_fp8_indexer = false;
    // With dsa_fp8_indexer: the logits' per-head q.k may be summed inside the fp8 tensor-core instruction (Hopper's
    // reduced-precision fp8 accumulation, ~1e-4 relative; the numerics of DeepSeek-V3.2's fp8 indexer kernels) at
    // twice the exact path's rate (kernels::DsaIndexerLogitsParams::fp8_accumulate). Opt-in: a top-k boundary can
    // move between keys whose logits differ by less than that. No effect on the CPU (exact) or without the FP8 indexer.
    bool dsa_fp8_accumulate = false;
    // FP8 attention for the MLA MHA form (opt-in): q quantised to e4m3 with a dynamic scale per row and head, k per
    // head and block of 128 keys, v per tensor (kernels::fp8_quantize_heads / fp8_quantize_tensor), the attention in
    // FP8 (CUDA: Penstock's FP8 kernel, probabilities in e4m3) straight into the activation dtype. Taken when every
    // sequence's keys fit one expansion round (cached prefixes included) outside context parallelism; otherwise the
    // attention stays in the activation dtype. Lossy (kernels/ops.h AttentionParams): a few percent relative error
    // on the attention output, more on the logits of a small random-weight model (tests/models/deepseek_v3_test.cc).
    bool fp8_attention = false;
    // With fp8_attention before an FP8 o_proj (no output gate, v_head_dim 128): the attention's epilogue writes
    // o_proj's e4m3 input rows and their per-head block scales itself (kernels::AttentionParams::out_scale), bit for
    // bit the bf16 output followed by o_proj's activation quantisation, which it replaces. false: that unfused pair
    // (the A/B and the test of the equality, tests/models/fp8_weights_test.cc).
    bool fp8_attention_rows = true;
    // Families with per-request recurrent state (KDA): at most this many requests hold state at once (the cache
    // allocates min(n_pages, max_state_slots) slots).
    int64_t max_state_slots = 256;
    // Where the weights and caches live and the context used to place them (its device, allocator and stream).
    // Default: the host. Every family runs on either device.
    kernels::Context placement{};
    // Activations, KV cache and matrix weights on the placement device: kF32, or kBF16 (CUDA only; norms, router
    // bias, RoPE tables, attention LSE and routing weights stay fp32; router logits and lm_head output are fp32).
    DType dtype = DType::kF32;
    // FP8 checkpoints: native e4m3 + block scales or dequantised on load (resolve_fp8_weights below).
    Fp8Weights fp8_weights = Fp8Weights::kAuto;
    // Tensor / expert parallelism of this rank's stage (models/tensor_parallel.h): the tp group and ep size.
    TensorParallel tp{};
    // `--load-format dummy` (non-zero): every weight is generated with seeded random values at the config's
    // dimensions instead of read (models/weights.h WeightReader); pair it with loader::Checkpoint::none().
    uint64_t dummy_weights_seed = 0;
    // Context parallelism (SPEC §4, interleave split): the cp group, null = one rank. Set by the runner.
    parallel::Communicator* cp = nullptr;
    // Test / diagnostic: records, compares or pins the MoE expert and DSA top-k choices (models/decision_pins.h);
    // not owned, must outlive the model; null = off. One process, no tp / cp (the hooks see every row of the batch).
    DecisionPins* decisions = nullptr;
};

// Per-request state of a family (KV pages, index-K pages, recurrent state): created by the model for its layer range.
class ModelCache {
public:
    virtual ~ModelCache() = default;
    // Admission of request `request_id`'s per-request state that is not paged (KDA recurrent + conv state): fresh
    // (zeroed) state, all or nothing; ResourceExhausted when full. A request already admitted keeps its state.
    [[nodiscard]] virtual Status admit(int64_t request_id) { return ok_status(); }
    // Frees what admit() took (no-op for unknown ids).
    virtual void release(int64_t request_id) {}
    // Requests currently holding admitted state (0 for families without any): tests check for leaks with it.
    virtual int64_t n_admitted() const { return 0; }
    // The cache's paged KV buffers in a fixed order (every layer's latent rows, then a DSA stage's index keys and
    // their scales), for disaggregated KV transfer: the same model and formats list the same buffers on both ends.
    virtual std::vector<kv_cache::PagedBuffer> paged_buffers() const { return {}; }
    // Whether requests also keep state outside the pages (KDA's recurrent state): pages alone do not carry it.
    virtual bool has_request_state() const { return false; }
    // Disaggregation of that state: storage for every state slot from now on (stable addresses), the per-slot buffers
    // in a fixed order (page = state slot: each KDA layer's recurrent then conv state), and a request's slot.
    virtual void reserve_state_storage() {}
    virtual std::vector<kv_cache::PagedBuffer> state_buffers() const { return {}; }
    virtual std::optional<int32_t> state_slot(int64_t request_id) const { return std::nullopt; }
};

class Model {
public:
    virtual ~Model() = default;

    virtual const loader::ModelConfig& config() const = 0;
    virtual loader::LayerRange layer_range() const = 0;
    bool is_first_stage() const { return layer_range().begin == 0; }
    bool is_last_stage() const { return layer_range().end == config().num_hidden_layers; }

    // A cache for this model's layers with n_pages pages of kv_cache::kPageSize tokens.
    virtual std::unique_ptr<ModelCache> create_cache(int64_t n_pages) const = 0;

    // First stage: act->hidden = embeddings of the batch tokens.
    virtual void embed(const BatchLayout& layout, Activations* act, const kernels::Context& ctx) const = 0;
    // Runs every layer of the range on act in place, reading and writing the batch's cache pages.
    virtual void forward_layers(const ForwardBatch& batch, const BatchLayout& layout, Activations* act,
                                ModelCache* cache, const kernels::Context& ctx) const = 0;
    // Last stage: final norm + lm_head on layout.logit_rows -> [n_logit_rows, vocab] f32.
    // Kimi K3 Attention Residuals: bank rows completed before `layer` (rows [0, n) of Activations::bank are valid
    // when a stage starts at `layer`). 0 for families without a bank.
    virtual int64_t bank_rows_before(int64_t layer) const { return 0; }
    // Columns of Activations::dsa_topk this stage hands to the next stage for `batch` (the next stage starts at a DSA
    // `shared` indexer layer and the batch takes the sparse path); 0 = nothing to carry.
    virtual int64_t topk_cols_after(const ForwardBatch& batch) const { return 0; }
    virtual Tensor compute_logits(const BatchLayout& layout, const Activations& act,
                                  const kernels::Context& ctx) const = 0;
};

// Loads a model of the checkpoint's model_type for layers `range` (only their tensors are read).
// Unsupported model types return Unimplemented naming the type; missing tensors return NotFound naming the tensor.
[[nodiscard]] Result<std::unique_ptr<Model>> load_model(const loader::ModelConfig& config,
                                                        const loader::Checkpoint& checkpoint,
                                                        const loader::LayerRange& range, const ModelOptions& options,
                                                        loader::LoadStats* stats);

// The FP8 mode a load of `config` with `options` uses: kNative or kDequant (kAuto resolved: native on the CUDA
// placement when config.fp8 is set). A config without block-FP8 quantisation is kDequant (an explicit kNative there
// has no effect and is logged as such), except with dummy weights, where an explicit kNative generates block-FP8
// weights (a stand-in for a quantised checkpoint whose config does not declare it, e.g. Kimi K3's). A
// compressed-tensors config (Kimi K3's FP8 / MXFP4 release) resolves like a block-FP8 one: native re-encodes its MXFP4
// weights as 128 x 128 block FP8 on load, and its per-channel FP8 weights are dequantised in both modes. Error: kNative
// with a weight_block_size other than [128, 128] (the FP8 kernels' block).
[[nodiscard]] Result<Fp8Weights> resolve_fp8_weights(const loader::ModelConfig& config, const ModelOptions& options);

// Options that only make sense together: InvalidArgument naming the command-line flags (dsa_fp8_accumulate without
// dsa_fp8_indexer). The CLIs (forward, serve, the model bench) call it before loading anything.
[[nodiscard]] Status check_option_combinations(const ModelOptions& options);

// True when load_model knows `model_type`.
bool is_supported_model_type(const std::string& model_type);

}  // namespace penstock::models
