// Feed-forward blocks: the dense SwiGLU MLP and the DeepSeek MoE (noaux_tc group-limited routing, routed experts,
// shared experts). See reference/MODELS.md §1.6.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loader/model_config.h"
#include "models/decision_pins.h"
#include "models/linear.h"

namespace penstock::models {

// The GLU activation act(gate) * up of an MLP or expert: SiLU (SwiGLU) or Kimi K3's SiTU (MODELS.md §3.5).
struct GluActivation {
    enum class Kind : uint8_t { kSilu, kSitu };
    Kind kind = Kind::kSilu;
    float situ_beta = 4.0f;          // activation_situ_beta
    float situ_linear_beta = 25.0f;  // activation_situ_linear_beta
};

// gate[n, d] = act(gate) * up, in place.
void glu_apply(const GluActivation& act, const TensorView& gate, const TensorView& up, const kernels::Context& ctx);

// y = down(act(gate(x)) * up(x)).
class DenseMlp final {
public:
    // Reads `<prefix>.{gate_proj,up_proj,down_proj}.weight` with width `intermediate`; with tensor parallelism this
    // rank keeps intermediate columns tp.shard(intermediate) (gate/up column-parallel, down row-parallel).
    [[nodiscard]] static Result<DenseMlp> load(WeightReader& reader, const std::string& prefix, int64_t hidden,
                                               int64_t intermediate, const GluActivation& act = GluActivation{},
                                               const TensorParallel& tp = TensorParallel{});
    // out[n, hidden] = mlp(x[n, hidden]), summed over the tp group; out may not alias x. xq as in forward_partial.
    void forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                 const Fp8Activations* xq = nullptr) const;
    // This rank's partial sum (no collective). xq: x already quantised by fp8_quantize_rows (FP8 gate / up read it
    // instead of quantising x again; bit-identical), or null.
    void forward_partial(const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                         const Fp8Activations* xq = nullptr) const;
    int64_t intermediate() const { return gate_.out_features(); }
    bool fp8_gate_up() const { return gate_.fp8() && up_.fp8(); }

private:
    Linear gate_, up_, down_;
    GluActivation act_;
    TensorParallel tp_;
};

// Per-family MoE loading options; the defaults are DeepSeek-V3's.
struct MoeLoadOptions {
    // Per-expert weight names `<prefix>.experts.{e}.<name>.weight`: DeepSeek gate_proj / up_proj / down_proj;
    // Kimi `block_sparse_moe` w1 / w3 / w2.
    std::string expert_gate = "gate_proj", expert_up = "up_proj", expert_down = "down_proj";
    GluActivation act;  // routed and shared experts
    // Kimi K3 latent MoE when > 0: routing reads x, the routed experts run on z = x @ W_down^T
    // (`<prefix>.routed_expert_down_proj` [latent_dim, hidden]; experts [inter, latent_dim] / [latent_dim, inter]), the
    // weighted sum is RMS-normalised by `<prefix>.routed_expert_norm` (latent_norm) and projected back by
    // `<prefix>.routed_expert_up_proj` [hidden, latent_dim]. Shared experts read x.
    int64_t latent_dim = 0;
    bool latent_norm = false;
    float latent_norm_eps = 1e-5f;
};

class MoeBlock final {
public:
    // Reads `<prefix>.gate.weight`, `<prefix>.gate.e_score_correction_bias` (optional), per-expert
    // `<prefix>.experts.{e}.{gate,up,down}_proj.weight` (names per `options`; or the fused
    // `<prefix>.experts.gate_up_proj` [E, 2I, H] / `<prefix>.experts.down_proj` [E, H, I] layout) and
    // `<prefix>.shared_experts.*` when n_shared_experts > 0. With tensor/expert parallelism this rank keeps the
    // experts tp.expert_shard(E) with intermediate columns tp.moe_inter_shard(I), and shared-expert columns
    // tp.shard(I_shared) (models/tensor_parallel.h).
    [[nodiscard]] static Result<MoeBlock> load(WeightReader& reader, const std::string& prefix,
                                               const loader::ModelConfig& config,
                                               const MoeLoadOptions& options = MoeLoadOptions{},
                                               const TensorParallel& tp = TensorParallel{});
    // out[n, hidden] = sum_k w_k E_k(x) + shared(x), summed over the tp group; out may not alias x. With site.pins
    // set, the routing passes through DecisionPins::moe (record / compare / pin) before the experts run. xq: x's
    // FP8 rows (fp8_rows_scratch layout, e.g. from the norm that made x), read by the FP8 routed experts that take x
    // itself, an FP8 latent_down and the FP8 shared expert instead of quantising x here (bit-identical); null:
    // quantised here if needed.
    void forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                 const DecisionSite& site = DecisionSite{}, const Fp8Activations* xq = nullptr) const;
    // True when forward() reads x in FP8 (FP8 routed experts on x itself, an FP8 latent projection, or an FP8 shared
    // expert): the caller may then hand it xq.
    bool fp8_input() const;

