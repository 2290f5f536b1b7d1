// Linear layers over the op interface: y = x W^T (+ b), W a torch Linear weight [out, in].
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "loader/model_config.h"
#include "models/forward_batch.h"
#include "models/tensor_parallel.h"
#include "models/weights.h"

namespace penstock::models {

struct Linear {
    Tensor weight;  // [out_features, in_features] f32 / bf16, or f8e4m3 when `scale` is defined
    Tensor
        scale;  // [ceil(out / 128), ceil(in / 128)] f32: an FP8 weight's weight_scale_inv (a multiplier); or undefined
    Tensor bias;  // [out_features] f32, or undefined
    int64_t out_features() const { return weight.size(0); }
    int64_t in_features() const { return weight.size(1); }
    bool fp8() const { return scale.defined(); }
};

// How take_linear*() read a weight. kDense: always dense (dequantised when stored as FP8): for weights the engine
// uses other than through linear_forward (MLA's kv_b in the absorbed form), and small ones. kFp8Native: e4m3 + block
// scales when the reader hands out native FP8 for it (WeightReader::fp8_native; tensor-parallel slices must keep
// whole 128-blocks), dense otherwise.
enum class WeightFormat : uint8_t { kDense, kFp8Native };

// Row-wise FP8 activations for the block-scaled GEMMs: e4m3 rows and one f32 scale per row and 128 columns, the
// scales in the transposed layout (stride(0) == 1, stride(1) == n_rows) that every fp8_gemm variant reads.
struct Fp8Activations {
    Tensor data;         // [n_rows, k] f8e4m3
    Tensor scale_store;  // [ceil(k / 128) * n_rows] f32, owns `scale`'s memory
    TensorView scale;    // [n_rows, ceil(k / 128)] f32 view, strides {1, n_rows}
};
// Uninitialised e4m3 rows [m, k] and their scales in the layout above, on ctx's device.
Fp8Activations fp8_rows_scratch(int64_t m, int64_t k, const kernels::Context& ctx);
// kernels::fp8_act_quant of x [n_rows, k] (f32 or bf16, rows may be strided) into new scratch on ctx's device.
Fp8Activations fp8_quantize_rows(const TensorView& x, const kernels::Context& ctx);
// x's FP8 rows for layers that share one quantisation: `xq` when the caller has them (e.g. from the norm that made
// x), else fp8_quantize_rows(x) into `own` (profiling scope "act_quant"); null for an empty x.
const Fp8Activations* fp8_rows_of(const TensorView& x, const Fp8Activations* xq, std::optional<Fp8Activations>& own,
                                  const kernels::Context& ctx);

// A temporary on ctx's device (uninitialised), and one filled with `value`.
Tensor scratch(const kernels::Context& ctx, const Shape& shape, DType dtype = DType::kF32);
Tensor scratch_filled(const kernels::Context& ctx, const Shape& shape, float value, DType dtype = DType::kF32);

// The token embedding and the logits head shared by every family: `model.embed_tokens` (first stage, and the last
// when tied), `model.norm` and `lm_head` (last stage). lm_head is vocab-parallel under tensor parallelism
// (models/tensor_parallel.h); the embedding is replicated.
struct EmbedHead {
    Tensor embed;          // [vocab, hidden] (first stage, or tied head)
    Tensor norm;           // [hidden] f32 (last stage)
    Tensor lm_head;        // this rank's vocabulary rows [head_rows.size(), hidden] (tied: `embed`, all rows)
    IndexRange head_rows;  // rows of lm_head this rank multiplies
    int64_t vocab = 0;
    float eps = 1e-6f;
    TensorParallel tp;

