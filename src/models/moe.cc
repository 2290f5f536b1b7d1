// Dense MLP and MoE forward (CPU reference composition over kernels/ops.h).
#include "models/moe.h"

#include <array>
#include <cstring>
#include <optional>

#include "kernels/fork.h"
#include "kernels/ops_kda.h"
#include "kernels/profile.h"

namespace penstock::models {

void glu_apply(const GluActivation& act, const TensorView& gate, const TensorView& up, const kernels::Context& ctx) {
    switch (act.kind) {
        case GluActivation::Kind::kSilu:
            kernels::silu_mul({.out = gate, .gate = gate, .up = up}, ctx);
            return;
        case GluActivation::Kind::kSitu:  // f32 or bf16 in place (bf16: f32 math, rounded once)
            kernels::situ_mul(
                {.out = gate, .gate = gate, .up = up, .beta = act.situ_beta, .linear_beta = act.situ_linear_beta}, ctx);
            return;
    }
}

Result<DenseMlp> DenseMlp::load(WeightReader& r, const std::string& prefix, int64_t hidden, int64_t intermediate,
                                const GluActivation& act, const TensorParallel& tp) {
    DenseMlp m;
    m.act_ = act;
    m.tp_ = tp;
    const IndexRange cols = tp.shard(intermediate);
    constexpr WeightFormat kFp8 = WeightFormat::kFp8Native;
    PENSTOCK_ASSIGN_OR_RETURN(m.gate_,
                              take_linear_rows(r, prefix + ".gate_proj", intermediate, hidden, cols, false, kFp8));
    PENSTOCK_ASSIGN_OR_RETURN(m.up_, take_linear_rows(r, prefix + ".up_proj", intermediate, hidden, cols, false, kFp8));
    PENSTOCK_ASSIGN_OR_RETURN(
        m.down_, take_linear_cols(r, prefix + ".down_proj", hidden, intermediate, cols, false, false, kFp8));
    return m;
}

void DenseMlp::forward_partial(const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                               const Fp8Activations* xq) const {
    if (gate_.out_features() == 0) {  // more tp ranks than intermediate columns: this rank adds nothing
        kernels::fill({.out = out, .value = 0.0f}, ctx);
        return;
    }
    std::optional<kernels::ProfileScope> scope(std::in_place, ctx, "gate_up");
    // FP8 gate and up read the same x: one quantisation for both (bit-identical to one each), or the caller's.
    std::optional<Fp8Activations> own;
    if (fp8_gate_up()) xq = fp8_rows_of(x, xq, own, ctx);
    Tensor g = linear_new(gate_, x, ctx, xq);
    Tensor u = linear_new(up_, x, ctx, xq);
    scope.emplace(ctx, "act");
    glu_apply(act_, g, u, ctx);
    scope.emplace(ctx, "down");
    linear_forward(down_, g, out, ctx);
}

void DenseMlp::forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                       const Fp8Activations* xq) const {
    forward_partial(x, out, ctx, xq);
    tp_.all_reduce_sum(out, ctx);
}