private:
    // Native FP8 experts (WeightReader::fp8_native): this rank's experts stacked as e4m3 with their block scales;
    // the gate rows at [0, inter_), the up rows at [up_offset_, up_offset_ + inter_) with up_offset_ = inter_ rounded
    // up to 128 (so a scale block never holds gate and up rows; the padding rows are zero).
    [[nodiscard]] Status load_experts_fp8(WeightReader& reader, const std::string& prefix, const MoeLoadOptions& o,
                                          int64_t inter, int64_t width, IndexRange cols);

    Linear router_;             // [n_experts, hidden]
    Tensor score_bias_;         // [n_experts] f32 or undefined
    int64_t n_experts_ = 0;     // all routed experts (the router's width)
    IndexRange local_experts_;  // the experts this rank computes
    int64_t inter_ = 0;         // this rank's intermediate columns per expert
    TensorParallel tp_;
    Tensor experts_gate_up_;  // [n_local, 2 * up_offset_, width]: per expert [gate ; up] rows (one grouped GEMM)
    Tensor experts_down_;     // [n_local, width, inter]
    // Native FP8 experts only (else undefined): the weights above are e4m3 and these their 128 x 128 block scales.
    Tensor experts_gate_up_scale_;  // [n_local, 2 * up_offset_ / 128, ceil(width / 128)] f32
    Tensor experts_down_scale_;     // [n_local, ceil(width / 128), ceil(inter / 128)] f32
    int64_t up_offset_ = 0;         // first up row of experts_gate_up_ (inter_; FP8: inter_ rounded up to 128)
    std::vector<DenseMlp> shared_;  // zero or one merged shared MLP
    GluActivation act_;
    Linear latent_down_, latent_up_;  // latent MoE only
    Tensor latent_norm_;              // [latent_dim] f32, latent MoE with latent_norm only
    float latent_norm_eps_ = 1e-5f;
    int64_t top_k_ = 1;
    int n_group_ = 1;
    int topk_group_ = 1;
    float routed_scaling_factor_ = 1.0f;
    bool norm_topk_prob_ = true;
    kernels::MoeScoring scoring_ = kernels::MoeScoring::kSigmoid;
};

// The feed-forward block of a decoder layer: the MoE on MoE layers, the dense MLP (width `dense_width`) elsewhere,
// both read from `<prefix>` with DeepSeek names.
class FeedForward final {
public:
    [[nodiscard]] static Result<FeedForward> load(WeightReader& reader, const std::string& prefix,
                                                  const loader::ModelConfig& config, bool is_moe, int64_t dense_width,
                                                  const TensorParallel& tp = TensorParallel{});
    // out[n, hidden] = ffn(x[n, hidden]); out may not alias x. `site` reaches the MoE's routing (MoeBlock::forward).
    void forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                 const DecisionSite& site = DecisionSite{}, const Fp8Activations* xq = nullptr) const;
    bool is_moe() const { return moe_ != nullptr; }
    // True when forward() reads x in FP8 and so takes xq (MoeBlock::fp8_input; the dense MLP: FP8 gate / up).
    bool fp8_input() const;

private:
    std::unique_ptr<MoeBlock> moe_;
    std::unique_ptr<DenseMlp> mlp_;
};

}  // namespace penstock::models