    [[nodiscard]] static Result<EmbedHead> load(WeightReader& reader, const loader::ModelConfig& config,
                                                bool first_stage, bool last_stage, const TensorParallel& tp);
    // [n_logit_rows, vocab] f32 = lm_head(RMSNorm(hidden[logit_rows])) on ctx's device; hidden: [n_tokens, hidden].
    Tensor logits(const BatchLayout& layout, const TensorView& hidden, const kernels::Context& ctx) const;
};

// Reads `<prefix>.weight` (and `<prefix>.bias` when has_bias) with the given shape.
[[nodiscard]] Result<Linear> take_linear(WeightReader& reader, const std::string& prefix, int64_t out_features,
                                         int64_t in_features, bool has_bias,
                                         WeightFormat format = WeightFormat::kDense);

// Column-parallel: output rows `rows` of `<prefix>.weight` [out_features, in_features] (and of the bias).
[[nodiscard]] Result<Linear> take_linear_rows(WeightReader& reader, const std::string& prefix, int64_t out_features,
                                              int64_t in_features, IndexRange rows, bool has_bias,
                                              WeightFormat format = WeightFormat::kDense);
// Row-parallel: input columns `cols` of `<prefix>.weight`; the bias is kept only when keep_bias (tp rank 0 adds it
// once to the sum) and read and dropped otherwise.
[[nodiscard]] Result<Linear> take_linear_cols(WeightReader& reader, const std::string& prefix, int64_t out_features,
                                              int64_t in_features, IndexRange cols, bool has_bias, bool keep_bias,
                                              WeightFormat format = WeightFormat::kDense);

// out[n, out_features] = x[n, in_features] @ W^T + b. Rows of x and out may be strided. An FP8 layer (fp8()) runs
// fp8_act_quant on x (per token and 128 columns, scope "act_quant") then fp8_gemm: fp32 accumulation, out (f32 or
// bf16) rounded once; the bias, if any, is added afterwards. `xq`, when given for an FP8 layer, is x already
// quantised by fp8_quantize_rows (layers that read the same x share one quantisation; the per-row quantiser makes the
// result bit-identical to quantising again). Ignored by dense layers.
void linear_forward(const Linear& layer, const TensorView& x, const TensorView& out, const kernels::Context& ctx,
                    const Fp8Activations* xq = nullptr);

// A new tensor on ctx's device [n_rows, out_features] = linear(x), in x's dtype (xq as in linear_forward).
Tensor linear_new(const Linear& layer, const TensorView& x, const kernels::Context& ctx,
                  const Fp8Activations* xq = nullptr);
// Like linear_new but the result is f32 whatever x's dtype (bf16 operands, fp32 accumulation, no bf16 rounding of
// the output): the input of the f32-only DSA / KDA ops. Identical to linear_new for f32 x.
Tensor linear_new_f32(const Linear& layer, const TensorView& x, const kernels::Context& ctx,
                      const Fp8Activations* xq = nullptr);
// x as f32 on ctx's device: x itself (aliased) when it already is f32, else a converted copy.
Tensor to_f32_scratch(const Tensor& x, const kernels::Context& ctx);

// The two steps around a decoder layer's blocks, under their profiling scopes (kernels/profile.h): out = RMSNorm(in)
// * weight ("norm"; out may alias in), and hidden += sub_out ("residual"). The norm takes the fusions of
// kernels::RmsNormParams: a defined `residual` is added to in first (in += residual, the residual_add of the block
// before, bit-identical), and a non-null xq also gets out's FP8 rows (fp8_rows_scratch layout, [n, dim]).
void block_rms_norm(const TensorView& weight, const TensorView& in, const TensorView& out, float eps,
                    const kernels::Context& ctx, const TensorView& residual = {}, const Fp8Activations* xq = nullptr);
void residual_add(const TensorView& hidden, const TensorView& sub_out, const kernels::Context& ctx);

// The norms of a stage's pre-norm decoder blocks with block_rms_norm's fusions. Each block reads
// out = RMSNorm(hidden) and writes sub_out, to be added to hidden: apply() folds that add into the next block's norm
// and finish() does it for the stage's last block. Norms whose output feeds FP8 projections also quantise it, into
// one buffer that the blocks share (each consumes it before the next norm). Bit-identical to residual_add +
// block_rms_norm + fp8_quantize_rows per block.
class BlockNorms {
public:
    BlockNorms(int64_t n_rows, int64_t dim, float eps, const kernels::Context& ctx)
        : n_rows_(n_rows), dim_(dim), eps_(eps), ctx_(ctx) {}
    // out = RMSNorm(hidden += the previous block's sub_out) * weight; returns out's FP8 rows when fp8_out (and there
    // are rows), else null.
    const Fp8Activations* apply(const TensorView& weight, const TensorView& hidden, const TensorView& sub_out,
                                const TensorView& out, bool fp8_out);
    // hidden += sub_out of the last block, if a block ran (callers do it inside the last layer's profiling scope).
    void finish(const TensorView& hidden, const TensorView& sub_out);
    // The shared FP8 rows buffer [n_rows, dim] when `want` (and there are rows), else null: for norms that cannot
    // take the residual add (Kimi's attention residuals) but quantise their output all the same.
    const Fp8Activations* fp8_rows(bool want);

private:
    int64_t n_rows_, dim_;
    float eps_;
    const kernels::Context& ctx_;
    bool pending_ = false;  // sub_out holds a block's output not yet added to hidden
    std::optional<Fp8Activations> xq_;
};

}  // namespace penstock::models
