// Dense MLP and MoE forward (CPU reference composition over kernels/ops.h).
#include "models/moe.h"

#include <cstring>

#include "kernels/ops_kda.h"

namespace penstock::models {

void glu_apply(const GluActivation& act, const TensorView& gate, const TensorView& up, const kernels::Context& ctx) {
    switch (act.kind) {
        case GluActivation::Kind::kSilu:
            kernels::silu_mul({.out = gate, .gate = gate, .up = up}, ctx);
            return;
        case GluActivation::Kind::kSitu:
            kernels::situ_mul(
                {.out = gate, .gate = gate, .up = up, .beta = act.situ_beta, .linear_beta = act.situ_linear_beta}, ctx);
            return;
    }
}

Result<DenseMlp> DenseMlp::load(WeightReader& r, const std::string& prefix, int64_t hidden, int64_t intermediate,
                                const GluActivation& act) {
    DenseMlp m;
    m.act_ = act;
    PENSTOCK_ASSIGN_OR_RETURN(m.gate_, take_linear(r, prefix + ".gate_proj", intermediate, hidden, false));
    PENSTOCK_ASSIGN_OR_RETURN(m.up_, take_linear(r, prefix + ".up_proj", intermediate, hidden, false));
    PENSTOCK_ASSIGN_OR_RETURN(m.down_, take_linear(r, prefix + ".down_proj", hidden, intermediate, false));
    return m;
}

void DenseMlp::forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx) const {
    Tensor g = linear_new(gate_, x, ctx);
    Tensor u = linear_new(up_, x, ctx);
    glu_apply(act_, g, u, ctx);
    linear_forward(down_, g, out, ctx);
}

namespace {

// Splits a fused [E, rows, cols] tensor into E [rows, cols] Linear weights starting at row `row0`.
Linear expert_slice(const Tensor& fused, int64_t e, int64_t row0, int64_t rows) {
    const int64_t cols = fused.size(2);
    Linear l;
    l.weight = Tensor::empty({rows, cols}, DType::kF32);
    std::memcpy(l.weight.ptr<float>(), fused.ptr<const float>() + (e * fused.size(1) + row0) * cols,
                static_cast<size_t>(rows * cols) * sizeof(float));
    return l;
}

}  // namespace

Result<MoeBlock> MoeBlock::load(WeightReader& r, const std::string& prefix, const loader::ModelConfig& c,
                                const MoeLoadOptions& o) {
    MoeBlock m;
    m.act_ = o.act;
    const int64_t hidden = c.hidden_size;
    const int64_t h = o.latent_dim > 0 ? o.latent_dim : hidden;  // the width the routed experts read and write
    const int64_t n_experts = c.n_routed_experts;
    const int64_t inter = c.moe_intermediate_size;
    PENSTOCK_ASSIGN_OR_RETURN(m.router_, take_linear(r, prefix + ".gate", n_experts, hidden, false));
    if (o.latent_dim > 0) {
        PENSTOCK_ASSIGN_OR_RETURN(m.latent_down_,
                                  take_linear(r, prefix + ".routed_expert_down_proj", h, hidden, false));
        PENSTOCK_ASSIGN_OR_RETURN(m.latent_up_, take_linear(r, prefix + ".routed_expert_up_proj", hidden, h, false));
        if (o.latent_norm) {
            PENSTOCK_ASSIGN_OR_RETURN(m.latent_norm_, r.take(prefix + ".routed_expert_norm.weight", {h}));
        }
        m.latent_norm_eps_ = o.latent_norm_eps;
    }
    PENSTOCK_ASSIGN_OR_RETURN(m.score_bias_, r.take_optional(prefix + ".gate.e_score_correction_bias", {n_experts}));
    if (r.contains(prefix + ".experts.gate_up_proj")) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor gate_up, r.take(prefix + ".experts.gate_up_proj", {n_experts, 2 * inter, h}));
        PENSTOCK_ASSIGN_OR_RETURN(Tensor down, r.take(prefix + ".experts.down_proj", {n_experts, h, inter}));
        for (int64_t e = 0; e < n_experts; ++e) {
            m.experts_.push_back(Expert{.gate = expert_slice(gate_up, e, 0, inter),
                                        .up = expert_slice(gate_up, e, inter, inter),
                                        .down = expert_slice(down, e, 0, h)});
        }
    } else {
        for (int64_t e = 0; e < n_experts; ++e) {
            const std::string p = prefix + ".experts." + std::to_string(e);
            Expert ex;
            PENSTOCK_ASSIGN_OR_RETURN(ex.gate, take_linear(r, p + "." + o.expert_gate, inter, h, false));
            PENSTOCK_ASSIGN_OR_RETURN(ex.up, take_linear(r, p + "." + o.expert_up, inter, h, false));
            PENSTOCK_ASSIGN_OR_RETURN(ex.down, take_linear(r, p + "." + o.expert_down, h, inter, false));
            m.experts_.push_back(std::move(ex));
        }
    }
    if (c.n_shared_experts > 0) {
        PENSTOCK_ASSIGN_OR_RETURN(
            DenseMlp shared, DenseMlp::load(r, prefix + ".shared_experts", hidden, inter * c.n_shared_experts, o.act));
        m.shared_.push_back(std::move(shared));
    }
    m.top_k_ = c.num_experts_per_tok;
    m.n_group_ = static_cast<int>(c.n_group);
    m.topk_group_ = static_cast<int>(c.topk_group);
    m.routed_scaling_factor_ = static_cast<float>(c.routed_scaling_factor);
    m.norm_topk_prob_ = c.norm_topk_prob;
    if (c.scoring_func == "softmax") {
        m.scoring_ = kernels::MoeScoring::kSoftmax;
    } else if (c.scoring_func != "sigmoid") {
        return unimplemented("MoE scoring_func '" + c.scoring_func + "' is not supported (sigmoid, softmax)");
    }
    return m;
}