Result<MoeBlock> MoeBlock::load(WeightReader& r, const std::string& prefix, const loader::ModelConfig& c,
                                const MoeLoadOptions& o, const TensorParallel& tp) {
    MoeBlock m;
    m.act_ = o.act;
    m.tp_ = tp;
    PENSTOCK_RETURN_IF_ERROR(tp.validate());
    const int64_t hidden = c.hidden_size;
    const int64_t h = o.latent_dim > 0 ? o.latent_dim : hidden;  // the width the routed experts read and write
    const int64_t n_experts = c.n_routed_experts;
    const int64_t inter = c.moe_intermediate_size;
    PENSTOCK_ASSIGN_OR_RETURN(m.router_, take_linear(r, prefix + ".gate", n_experts, hidden, false));
    if (o.latent_dim > 0) {
        // e4m3 when the checkpoint stores them so (native FP8 weights): latent_down then reads x's FP8 rows, shared
        // with an FP8 shared expert; latent_up the rows its norm quantises.
        constexpr WeightFormat kFp8 = WeightFormat::kFp8Native;
        PENSTOCK_ASSIGN_OR_RETURN(m.latent_down_,
                                  take_linear(r, prefix + ".routed_expert_down_proj", h, hidden, false, kFp8));
        PENSTOCK_ASSIGN_OR_RETURN(m.latent_up_,
                                  take_linear(r, prefix + ".routed_expert_up_proj", hidden, h, false, kFp8));
        if (o.latent_norm) {
            PENSTOCK_ASSIGN_OR_RETURN(m.latent_norm_, r.take(prefix + ".routed_expert_norm.weight", {h}));
        }
        m.latent_norm_eps_ = o.latent_norm_eps;
    }
    PENSTOCK_ASSIGN_OR_RETURN(m.score_bias_, r.take_optional(prefix + ".gate.e_score_correction_bias", {n_experts}));
    // This rank's routed experts stacked for grouped GEMMs: gate_up [E_local, 2I_local, h] (gate rows first),
    // down [E_local, h, I_local].
    m.n_experts_ = n_experts;
    m.local_experts_ = tp.expert_shard(n_experts);
    const IndexRange cols = tp.moe_inter_shard(inter);
    const int64_t n_local = m.local_experts_.size();
    const int64_t il = cols.size();
    m.inter_ = il;
    m.up_offset_ = il;
    const bool fp8 = r.fp8_native(prefix + ".experts.0." + o.expert_gate + ".weight");
    const bool dense_host = !r.dummy() && !fp8;
    Tensor gate_up = dense_host ? Tensor::empty({n_local, 2 * il, h}, DType::kF32) : Tensor();
    Tensor down = dense_host ? Tensor::empty({n_local, h, il}, DType::kF32) : Tensor();
    const kernels::Context host{};
    auto put = [&](const TensorView& src, const TensorView& dst) { kernels::copy({.out = dst, .in = src}, host); };
    // --load-format dummy: this rank's experts and columns only, generated on the placement device.
    if (fp8) {
        PENSTOCK_RETURN_IF_ERROR(m.load_experts_fp8(r, prefix, o, inter, h, cols));
    } else if (r.dummy()) {
        PENSTOCK_ASSIGN_OR_RETURN(m.experts_gate_up_, r.take(prefix + ".experts.local_gate_up", {n_local, 2 * il, h}));
        PENSTOCK_ASSIGN_OR_RETURN(m.experts_down_, r.take(prefix + ".experts.local_down", {n_local, h, il}));
    } else if (r.contains(prefix + ".experts.gate_up_proj")) {
        PENSTOCK_ASSIGN_OR_RETURN(Tensor gu, r.take_host(prefix + ".experts.gate_up_proj", {n_experts, 2 * inter, h}));
        PENSTOCK_ASSIGN_OR_RETURN(Tensor dn, r.take_host(prefix + ".experts.down_proj", {n_experts, h, inter}));
        const TensorView gu_local = gu.view().slice(0, m.local_experts_.begin, m.local_experts_.end);
        put(gu_local.slice(1, cols.begin, cols.end), gate_up.view().slice(1, 0, il));
        put(gu_local.slice(1, inter + cols.begin, inter + cols.end), gate_up.view().slice(1, il, 2 * il));
        put(dn.view().slice(0, m.local_experts_.begin, m.local_experts_.end).slice(2, cols.begin, cols.end), down);
    } else {
        for (int64_t e = 0; e < n_experts; ++e) {
            const std::string p = prefix + ".experts." + std::to_string(e) + ".";
            PENSTOCK_ASSIGN_OR_RETURN(Tensor g, r.take_host(p + o.expert_gate + ".weight", {inter, h}));
            PENSTOCK_ASSIGN_OR_RETURN(Tensor u, r.take_host(p + o.expert_up + ".weight", {inter, h}));
            PENSTOCK_ASSIGN_OR_RETURN(Tensor dn, r.take_host(p + o.expert_down + ".weight", {h, inter}));
            if (e < m.local_experts_.begin || e >= m.local_experts_.end) continue;  // another ep rank's expert
            const int64_t le = e - m.local_experts_.begin;
            put(g.view().slice(0, cols.begin, cols.end), gate_up.view().select(0, le).slice(0, 0, il));
            put(u.view().slice(0, cols.begin, cols.end), gate_up.view().select(0, le).slice(0, il, 2 * il));
            put(dn.view().slice(1, cols.begin, cols.end), down.view().select(0, le));
        }
    }
    if (dense_host) {
        m.experts_gate_up_ = r.place(std::move(gate_up));
        m.experts_down_ = r.place(std::move(down));
    }
    if (c.n_shared_experts > 0) {
        PENSTOCK_ASSIGN_OR_RETURN(DenseMlp shared, DenseMlp::load(r, prefix + ".shared_experts", hidden,
                                                                  inter * c.n_shared_experts, o.act, tp));
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

Status MoeBlock::load_experts_fp8(WeightReader& r, const std::string& prefix, const MoeLoadOptions& o, int64_t inter,
                                  int64_t width, IndexRange cols) {
    constexpr int64_t kB = kernels::kFp8Block;
    if (cols.begin % kB != 0 || (cols.end % kB != 0 && cols.end != inter)) {
        return invalid_argument(prefix + ": FP8 experts: this rank's intermediate columns [" +
                                std::to_string(cols.begin) + ", " + std::to_string(cols.end) + ") of " +
                                std::to_string(inter) +
                                " cut the 128-wide scale blocks (FP8 weights are sliced in whole blocks: "
                                "moe_intermediate_size / (tp / ep) must be a multiple of 128); choose another --tp / "
                                "--ep or use --fp8-weights dequant");
    }
    const int64_t n_local = local_experts_.size();
    const int64_t il = inter_;
    const int64_t ib = (il + kB - 1) / kB;
    const int64_t hb = (width + kB - 1) / kB;
    up_offset_ = ib * kB;
    if (r.dummy()) {  // this rank's experts only, generated on the placement device
        PENSTOCK_ASSIGN_OR_RETURN(Fp8Tensor gu,
                                  r.take_fp8(prefix + ".experts.local_gate_up", {n_local, 2 * up_offset_, width}));
        PENSTOCK_ASSIGN_OR_RETURN(Fp8Tensor dn, r.take_fp8(prefix + ".experts.local_down", {n_local, width, il}));
        experts_gate_up_ = std::move(gu.weight);
        experts_gate_up_scale_ = std::move(gu.scale);
        experts_down_ = std::move(dn.weight);
        experts_down_scale_ = std::move(dn.scale);
        return ok_status();
    }
    Tensor gu = Tensor::zeros({n_local, 2 * up_offset_, width}, DType::kF8E4M3);
    Tensor gus = Tensor::zeros({n_local, 2 * ib, hb}, DType::kF32);
    Tensor dn = Tensor::empty({n_local, width, il}, DType::kF8E4M3);
    Tensor dns = Tensor::empty({n_local, hb, ib}, DType::kF32);
    const int64_t sb = cols.begin / kB;  // first scale block of this rank's columns
    for (int64_t e = 0; e < n_experts_; ++e) {
        const std::string p = prefix + ".experts." + std::to_string(e) + ".";
        PENSTOCK_ASSIGN_OR_RETURN(Fp8Tensor g, r.take_host_fp8(p + o.expert_gate + ".weight", {inter, width}));
        PENSTOCK_ASSIGN_OR_RETURN(Fp8Tensor u, r.take_host_fp8(p + o.expert_up + ".weight", {inter, width}));
        PENSTOCK_ASSIGN_OR_RETURN(Fp8Tensor d, r.take_host_fp8(p + o.expert_down + ".weight", {width, inter}));
        if (e < local_experts_.begin || e >= local_experts_.end) continue;  // another ep rank's expert
        const int64_t le = e - local_experts_.begin;
        const TensorView gu_e = gu.view().select(0, le), gus_e = gus.view().select(0, le);
        host_copy_into(gu_e.slice(0, 0, il), g.weight.view().slice(0, cols.begin, cols.end));
        host_copy_into(gus_e.slice(0, 0, ib), g.scale.view().slice(0, sb, sb + ib));
        host_copy_into(gu_e.slice(0, up_offset_, up_offset_ + il), u.weight.view().slice(0, cols.begin, cols.end));
        host_copy_into(gus_e.slice(0, ib, 2 * ib), u.scale.view().slice(0, sb, sb + ib));
        host_copy_into(dn.view().select(0, le), d.weight.view().slice(1, cols.begin, cols.end));
        host_copy_into(dns.view().select(0, le), d.scale.view().slice(1, sb, sb + ib));
    }
    experts_gate_up_ = r.place_f32(std::move(gu));
    experts_gate_up_scale_ = r.place_f32(std::move(gus));
    experts_down_ = r.place_f32(std::move(dn));
    experts_down_scale_ = r.place_f32(std::move(dns));
    return ok_status();
}

namespace {

// out = the grouped expert GEMM of rows a with weights w (dense grouped_gemm), or, for FP8 experts (w_scale
// defined), fp8_act_quant of a then fp8_grouped_gemm.
void expert_gemm(const TensorView& out, const TensorView& a, const Tensor& w, const Tensor& w_scale,
                 const TensorView& offsets, const kernels::Context& ctx) {
    if (!w_scale.defined()) {
        kernels::grouped_gemm({.out = out, .a = a, .b = w, .offsets = offsets}, ctx);
        return;
    }
    std::optional<kernels::ProfileScope> scope(std::in_place, ctx, "act_quant");
    const Fp8Activations q = fp8_quantize_rows(a, ctx);
    scope.reset();
    kernels::fp8_grouped_gemm(
        {.out = out, .a = q.data, .a_scale = q.scale, .b = w, .b_scale = w_scale, .offsets = offsets}, ctx);
}

}  // namespace

void MoeBlock::forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                       const DecisionSite& site, const Fp8Activations* xq) const {
    const int64_t n = x.size(0);
    const bool latent = latent_down_.weight.defined();
    // x's FP8 rows for the FP8 readers of x (routed experts on x itself, an FP8 latent_down, an FP8 shared expert):
    // the caller's (a norm that quantised its output, bit-identical), else quantised here once for all of them.
    std::optional<Fp8Activations> own_xq;
    const bool shared_fp8 = !shared_.empty() && shared_[0].fp8_gate_up();
    Tensor z;  // latent MoE: the experts' input
    if (latent) {
        const kernels::ProfileScope scope(ctx, "latent_down");
        if (latent_down_.fp8()) xq = fp8_rows_of(x, xq, own_xq, ctx);
        z = linear_new(latent_down_, x, ctx, latent_down_.fp8() ? xq : nullptr);
    }
    const TensorView expert_in = latent ? z.view() : x;
    const int64_t width = expert_in.size(1);

    // The shared expert reads only x (and its FP8 rows): it runs on a fork (kernels/fork.h), on CUDA a second stream,
    // beside the router, the alignment and the permutation, and is joined before the routed expert GEMMs.
    // Plain MoE: the shared expert writes out first and the routed experts' weighted sum accumulates onto it (one
    // pass over out fewer than zeroing it, then adding the shared output; the sum is rounded once). Latent MoE: its
    // output is added at the end.
    const bool shared_first = !latent && !shared_.empty();
    Tensor shared_out;  // latent MoE: the shared expert's output
    std::optional<kernels::Fork> shared_fork;
    if (!shared_.empty()) {
        if (shared_first && experts_gate_up_scale_.defined() && shared_fp8) xq = fp8_rows_of(x, xq, own_xq, ctx);
        const TensorView dst = shared_first ? out : (shared_out = scratch(ctx, {n, x.size(1)}, x.dtype)).view();
        shared_fork.emplace(ctx);
        const kernels::ProfileScope shared_scope(shared_fork->ctx(), "shared");
        shared_[0].forward_partial(x, dst, shared_fork->ctx(), shared_fp8 ? xq : nullptr);
    }

    // Router logits in fp32 whatever the activation dtype (transformers computes the router in fp32). The router is
    // replicated: every tp rank routes every token the same way.
    std::optional<kernels::ProfileScope> scope(std::in_place, ctx, "router");
    Tensor logits = scratch(ctx, {n, router_.out_features()});
    linear_forward(router_, x, logits, ctx);
    Tensor ids = scratch(ctx, {n, top_k_}, DType::kI32);
    Tensor weights = scratch(ctx, {n, top_k_});
    const kernels::MoeRoutingParams routing{.topk_ids = ids,
                                            .topk_weights = weights,
                                            .logits = logits,
                                            .bias = score_bias_.defined() ? score_bias_.view() : TensorView{},
                                            .n_group = n_group_,
                                            .topk_group = topk_group_,
                                            .routed_scaling_factor = routed_scaling_factor_,
                                            .norm_topk_prob = norm_topk_prob_,
                                            .scoring = scoring_};
    kernels::moe_routing(routing, ctx);
    if (site.pins != nullptr) site.pins->moe(site, routing, ctx);  // test / diagnostic hook (models/decision_pins.h)

    // Expert order over this rank's experts; pairs routed elsewhere (expert parallelism) are dropped by the align.
    scope.emplace(ctx, "align");
    const int64_t n_local = local_experts_.size();
    Tensor offsets = scratch(ctx, {n_local + 1}, DType::kI32);
    Tensor sorted = scratch(ctx, {n * top_k_}, DType::kI32);
    kernels::moe_align({.expert_offsets = offsets,
                        .sorted_pairs = sorted,
                        .topk_ids = ids,
                        .expert_begin = static_cast<int32_t>(local_experts_.begin)},
                       ctx);
    int64_t n_rows = n * top_k_;  // every (token, slot) pair when this rank holds every expert
    if (n_local != n_experts_) {
        // The local row count sizes the buffers below (a device-to-host read of one i32 on a GPU).
        Tensor count = Tensor::empty({1}, DType::kI32);
        kernels::transfer({.out = count, .in = offsets.view().slice(0, n_local, n_local + 1)}, ctx);
        n_rows = count.ptr<const int32_t>()[0];
    }
    Tensor zo;  // latent MoE: the weighted expert sum in the latent width
    const TensorView routed_out = latent ? (zo = scratch_filled(ctx, {n, width}, 0.0f, expert_in.dtype)).view() : out;
    if (!latent && shared_.empty()) kernels::fill({.out = out, .value = 0.0f}, ctx);
    if (n_rows > 0 && inter_ > 0) {
        // FP8 experts: every token row is quantised once (1 x 128 blocks, scales row-major) and the e4m3 rows and their
        // scales are permuted, instead of quantising each of its top_k copies; per-row quantisation makes the two
        // orders bit-identical.
        const bool fp8_in = experts_gate_up_scale_.defined();
        scope.emplace(ctx, "permute");
        Tensor permuted, permuted_scale;
        if (fp8_in) {
            const int64_t kb = (width + kernels::kFp8Block - 1) / kernels::kFp8Block;
            Tensor q, q_scale;
            {
                const kernels::ProfileScope quant(ctx, "act_quant");
                q_scale = scratch(ctx, {n, kb});
                if (xq != nullptr && !latent) {
                    // x's rows as quantised above or by the caller (their dense GEMMs' transposed scales), with a
                    // row-major copy of the scales for the row permutation.
                    q = xq->data;
                    kernels::copy({.out = q_scale, .in = xq->scale}, ctx);
                } else {
                    q = scratch(ctx, {n, width}, DType::kF8E4M3);
                    kernels::fp8_act_quant({.out = q, .scale = q_scale, .in = expert_in}, ctx);
                }
            }
            permuted = scratch(ctx, {n_rows, width}, DType::kF8E4M3);
            permuted_scale = scratch(ctx, {n_rows, kb});
            kernels::moe_permute({.out = permuted, .in = q, .sorted_pairs = sorted, .top_k = static_cast<int>(top_k_)},
                                 ctx);
            kernels::moe_permute(
                {.out = permuted_scale, .in = q_scale, .sorted_pairs = sorted, .top_k = static_cast<int>(top_k_)}, ctx);
        } else {
            permuted = scratch(ctx, {n_rows, width}, expert_in.dtype);
            kernels::moe_permute(
                {.out = permuted, .in = expert_in, .sorted_pairs = sorted, .top_k = static_cast<int>(top_k_)}, ctx);
        }
        // The shared expert overlaps the routing and the permutation only: beside the persistent expert GEMMs (one
        // CTA per SM, tiles in an L2-friendly order) it made the DeepSeek-V3 layer 0.4-0.7 ms slower
        // (docs/perf/2026-12-07-s56.md). Its output is read by the unpermute (plain MoE) or the final add (latent).
        if (shared_fork) shared_fork->join();
        // [gate ; up] = rows @ W_gate_up[e]^T per expert group, act(gate) * up in place, then the down projection.
        scope.emplace(ctx, "experts");
        Tensor expert_out = scratch(ctx, {n_rows, width}, expert_in.dtype);
        const kernels::GluKind glu_kind =
            act_.kind == GluActivation::Kind::kSilu ? kernels::GluKind::kSilu : kernels::GluKind::kSitu;
        // Plain (unquantised) experts: the gated activation rides on the gate/up GEMM (kernels::grouped_gemm_glu,
        // bit-exact with the GEMM + activation pair below; CUDA fuses it into the GEMM's epilogue).
        if (!fp8_in && !experts_gate_up_scale_.defined() && up_offset_ == inter_ &&
            experts_gate_up_.size(1) == 2 * inter_) {
            Tensor act = scratch(ctx, {n_rows, inter_}, expert_in.dtype);
            kernels::GroupedGluGemmParams glu{.out = act,
                                              .a = permuted,
                                              .b = experts_gate_up_,
                                              .offsets = offsets,
                                              .gate_up = {},
                                              .act = glu_kind,
                                              .situ_beta = act_.situ_beta,
                                              .situ_linear_beta = act_.situ_linear_beta};
            Tensor gate_up;  // the unfused form's [n_rows, 2 I] buffer, only where the backend writes it
            if (kernels::grouped_gemm_glu_needs_scratch(glu, ctx)) {
                gate_up = scratch(ctx, {n_rows, 2 * inter_}, expert_in.dtype);
                glu.gate_up = gate_up;
            }
            {
                const kernels::ProfileScope step(ctx, "gate_up_act");
                kernels::grouped_gemm_glu(glu, ctx);
            }
            {
                const kernels::ProfileScope step(ctx, "down");
                expert_gemm(expert_out, act, experts_down_, experts_down_scale_, offsets, ctx);
            }
        } else if (fp8_in && experts_down_scale_.defined() && up_offset_ == inter_ &&
                   experts_gate_up_.size(1) == 2 * inter_) {
            // FP8 experts: the gated activation and the down GEMM's input quantisation ride on the gate/up GEMM
            // (kernels::fp8_grouped_gemm_glu, bit-exact with GEMM + activation + fp8_act_quant; CUDA fuses all three
            // into the GEMM's epilogue). The quantised activations keep fp8_quantize_rows' scale layout.
            const Fp8Activations act = fp8_rows_scratch(n_rows, inter_, ctx);
            // gate_up first only describes the unfused form's [n_rows, 2 I] buffer (its dtype picks the form); the
            // buffer is allocated only where the backend writes it.
            kernels::Fp8GroupedGluGemmParams glu{
                .out = act.data,
                .out_scale = act.scale,
                .a = permuted,
                .a_scale = permuted_scale,
                .b = experts_gate_up_,
                .b_scale = experts_gate_up_scale_,
                .offsets = offsets,
                .gate_up = TensorView::contiguous(nullptr, expert_in.dtype, std::array<int64_t, 2>{n_rows, 2 * inter_},
                                                  permuted.view().device, permuted.view().device_index),
                .act = glu_kind,
                .situ_beta = act_.situ_beta,
                .situ_linear_beta = act_.situ_linear_beta};
            Tensor gate_up;
            if (kernels::fp8_grouped_gemm_glu_needs_scratch(glu, ctx)) {
                gate_up = scratch(ctx, {n_rows, 2 * inter_}, expert_in.dtype);
                glu.gate_up = gate_up;
            }
            {
                const kernels::ProfileScope step(ctx, "gate_up_act");
                kernels::fp8_grouped_gemm_glu(glu, ctx);
            }
            {
                const kernels::ProfileScope step(ctx, "down");
                kernels::fp8_grouped_gemm({.out = expert_out,
                                           .a = act.data,
                                           .a_scale = act.scale,
                                           .b = experts_down_,
                                           .b_scale = experts_down_scale_,
                                           .offsets = offsets},
                                          ctx);
            }
        } else {
            Tensor gate_up = scratch(ctx, {n_rows, experts_gate_up_.size(1)}, expert_in.dtype);
            const TensorView gate = gate_up.view().slice(1, 0, inter_);
            {
                const kernels::ProfileScope step(ctx, "gate_up");
                if (fp8_in) {
                    kernels::fp8_grouped_gemm({.out = gate_up,
                                               .a = permuted,
                                               .a_scale = permuted_scale,
                                               .b = experts_gate_up_,
                                               .b_scale = experts_gate_up_scale_,
                                               .offsets = offsets},
                                              ctx);
                } else {
                    expert_gemm(gate_up, permuted, experts_gate_up_, experts_gate_up_scale_, offsets, ctx);
                }
            }
            {
                const kernels::ProfileScope step(ctx, "act");
                glu_apply(act_, gate, gate_up.view().slice(1, up_offset_, up_offset_ + inter_), ctx);
            }
            {
                const kernels::ProfileScope step(ctx, "down");
                expert_gemm(expert_out, gate, experts_down_, experts_down_scale_, offsets, ctx);
            }
        }
        scope.emplace(ctx, "unpermute");
        kernels::moe_unpermute(
            {.out = routed_out, .expert_out = expert_out, .sorted_pairs = sorted, .topk_weights = weights}, ctx);
    }
    scope.reset();
    if (latent) {
        const kernels::ProfileScope latent_scope(ctx, "latent_up");
        // The latent norm is not linear: the routed sum is completed over the tp group first, then every rank has
        // the same latent output and tp rank 0 alone adds it to the sum below.
        tp_.all_reduce_sum(zo, ctx);
        // FP8 latent_up: the norm also writes its output's FP8 rows (bit-identical to quantising them after it).
        std::optional<Fp8Activations> zq;
        if (latent_up_.fp8() && latent_norm_.defined() && n > 0) zq = fp8_rows_scratch(n, width, ctx);
        if (latent_norm_.defined()) {
            kernels::rms_norm({.out = zo,
                               .in = zo,
                               .weight = latent_norm_,
                               .eps = latent_norm_eps_,
                               .quant_out = zq ? zq->data.view() : TensorView{},
                               .quant_scale = zq ? zq->scale : TensorView{}},
                              ctx);
        }
        linear_forward(latent_up_, zo, out, ctx, zq ? &*zq : nullptr);
        if (tp_.rank() != 0) kernels::fill({.out = out, .value = 0.0f}, ctx);
    }
    if (shared_fork) shared_fork->join();
    if (!shared_.empty() && !shared_first) {
        const kernels::ProfileScope shared_scope(ctx, "shared_add");
        kernels::add({.out = out, .a = out, .b = shared_out}, ctx);
    }
    tp_.all_reduce_sum(out, ctx);
}

Result<FeedForward> FeedForward::load(WeightReader& reader, const std::string& prefix,
                                      const loader::ModelConfig& config, bool is_moe, int64_t dense_width,
                                      const TensorParallel& tp) {
    FeedForward f;
    if (is_moe) {
        PENSTOCK_ASSIGN_OR_RETURN(MoeBlock moe, MoeBlock::load(reader, prefix, config, MoeLoadOptions{}, tp));
        f.moe_ = std::make_unique<MoeBlock>(std::move(moe));
    } else {
        PENSTOCK_ASSIGN_OR_RETURN(DenseMlp mlp,
                                  DenseMlp::load(reader, prefix, config.hidden_size, dense_width, GluActivation{}, tp));
        f.mlp_ = std::make_unique<DenseMlp>(std::move(mlp));
    }
    return f;
}

void FeedForward::forward(const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                          const DecisionSite& site, const Fp8Activations* xq) const {
    if (moe_) {
        moe_->forward(x, out, ctx, site, xq);
    } else {
        mlp_->forward(x, out, ctx, xq);
    }
}

bool FeedForward::fp8_input() const { return moe_ ? moe_->fp8_input() : mlp_->fp8_gate_up(); }

bool MoeBlock::fp8_input() const {
    return (experts_gate_up_scale_.defined() && !latent_down_.weight.defined()) || latent_down_.fp8() ||
           (!shared_.empty() && shared_[0].fp8_gate_up());
}

}  // namespace penstock::models
