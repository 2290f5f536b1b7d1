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

// Copies host rows [row0, row0 + rows) of a [rows_total, cols] tensor into dst rows starting at dst_row0.
void copy_rows(const Tensor& src, int64_t row0, int64_t rows, Tensor* dst, int64_t dst_row0) {
    const int64_t cols = src.size(-1);
    std::memcpy(dst->ptr<float>() + dst_row0 * cols, src.ptr<const float>() + row0 * cols,
                static_cast<size_t>(rows * cols) * sizeof(float));
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
    // Routed experts stacked for grouped GEMMs: gate_up [E, 2I, h] (gate rows first), down [E, h, I].
    m.n_experts_ = n_experts;
    m.inter_ = inter;
    Tensor gate_up = Tensor::empty({n_experts, 2 * inter, h}, DType::kF32);
    Tensor down = Tensor::empty({n_experts, h, inter}, DType::kF32);
    if (r.contains(prefix + ".experts.gate_up_proj")) {
        PENSTOCK_ASSIGN_OR_RETURN(gate_up, r.take_host(prefix + ".experts.gate_up_proj", {n_experts, 2 * inter, h}));
        PENSTOCK_ASSIGN_OR_RETURN(down, r.take_host(prefix + ".experts.down_proj", {n_experts, h, inter}));
    } else {
        for (int64_t e = 0; e < n_experts; ++e) {
            const std::string p = prefix + ".experts." + std::to_string(e) + ".";
            PENSTOCK_ASSIGN_OR_RETURN(Tensor g, r.take_host(p + o.expert_gate + ".weight", {inter, h}));
            PENSTOCK_ASSIGN_OR_RETURN(Tensor u, r.take_host(p + o.expert_up + ".weight", {inter, h}));
            PENSTOCK_ASSIGN_OR_RETURN(Tensor dn, r.take_host(p + o.expert_down + ".weight", {h, inter}));
            copy_rows(g, 0, inter, &gate_up, e * 2 * inter);
            copy_rows(u, 0, inter, &gate_up, e * 2 * inter + inter);
            copy_rows(dn, 0, h, &down, e * h);
        }
    }
    m.experts_gate_up_ = r.place(std::move(gate_up));
    m.experts_down_ = r.place(std::move(down));
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
    const bool latent = latent_down_.weight.defined();
    Tensor z;  // latent MoE: the experts' input
    if (latent) z = linear_new(latent_down_, x, ctx);
    const TensorView expert_in = latent ? z.view() : x;
    const int64_t width = expert_in.size(1);

    // Router logits in fp32 whatever the activation dtype (transformers computes the router in fp32).
    Tensor logits = scratch(ctx, {n, router_.out_features()});
    linear_forward(router_, x, logits, ctx);
    Tensor ids = scratch(ctx, {n, top_k_}, DType::kI32);
    Tensor weights = scratch(ctx, {n, top_k_});
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

    // Every (token, slot) pair is routed, so the expert-ordered rows number n * top_k.
    const int64_t n_rows = n * top_k_;
    Tensor offsets = scratch(ctx, {n_experts_ + 1}, DType::kI32);
    Tensor sorted = scratch(ctx, {n_rows}, DType::kI32);
    kernels::moe_align({.expert_offsets = offsets, .sorted_pairs = sorted, .topk_ids = ids}, ctx);
    Tensor permuted = scratch(ctx, {n_rows, width}, expert_in.dtype);
    kernels::moe_permute({.out = permuted, .in = expert_in, .sorted_pairs = sorted, .top_k = static_cast<int>(top_k_)},
                         ctx);

    // [gate ; up] = rows @ W_gate_up[e]^T per expert group, act(gate) * up in place, then the down projection.
    Tensor gate_up = scratch(ctx, {n_rows, 2 * inter_}, expert_in.dtype);
    kernels::grouped_gemm({.out = gate_up, .a = permuted, .b = experts_gate_up_, .offsets = offsets}, ctx);
    const TensorView gate = gate_up.view().slice(1, 0, inter_);
    glu_apply(act_, gate, gate_up.view().slice(1, inter_, 2 * inter_), ctx);
    Tensor expert_out = scratch(ctx, {n_rows, width}, expert_in.dtype);
    kernels::grouped_gemm({.out = expert_out, .a = gate, .b = experts_down_, .offsets = offsets}, ctx);

    if (latent) {
        Tensor zo = scratch_filled(ctx, {n, width}, 0.0f, expert_in.dtype);
        kernels::moe_unpermute({.out = zo, .expert_out = expert_out, .sorted_pairs = sorted, .topk_weights = weights},
                               ctx);
        if (latent_norm_.defined()) {
            kernels::rms_norm({.out = zo, .in = zo, .weight = latent_norm_, .eps = latent_norm_eps_}, ctx);
        }
        linear_forward(latent_up_, zo, out, ctx);
    } else {
        kernels::fill({.out = out, .value = 0.0f}, ctx);
        kernels::moe_unpermute({.out = out, .expert_out = expert_out, .sorted_pairs = sorted, .topk_weights = weights},
                               ctx);
    }
    if (!shared_.empty()) {
        Tensor s = scratch(ctx, {n, x.size(1)}, x.dtype);
        shared_[0].forward(x, s, ctx);
        kernels::add({.out = out, .a = out, .b = s}, ctx);
    }
}

Result<FeedForward> FeedForward::load(WeightReader& reader, const std::string& prefix,
                                      const loader::ModelConfig& config, bool is_moe, int64_t dense_width) {
    FeedForward f;
    if (is_moe) {
        PENSTOCK_ASSIGN_OR_RETURN(MoeBlock moe, MoeBlock::load(reader, prefix, config));
        f.moe_ = std::make_unique<MoeBlock>(std::move(moe));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(DenseMlp mlp, DenseMlp::load(reader, prefix, config.hidden_size, dense_width));
        f.mlp_ = std::make_unique<DenseMlp>(std::move(mlp));
    }
    return f;
}

void FeedForward::forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx) const {
    if (moe_) {
        moe_->forward(x, out, ctx);
    } else {
        mlp_->forward(x, out, ctx);
    }
}

}  // namespace penstock::models