void MoeBlock::forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx) const {
    const int64_t n = x.size(0);
    const auto n_experts = static_cast<int64_t>(experts_.size());
    const bool latent = latent_down_.weight.defined();
    Tensor z;  // latent MoE: the experts' input
    if (latent) z = linear_new(latent_down_, x, ctx);
    const TensorView expert_in = latent ? z.view() : x;
    const int64_t hidden = expert_in.size(1);

    Tensor logits = linear_new(router_, x, ctx);  // [n, n_experts] f32
    Tensor ids = Tensor::empty({n, top_k_}, DType::kI32);
    Tensor weights = Tensor::empty({n, top_k_}, DType::kF32);
    kernels::moe_routing({.topk_ids = ids,
                          .topk_weights = weights,
                          .logits = logits,
                          .bias = score_bias_.defined() ? score_bias_.view() : TensorView{},
                          .n_group = n_group_,
                          .topk_group = topk_group_,
                          .routed_scaling_factor = routed_scaling_factor_,
                          .norm_topk_prob = norm_topk_prob_,
                          .scoring = scoring_},
                         ctx);

    Tensor offsets = Tensor::empty({n_experts + 1}, DType::kI32);
    Tensor sorted = Tensor::empty({n * top_k_}, DType::kI32);
    kernels::moe_align({.expert_offsets = offsets, .sorted_pairs = sorted, .topk_ids = ids}, ctx);
    const int32_t* off = offsets.ptr<const int32_t>();
    const int64_t n_rows = off[n_experts];
    Tensor permuted = Tensor::empty({n_rows, hidden}, DType::kF32);
    kernels::moe_permute({.out = permuted, .in = expert_in, .sorted_pairs = sorted, .top_k = static_cast<int>(top_k_)},
                         ctx);

    Tensor expert_out = Tensor::empty({n_rows, hidden}, DType::kF32);
    for (int64_t e = 0; e < n_experts; ++e) {
        if (off[e + 1] == off[e]) continue;
        const Expert& ex = experts_[static_cast<size_t>(e)];
        const TensorView rows = permuted.view().slice(0, off[e], off[e + 1]);
        Tensor g = linear_new(ex.gate, rows, ctx);
        Tensor u = linear_new(ex.up, rows, ctx);
        glu_apply(act_, g, u, ctx);
        linear_forward(ex.down, g, expert_out.view().slice(0, off[e], off[e + 1]), ctx);
    }

    if (latent) {
        Tensor zo = Tensor::zeros({n, hidden}, DType::kF32);
        kernels::moe_unpermute({.out = zo, .expert_out = expert_out, .sorted_pairs = sorted, .topk_weights = weights},
                               ctx);
        if (latent_norm_.defined()) {
            kernels::rms_norm({.out = zo, .in = zo, .weight = latent_norm_, .eps = latent_norm_eps_}, ctx);
        }
        linear_forward(latent_up_, zo, out, ctx);
    } else {
        std::memset(out.data, 0, out.nbytes());
        kernels::moe_unpermute({.out = out, .expert_out = expert_out, .sorted_pairs = sorted, .topk_weights = weights},
                               ctx);
    }
    if (!shared_.empty()) {
        Tensor s = Tensor::empty({n, x.size(1)}, DType::kF32);
        shared_[0].forward(x, s, ctx);
        kernels::add({.out = out, .a = out, .b = s}, ctx);
    }
}

}  // namespace penstock::models
