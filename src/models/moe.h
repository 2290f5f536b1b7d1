// Feed-forward blocks: the dense SwiGLU MLP and the DeepSeek MoE (noaux_tc group-limited routing, routed experts,
// shared experts). See reference/MODELS.md §1.6.
#pragma once

#include <string>
#include <vector>

#include "loader/model_config.h"
#include "models/linear.h"

namespace penstock::models {

// y = down(silu(gate(x)) * up(x)).
class DenseMlp final {
public:
    // Reads `<prefix>.{gate_proj,up_proj,down_proj}.weight` with width `intermediate`.
    [[nodiscard]] static Result<DenseMlp> load(WeightReader& reader, const std::string& prefix, int64_t hidden,
                                               int64_t intermediate);
    // out[n, hidden] = mlp(x[n, hidden]); out may not alias x.
    void forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx) const;
    int64_t intermediate() const { return gate_.out_features(); }

private:
    Linear gate_, up_, down_;
};

class MoeBlock final {
public:
    // Reads `<prefix>.gate.weight`, `<prefix>.gate.e_score_correction_bias` (optional), per-expert
    // `<prefix>.experts.{e}.{gate,up,down}_proj.weight` (or the fused `<prefix>.experts.gate_up_proj` [E, 2I, H] /
    // `<prefix>.experts.down_proj` [E, H, I] layout) and `<prefix>.shared_experts.*` when n_shared_experts > 0.
    [[nodiscard]] static Result<MoeBlock> load(WeightReader& reader, const std::string& prefix,
                                               const loader::ModelConfig& config);
    // out[n, hidden] = sum_k w_k E_k(x) + shared(x); out may not alias x.
    void forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx) const;

private:
    struct Expert {
        Linear gate, up, down;
    };
    Linear router_;              // [n_experts, hidden]
    Tensor score_bias_;          // [n_experts] f32 or undefined
    std::vector<Expert> experts_;
    std::vector<DenseMlp> shared_;  // zero or one merged shared MLP
    int64_t top_k_ = 1;
    int n_group_ = 1;
    int topk_group_ = 1;
    float routed_scaling_factor_ = 1.0f;
    bool norm_topk_prob_ = true;
    kernels::MoeScoring scoring_ = kernels::MoeScoring::kSigmoid;
};

}  // namespace penstock::models
