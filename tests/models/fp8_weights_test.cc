// Native FP8 weights (models::ModelOptions::fp8_weights, docs/design/models.md "FP8 weights") on the CPU reference:
// an FP8 Linear is exactly fp8_act_quant + the dequantised GEMM; the tiny DeepSeek-style FP8 checkpoint runs with
// native weights within a stated bound of the dequantised run and of transformers' logits (the activation
// quantisation is the only extra rounding), and so does a GLM DSA checkpoint converted to FP8 (indexer weights
// dequantised on load), and so do Kimi Linear and a K3-shaped variant (KDA's low-rank gate projections dequantised on
// load, a full-rank output gate e4m3);
// tensor/expert-parallel slices keep whole 128-blocks and sum to the
// unsliced result; slices that cut a block are refused with a clear error; dummy FP8 weights are seeded, finite and
// scaled like the dense ones; the mode resolution (auto / native / dequant).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/reference.h"
#include "kernels/ops.h"
#include "kernels/profile.h"
#include "kernels/tolerance.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_convert.h"
#include "models/linear.h"
#include "models/model.h"
#include "models/moe.h"
#include "models/weights.h"
#include "parallel/communicator.h"
#include "runtime/model_runner.h"

namespace penstock {
namespace {

using models::Fp8Weights;

// Native FP8 vs dequantised weights on the tiny FP8 fixture (4 layers, random weights, logits O(1-10)): the only
// difference is the e4m3 rounding of every FP8 linear's input (4 significand bits: up to 2^-4 relative per element,
// DeepSeek-V3's act_quant; the tests below show each FP8 linear and MoE block is exactly that), carried through ~6
// quantised GEMMs per layer over 4 layers and the MoE routing they perturb. Measured over the 4 reference prompts
// (272 positions x 512 logits), both MLA forms: max |diff| 1.57, relative RMS 0.169 -- the size of the fixture's own
// weight quantisation effect (its README: FP8 vs bf16 logits differ by up to ~1.5). Bounds at ~1.5x the measurement.
constexpr double kFp8ActQuantLogitsMaxAbs = 2.5;
constexpr double kFp8ActQuantLogitsRelRms = 0.25;
// The same for the GLM DSA fixture converted to FP8 (6 layers; on prompts longer than index_topk = 16 the indexer's
// selection also moves with the rounded q latent): measured max |diff| 0.07 / 0.72 / 1.19 / 2.33 for the prompts of
// 1 / 7 / 64 / 200 tokens; bound at 1.5x.
constexpr double kFp8ActQuantLogitsMaxAbsDsa = 3.5;
// The same for the Kimi fixtures converted to FP8, where also every KDA layer's q / k / v and o_proj take rounded
// inputs (5-8 FP8 GEMMs per layer): measured max |diff| over the 4 prompts 0.91 / 0.85 / 1.82 / 1.36 (Kimi Linear,
// 8 layers) and 0.05 / 1.53 / 3.30 / 3.26 (the K3-shaped variant: 5 layers, AttnRes mixes of the rounded outputs,
// SiTU); bound at 1.5x the larger, argmax unchanged everywhere. With the K3 variant's full-rank output gate in e4m3
// too (session 23): 0.05 / 1.19 / 2.77 / 2.62, and its latent MoE projections too (session 24): 0.06 / 1.37 / 2.98 /
// 2.52 (Kimi Linear, no latent MoE: 0.91 / 0.85 / 1.82 / 1.29); the bound unchanged.
constexpr double kFp8ActQuantLogitsMaxAbsKimi = 5.0;
const std::string kFp8Fixture = std::string(PENSTOCK_FIXTURES_DIR) + "/deepseek_v3_tiny_fp8";

// One rank of a tp group without peers: all_reduce is the identity (tests sum the ranks' partial results themselves),
// other collectives are not used by the blocks under test and fail.
class LoneRank final : public parallel::Communicator {
public:
    LoneRank(int rank, int size) : rank_(rank), size_(size) {}
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    Device device() const override { return Device::kCPU; }
    std::string name() const override { return "lone:tp"; }
    Status all_reduce(const TensorView&, parallel::ReduceOp) override { return ok_status(); }
    Status all_gather(const TensorView&, const TensorView&) override { return unimplemented("lone rank"); }
    Status reduce_scatter(const TensorView&, const TensorView&, parallel::ReduceOp) override {
        return unimplemented("lone rank");
    }
    Status all_to_all(const TensorView&, const TensorView&) override { return unimplemented("lone rank"); }
    Status broadcast(const TensorView&, int) override { return unimplemented("lone rank"); }
    Status send(const TensorView&, int, int) override { return unimplemented("lone rank"); }
    Status recv(const TensorView&, int, int) override { return unimplemented("lone rank"); }
    Status barrier() override { return ok_status(); }
    Result<std::unique_ptr<parallel::PendingOp>> isend(const TensorView&, int, int) override {
        return unimplemented("lone rank");
    }
    Result<std::unique_ptr<parallel::PendingOp>> irecv(const TensorView&, int, int) override {
        return unimplemented("lone rank");
    }

private:
    int rank_, size_;
};

// A seeded e4m3 weight [n, k] (finite bytes, |q| <= 448) and positive block scales so that e4m3 * scale has
// magnitude ~1/sqrt(k).
void add_fp8_weight(loader::WeightMap* map, const std::string& name, int64_t n, int64_t k, std::mt19937* rng) {
    Tensor w = Tensor::empty({n, k}, DType::kF8E4M3);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int64_t i = 0; i < n * k; ++i) {
        int b = byte(*rng);
        while ((b & 0x7f) == 0x7f) b = byte(*rng);  // never the NaN patterns
        w.ptr<uint8_t>()[i] = static_cast<uint8_t>(b);
    }
    const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
    Tensor s = Tensor::empty({nb, kb}, DType::kF32);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    const float base = 1.0f / (200.0f * std::sqrt(static_cast<float>(k)));
    for (int64_t i = 0; i < nb * kb; ++i) s.ptr<float>()[i] = base * u(*rng);
    map->emplace(name, std::move(w));
    map->emplace(name + "_scale_inv", std::move(s));
}

Tensor random_f32(const Shape& shape, uint32_t seed, float scale = 1.0f) {
    Tensor t = Tensor::empty(shape, DType::kF32);
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = d(rng);
    return t;
}

// Fails unless |got - want| <= atol + rtol * |want| everywhere; reports the worst element.
void expect_close(const Tensor& got, const Tensor& want, const test::Tolerance& tol, const std::string& what) {
    ASSERT_EQ(got.view().shape_vec(), want.view().shape_vec()) << what;
    double worst = 0.0;
    int64_t at = -1;
    for (int64_t i = 0; i < got.numel(); ++i) {
        const double g = got.ptr<const float>()[i], w = want.ptr<const float>()[i];
        const double excess = std::abs(g - w) - (tol.atol + tol.rtol * std::abs(w));
        if (!(excess <= worst)) {  // NaN counts as a failure
            worst = std::isnan(excess) ? INFINITY : excess;
            at = i;
        }
    }
    EXPECT_EQ(at, -1) << what << ": element " << at << " got " << (at >= 0 ? got.ptr<const float>()[at] : 0.0f)
                      << " want " << (at >= 0 ? want.ptr<const float>()[at] : 0.0f) << " (atol " << tol.atol
                      << ", rtol " << tol.rtol << ")";
}

loader::ModelConfig moe_config(int64_t moe_inter) {
    const nlohmann::json j = {
        {"model_type", "deepseek_v3"},
        {"hidden_size", 128},
        {"intermediate_size", 256},
        {"moe_intermediate_size", moe_inter},
        {"n_routed_experts", 4},
        {"num_experts_per_tok", 2},
        {"n_shared_experts", 1},
        {"n_group", 1},
        {"topk_group", 1},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 4},
        {"vocab_size", 64},
        {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}}}};
    Result<loader::ModelConfig> c = loader::parse_model_config(j);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return *c;
}

// Router (f32), 4 FP8 experts and one FP8 shared expert of width `inter`, hidden 128, under "mlp".
loader::WeightMap moe_weights(int64_t inter) {
    loader::WeightMap m;
    std::mt19937 rng(20261201);
    m.emplace("mlp.gate.weight", random_f32({4, 128}, 7, 0.1f));
    for (int e = 0; e < 4; ++e) {
        const std::string p = "mlp.experts." + std::to_string(e) + ".";
        add_fp8_weight(&m, p + "gate_proj.weight", inter, 128, &rng);
        add_fp8_weight(&m, p + "up_proj.weight", inter, 128, &rng);
        add_fp8_weight(&m, p + "down_proj.weight", 128, inter, &rng);
    }
    add_fp8_weight(&m, "mlp.shared_experts.gate_proj.weight", inter, 128, &rng);
    add_fp8_weight(&m, "mlp.shared_experts.up_proj.weight", inter, 128, &rng);
    add_fp8_weight(&m, "mlp.shared_experts.down_proj.weight", 128, inter, &rng);
    return m;
}

constexpr models::Fp8ReadMode kNative{.native = true, .block_n = 128, .block_k = 128};

TEST(Fp8Weights, LinearIsActQuantThenTheDequantisedGemm) {
    // n and k not multiples of 128 (partial edge blocks), a bias, strided input rows.
    constexpr int64_t kN = 200, kK = 300, kM = 5;
    std::mt19937 rng(11);
    loader::WeightMap raw;
    add_fp8_weight(&raw, "proj.weight", kN, kK, &rng);
    raw.emplace("proj.bias", random_f32({kN}, 12, 0.1f));
    Result<Tensor> dense_w = loader::dequantize_fp8_blocks(
        raw.at("proj.weight").view(), raw.at("proj.weight_scale_inv").view(), 128, 128, DType::kF32);
    ASSERT_TRUE(dense_w.ok()) << dense_w.status().to_string();
    models::WeightReader reader(&raw, kernels::Context{}, DType::kF32, 0, kNative);
    Result<models::Linear> native =
        models::take_linear(reader, "proj", kN, kK, /*has_bias=*/true, models::WeightFormat::kFp8Native);
    ASSERT_TRUE(native.ok()) << native.status().to_string();
    ASSERT_TRUE(native->fp8());
    EXPECT_EQ(native->weight.dtype(), DType::kF8E4M3);
    EXPECT_EQ(native->scale.view().shape_vec(), (Shape{2, 3}));

    const Tensor x_store = random_f32({kM, kK + 8}, 13);
    const TensorView x = x_store.view().slice(1, 0, kK);  // rows strided
    Tensor out = Tensor::empty({kM, kN}, DType::kF32);
    models::linear_forward(*native, x, out, kernels::Context{});

    // The same computed densely on the dequantised quantised activations.
    Tensor q = Tensor::empty({kM, kK}, DType::kF8E4M3);
    Tensor qs = Tensor::empty({kM, 3}, DType::kF32);
    kernels::fp8_act_quant({.out = q, .scale = qs, .in = x}, kernels::Context{});
    Tensor xq = Tensor::empty({kM, kK}, DType::kF32);
    for (int64_t r = 0; r < kM; ++r) {
        for (int64_t c = 0; c < kK; ++c) {
            xq.ptr<float>()[r * kK + c] =
                e4m3_to_float(q.ptr<uint8_t>()[r * kK + c]) * qs.ptr<float>()[r * 3 + c / 128];
        }
    }
    const models::Linear dense{.weight = *dense_w, .scale = Tensor(), .bias = native->bias};
    Tensor want = Tensor::empty({kM, kN}, DType::kF32);
    models::linear_forward(dense, xq, want, kernels::Context{});
    expect_close(out, want, test::kF32Gemm, "native FP8 linear vs dense GEMM on act-quantised input");

    // Shared activations (models/mla.cc's q_a / kv_a, a dense MLP's gate / up): x quantised once and handed over is
    // bit-identical to the layer quantising it itself; a mismatched one is refused.
    const models::Fp8Activations shared = models::fp8_quantize_rows(x, kernels::Context{});
    Tensor again = Tensor::empty({kM, kN}, DType::kF32);
    models::linear_forward(*native, x, again, kernels::Context{}, &shared);
    EXPECT_EQ(std::memcmp(again.ptr<float>(), out.ptr<float>(), sizeof(float) * kM * kN), 0);
    const models::Fp8Activations other = models::fp8_quantize_rows(x.slice(0, 0, 2), kernels::Context{});
    EXPECT_DEATH(models::linear_forward(*native, x, again, kernels::Context{}, &other), "do not match x");
}

struct FixtureRun {
    std::vector<Tensor> logits;
    Status status;
};

// profiled: set to the profile scopes' paths of the run when non-null.
FixtureRun run_fixture(Fp8Weights mode, models::MlaForm form, const std::vector<std::vector<int32_t>>& prompts,
                       bool fp8_attention = false, std::vector<std::string>* profiled = nullptr) {
    FixtureRun run;
    Result<loader::ModelConfig> config = loader::load_model_config(kFp8Fixture);
    Result<loader::Checkpoint> ckpt = loader::Checkpoint::open(kFp8Fixture);
    if (!config.ok() || !ckpt.ok()) {
        run.status = config.ok() ? ckpt.status() : config.status();
        return run;
    }
    models::ModelOptions options{.mla_form = form};
    options.fp8_weights = mode;
    options.fp8_attention = fp8_attention;
    Result<std::unique_ptr<models::Model>> model =
        models::load_model(*config, *ckpt, {0, config->num_hidden_layers}, options, nullptr);
    if (!model.ok()) {
        run.status = model.status();
        return run;
    }
    runtime::ModelRunner runner(std::move(model).value(), runtime::RunnerOptions{.n_pages = 16, .n_threads = 2});
    kernels::Profiler profiler(Device::kCPU);
    if (profiled != nullptr) runner.set_profiler(&profiler);
    Result<std::vector<Tensor>> logits = runner.prefill_all_logits(prompts, /*chunk_size=*/0);
    runner.set_profiler(nullptr);
    if (profiled != nullptr) {
        profiled->clear();
        for (const kernels::ProfileTotal& t : kernels::aggregate(profiler.collect())) profiled->push_back(t.path);
    }
    if (!logits.ok()) {
        run.status = logits.status();
        return run;
    }
    run.logits = std::move(logits).value();
    return run;
}

TEST(Fp8Weights, NativeFixtureMatchesDequantisedWithinActQuantBound) {
    const std::vector<testing::ReferencePrompt> ref = testing::load_reference(kFp8Fixture);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : ref) prompts.push_back(p.ids);
    for (const models::MlaForm form : {models::MlaForm::kMha, models::MlaForm::kAbsorbed}) {
        SCOPED_TRACE(form == models::MlaForm::kMha ? "mha" : "absorbed");
        const FixtureRun native = run_fixture(Fp8Weights::kNative, form, prompts);
        const FixtureRun dequant = run_fixture(Fp8Weights::kDequant, form, prompts);
        ASSERT_TRUE(native.status.ok()) << native.status.to_string();
        ASSERT_TRUE(dequant.status.ok()) << dequant.status.to_string();
        ASSERT_EQ(native.logits.size(), ref.size());
        double worst_vs_dequant = 0.0, worst_vs_ref = 0.0;
        for (size_t i = 0; i < ref.size(); ++i) {
            // Argmax must agree wherever the top-2 gap exceeds what the bound lets two logits move.
            const double margin = 2.0 * kFp8ActQuantLogitsMaxAbs;
            const testing::LogitsComparison a = testing::compare_logits(native.logits[i], dequant.logits[i], margin);
            const testing::LogitsComparison b = testing::compare_logits(native.logits[i], ref[i].logits, margin);
            EXPECT_LE(a.max_abs_diff, kFp8ActQuantLogitsMaxAbs) << "prompt " << i << " vs dequant: " << a.describe();
            EXPECT_LE(b.max_abs_diff, kFp8ActQuantLogitsMaxAbs) << "prompt " << i << " vs reference: " << b.describe();
            EXPECT_EQ(a.argmax_mismatches, 0) << "prompt " << i << ": " << a.describe();
            EXPECT_EQ(b.argmax_mismatches, 0) << "prompt " << i << ": " << b.describe();
            worst_vs_dequant = std::max(worst_vs_dequant, a.max_abs_diff);
            worst_vs_ref = std::max(worst_vs_ref, b.max_abs_diff);
        }
        // Not bit-identical: the native path really ran (it quantised the activations).
        EXPECT_GT(worst_vs_dequant, 0.0);
        double diff2 = 0.0, ref2 = 0.0;
        for (size_t i = 0; i < ref.size(); ++i) {
            for (int64_t j = 0; j < ref[i].logits.numel(); ++j) {
                const double d = native.logits[i].ptr<const float>()[j] - dequant.logits[i].ptr<const float>()[j];
                diff2 += d * d;
                ref2 += static_cast<double>(dequant.logits[i].ptr<const float>()[j]) *
                        dequant.logits[i].ptr<const float>()[j];
            }
        }
        const double rel_rms = std::sqrt(diff2 / ref2);
        EXPECT_LE(rel_rms, kFp8ActQuantLogitsRelRms);
        std::printf("native FP8 vs dequant max |diff| %.4g (relative rms %.4g), vs reference %.4g\n", worst_vs_dequant,
                    rel_rms, worst_vs_ref);
    }
}

// FP8 attention on a native FP8 checkpoint computes K's nope columns and V of each key round by kv_b's e4m3 GEMM
// (one fp8_gemm over the latents, quantised per 128 columns: the kv_expand scope's act_quant), as DeepSeek-V3's own
// FP8 inference does; with dequantised weights it keeps the two batched dense GEMMs. The two runs differ by the
// activation quantisation of every FP8 linear, kv_b's included, so they stay within the bound that native and
// dequantised runs without FP8 attention keep (NativeFixtureMatchesDequantisedWithinActQuantBound).
TEST(Fp8Weights, Fp8AttentionTakesKvBInE4m3) {
    const std::vector<testing::ReferencePrompt> ref = testing::load_reference(kFp8Fixture);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : ref) prompts.push_back(p.ids);
    std::vector<std::string> native_paths, dequant_paths;
    const FixtureRun native = run_fixture(Fp8Weights::kNative, models::MlaForm::kMha, prompts, true, &native_paths);
    const FixtureRun dequant = run_fixture(Fp8Weights::kDequant, models::MlaForm::kMha, prompts, true, &dequant_paths);
    ASSERT_TRUE(native.status.ok()) << native.status.to_string();
    ASSERT_TRUE(dequant.status.ok()) << dequant.status.to_string();
    auto has = [](const std::vector<std::string>& paths, const std::string& p) {
        return std::find(paths.begin(), paths.end(), p) != paths.end();
    };
    const std::string kv_quant = "layer.attn.core.kv_expand.act_quant";
    EXPECT_TRUE(has(native_paths, kv_quant)) << "kv_b's e4m3 GEMM should quantise the latents";
    EXPECT_FALSE(has(dequant_paths, kv_quant));
    EXPECT_TRUE(has(native_paths, "layer.attn.core.fp8_quant")) << "the FP8 attention should run";
    ASSERT_EQ(native.logits.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
        const testing::LogitsComparison c =
            testing::compare_logits(native.logits[i], dequant.logits[i], 2.0 * kFp8ActQuantLogitsMaxAbs);
        EXPECT_LE(c.max_abs_diff, kFp8ActQuantLogitsMaxAbs) << "prompt " << i << ": " << c.describe();
        EXPECT_EQ(c.argmax_mismatches, 0) << "prompt " << i << ": " << c.describe();
    }
}

// WeightReader::dense_of an e4m3 weight is the dense read of the same tensor (take() dequantises it the same way),
// in f32 and in bf16 matrices, whole and as a column-parallel slice of whole blocks.
TEST(Fp8Weights, DenseOfIsTheDenseRead) {
    std::mt19937 rng(5);
    loader::WeightMap whole;
    add_fp8_weight(&whole, "a.weight", 384, 256, &rng);
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
        for (const models::IndexRange rows : {models::IndexRange{0, 384}, models::IndexRange{128, 384}}) {
            SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " rows " << rows.begin << ".." << rows.end);
            loader::WeightMap m1 = whole, m2 = whole;
            models::WeightReader r1(&m1, kernels::Context{}, dtype, 0, kNative);
            models::WeightReader r2(&m2, kernels::Context{}, dtype, 0, kNative);
            Result<models::Linear> e4m3 =
                models::take_linear_rows(r1, "a", 384, 256, rows, false, models::WeightFormat::kFp8Native);
            ASSERT_TRUE(e4m3.ok() && e4m3->fp8()) << e4m3.status().to_string();
            Result<Tensor> dense = r1.dense_of({.weight = e4m3->weight, .scale = e4m3->scale});
            ASSERT_TRUE(dense.ok()) << dense.status().to_string();
            Result<models::Linear> read = models::take_linear_rows(r2, "a", 384, 256, rows, false);
            ASSERT_TRUE(read.ok()) << read.status().to_string();
            ASSERT_EQ(dense->dtype(), read->weight.dtype());
            ASSERT_EQ(dense->view().shape_vec(), read->weight.view().shape_vec());
            EXPECT_EQ(std::memcmp(dense->ptr<uint8_t>(), read->weight.ptr<uint8_t>(), dense->nbytes()), 0);
        }
    }
}

// Writes `src`'s checkpoint as a DeepSeek-style block-FP8 one into `dst`: every 2-D projection, expert and indexer
// weight quantised per 128 x 128 block (scale = amax / 448, e4m3 = weight / scale), the router, embeddings, lm_head
// and norms kept, and quantization_config added to config.json.
void write_fp8_copy(const std::filesystem::path& src, const std::filesystem::path& dst) {
    Result<loader::Checkpoint> ck = loader::Checkpoint::open(src);
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    Result<loader::WeightMap> all = ck->load([](std::string_view) { return true; }, {}, 128, 128, nullptr);
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    std::map<std::string, Tensor> out;
    for (auto& [name, t] : *all) {
        const bool quantise = t.ndim() == 2 && name.ends_with(".weight") &&
                              name.find("embed_tokens") == std::string::npos &&
                              name.find("lm_head") == std::string::npos && name.find("norm") == std::string::npos &&
                              !name.ends_with("mlp.gate.weight");
        if (!quantise) {
            out.emplace(name, t);
            continue;
        }
        const int64_t n = t.size(0), k = t.size(1), nb = (n + 127) / 128, kb = (k + 127) / 128;
        Tensor q = Tensor::empty({n, k}, DType::kF8E4M3);
        Tensor sc = Tensor::empty({nb, kb}, DType::kF32);
        for (int64_t bi = 0; bi < nb; ++bi) {
            for (int64_t bj = 0; bj < kb; ++bj) {
                float amax = 0.0f;
                for (int64_t r = bi * 128; r < std::min(n, bi * 128 + 128); ++r) {
                    for (int64_t c = bj * 128; c < std::min(k, bj * 128 + 128); ++c) {
                        amax = std::max(amax, std::abs(t.ptr<float>()[r * k + c]));
                    }
                }
                const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
                sc.ptr<float>()[bi * kb + bj] = scale;
                for (int64_t r = bi * 128; r < std::min(n, bi * 128 + 128); ++r) {
                    for (int64_t c = bj * 128; c < std::min(k, bj * 128 + 128); ++c) {
                        q.ptr<uint8_t>()[r * k + c] = float_to_e4m3(t.ptr<float>()[r * k + c] / scale);
                    }
                }
            }
        }
        out.emplace(name, q);
        out.emplace(name + "_scale_inv", sc);
    }
    loader::NamedViews views;
    for (const auto& [name, t] : out) views.emplace_back(name, t.view());
    std::filesystem::create_directories(dst);
    ASSERT_TRUE(loader::write_safetensors(dst / "model.safetensors", views).ok());
    Result<std::string> text = loader::read_text_file(src / "config.json");
    ASSERT_TRUE(text.ok());
    nlohmann::json config = nlohmann::json::parse(*text);
    config["quantization_config"] = {
        {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
    std::ofstream(dst / "config.json") << config.dump(1);
}

// The fixture at `src` converted to FP8 (write_fp8_copy), loaded native and dequantised: on its reference prompts the
// two runs' logits differ by at most `bound` (the activation rounding, measured per family above) and agree on every
// argmax.
void expect_native_matches_dequantised(const std::filesystem::path& src, double bound) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("penstock_fp8_" + src.filename().string() + "_" + std::to_string(::getpid()));
    write_fp8_copy(src, dir);
    if (::testing::Test::HasFatalFailure()) return;
    const std::vector<testing::ReferencePrompt> ref = testing::load_reference(src);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : ref) prompts.push_back(p.ids);
    Result<loader::ModelConfig> config = loader::load_model_config(dir);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    ASSERT_TRUE(config->fp8.has_value());
    Result<loader::Checkpoint> ckpt = loader::Checkpoint::open(dir);
    ASSERT_TRUE(ckpt.ok());
    // KDA layers' FP8 o_proj reads the rows its gated norm writes (no "act_quant" of its own under o_proj); K3's gated
    // MLA runs its g_proj in FP8 on the rows the q / kv projections quantised (no "act_quant" under out_gate).
    bool kda_o_norm = false, kda_o_proj_quantises = false, mla_gate = false, mla_gate_quantises = false;
    auto run = [&](Fp8Weights mode) -> std::vector<Tensor> {
        models::ModelOptions options;
        options.fp8_weights = mode;
        auto model = models::load_model(*config, *ckpt, {0, config->num_hidden_layers}, options, nullptr);
        EXPECT_TRUE(model.ok()) << model.status().to_string();
        if (!model.ok()) return {};
        runtime::ModelRunner runner(std::move(model).value(), runtime::RunnerOptions{.n_pages = 16, .n_threads = 2});
        kernels::Profiler profiler(Device::kCPU);
        runner.set_profiler(&profiler);
        auto logits = runner.prefill_all_logits(prompts, /*chunk_size=*/0);
        runner.set_profiler(nullptr);
        if (mode == Fp8Weights::kNative) {
            for (const kernels::ProfileTotal& t : kernels::aggregate(profiler.collect())) {
                kda_o_norm = kda_o_norm || t.path.ends_with("kda.o_norm");
                kda_o_proj_quantises = kda_o_proj_quantises || t.path.ends_with("kda.o_proj.act_quant");
                mla_gate = mla_gate || t.path.ends_with("attn.out_gate");
                mla_gate_quantises = mla_gate_quantises || t.path.ends_with("attn.out_gate.act_quant");
            }
        }
        EXPECT_TRUE(logits.ok()) << logits.status().to_string();
        return logits.ok() ? std::move(logits).value() : std::vector<Tensor>{};
    };
    const std::vector<Tensor> native = run(Fp8Weights::kNative);
    const std::vector<Tensor> dequant = run(Fp8Weights::kDequant);
    if (kda_o_norm) {
        EXPECT_FALSE(kda_o_proj_quantises) << "KDA's o_proj quantised its input itself";
    }
    if (mla_gate) {
        EXPECT_FALSE(mla_gate_quantises) << "the MLA output gate quantised x again";
    }
    std::filesystem::remove_all(dir);
    ASSERT_EQ(native.size(), prompts.size());
    ASSERT_EQ(dequant.size(), prompts.size());
    double worst = 0.0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const testing::LogitsComparison c = testing::compare_logits(native[i], dequant[i], 2.0 * bound);
        EXPECT_LE(c.max_abs_diff, bound) << "prompt " << i << ": " << c.describe();
        EXPECT_EQ(c.argmax_mismatches, 0) << "prompt " << i << ": " << c.describe();
        worst = std::max(worst, c.max_abs_diff);
        std::printf("prompt %zu (%zu tokens): %s\n", i, prompts[i].size(), c.describe().c_str());
    }
    EXPECT_GT(worst, 0.0);
    std::printf("%s native FP8 vs dequant max |diff| %.4g\n", src.filename().c_str(), worst);
}

// GLM-5.x DSA (MLA + lightning indexer + MoE) from an FP8 checkpoint: native mode keeps the MLA projections and the
// experts e4m3 and dequantises the indexer's weights on load (docs/design/models.md); dense (<= index_topk keys) and
// sparse prompts.
TEST(Fp8Weights, GlmDsaFp8CheckpointNativeMatchesDequantised) {
    expect_native_matches_dequantised(std::string(PENSTOCK_FIXTURES_DIR) + "/glm_moe_dsa_tiny",
                                      kFp8ActQuantLogitsMaxAbsDsa);
}

// Kimi Linear (KDA + MLA + MoE with I = 64 < 128, a dense first layer) and a K3-shaped variant from an FP8
// checkpoint: native mode keeps the MLA projections, KDA's q / k / v / o and full-rank output gate (K3), the dense MLP
// and the experts e4m3 (KDA's low-rank gate projections are dequantised on load).
class KimiFp8 : public ::testing::TestWithParam<std::string> {};

TEST_P(KimiFp8, CheckpointNativeMatchesDequantised) {
    expect_native_matches_dequantised(GetParam(), kFp8ActQuantLogitsMaxAbsKimi);
}

// Kimi Linear, and K3's shape (AttnRes, latent MoE with SiTU, gated NoPE MLA with q_lora).
INSTANTIATE_TEST_SUITE_P(Fp8Weights, KimiFp8,
                         ::testing::Values(std::string(PENSTOCK_FIXTURES_DIR) + "/kimi_linear_tiny",
                                           std::string(PENSTOCK_TEST_DATA_DIR) + "/variants_k3/k3_tiny_block2"));

TEST(Fp8Weights, TensorParallelSlicesKeepWholeBlocks) {
    std::mt19937 rng(3);
    loader::WeightMap whole;
    add_fp8_weight(&whole, "a.weight", 256, 384, &rng);
    const Tensor w = whole.at("a.weight");
    const Tensor s = whole.at("a.weight_scale_inv");
    // Column-parallel rows [128, 256) and row-parallel columns [128, 384) (a ragged-free TP2 / TP3 share).
    {
        loader::WeightMap m = whole;
        models::WeightReader r(&m, kernels::Context{}, DType::kF32, 0, kNative);
        Result<models::Linear> l =
            models::take_linear_rows(r, "a", 256, 384, {128, 256}, false, models::WeightFormat::kFp8Native);
        ASSERT_TRUE(l.ok()) << l.status().to_string();
        ASSERT_EQ(l->weight.view().shape_vec(), (Shape{128, 384}));
        EXPECT_EQ(std::memcmp(l->weight.ptr<uint8_t>(), w.ptr<uint8_t>() + 128 * 384, 128 * 384), 0);
        ASSERT_EQ(l->scale.view().shape_vec(), (Shape{1, 3}));
        for (int c = 0; c < 3; ++c) EXPECT_EQ(l->scale.ptr<float>()[c], s.ptr<float>()[3 + c]);
    }
    {
        loader::WeightMap m = whole;
        models::WeightReader r(&m, kernels::Context{}, DType::kF32, 0, kNative);
        Result<models::Linear> l =
            models::take_linear_cols(r, "a", 256, 384, {128, 384}, false, false, models::WeightFormat::kFp8Native);
        ASSERT_TRUE(l.ok()) << l.status().to_string();
        ASSERT_EQ(l->weight.view().shape_vec(), (Shape{256, 256}));
        for (int64_t row = 0; row < 256; ++row) {
            ASSERT_EQ(std::memcmp(l->weight.ptr<uint8_t>() + row * 256, w.ptr<uint8_t>() + row * 384 + 128, 256), 0);
        }
        ASSERT_EQ(l->scale.view().shape_vec(), (Shape{2, 2}));
        for (int r2 = 0; r2 < 2; ++r2) {
            for (int c = 0; c < 2; ++c) EXPECT_EQ(l->scale.ptr<float>()[r2 * 2 + c], s.ptr<float>()[r2 * 3 + 1 + c]);
        }
    }
    // A cut inside a block is refused, naming the tensor; dense reads of the same slice still work.
    {
        loader::WeightMap m = whole;
        models::WeightReader r(&m, kernels::Context{}, DType::kF32, 0, kNative);
        Result<models::Linear> l =
            models::take_linear_rows(r, "a", 256, 384, {0, 96}, false, models::WeightFormat::kFp8Native);
        ASSERT_FALSE(l.ok());
        EXPECT_NE(l.status().to_string().find("'a.weight'"), std::string::npos) << l.status().to_string();
        EXPECT_NE(l.status().to_string().find("cuts its 128-wide scale blocks"), std::string::npos)
            << l.status().to_string();
        Result<models::Linear> d = models::take_linear_rows(r, "a", 256, 384, {0, 96}, false);
        ASSERT_TRUE(d.ok()) << d.status().to_string();
        EXPECT_FALSE(d->fp8());
        EXPECT_EQ(d->weight.view().shape_vec(), (Shape{96, 384}));
        EXPECT_TRUE(m.empty()) << "the dense read consumed the scale too";
    }
}

// The MoE block with FP8 experts and shared expert, split over 2 ranks (tp 2 with ep 1: every expert's intermediate
// halved; tp 2 with ep 2: the experts halved), sums to the unsplit block: the 128-column activation groups of the
// down projections are the same on every layout, so only fp32 summation order differs.
TEST(Fp8Weights, MoeTensorAndExpertParallelSumToTheWholeBlock) {
    const loader::ModelConfig config = moe_config(256);
    const Tensor x = random_f32({9, 128}, 5);
    const kernels::Context ctx{};
    auto run = [&](int rank, int size, int ep) -> Tensor {
        loader::WeightMap m = moe_weights(256);
        models::WeightReader r(&m, ctx, DType::kF32, 0, kNative);
        LoneRank comm(rank, size);
        const models::TensorParallel tp{.tp = size > 1 ? &comm : nullptr, .ep_size = ep};
        Result<models::MoeBlock> moe = models::MoeBlock::load(r, "mlp", config, models::MoeLoadOptions{}, tp);
        EXPECT_TRUE(moe.ok()) << moe.status().to_string();
        Tensor out = Tensor::empty({9, 128}, DType::kF32);
        if (moe.ok()) moe->forward(x, out, ctx);
        return out;
    };
    const Tensor whole = run(0, 1, 1);
    for (const int ep : {1, 2}) {
        SCOPED_TRACE("ep " + std::to_string(ep));
        Tensor sum = run(0, 2, ep);
        const Tensor other = run(1, 2, ep);
        for (int64_t i = 0; i < sum.numel(); ++i) sum.ptr<float>()[i] += other.ptr<const float>()[i];
        expect_close(sum, whole, test::kF32Gemm, "rank 0 + rank 1 vs the unsplit FP8 MoE");
    }
}

// x [n, k] f32 -> the values the FP8 GEMMs see: e4m3(x / s) * s per row and 128 columns (kernels::fp8_act_quant).
Tensor act_quant_dequant(const TensorView& x) {
    const int64_t n = x.size(0), k = x.size(1), kb = (k + 127) / 128;
    Tensor q = Tensor::empty({n, k}, DType::kF8E4M3);
    Tensor s = Tensor::empty({n, kb}, DType::kF32);
    kernels::fp8_act_quant({.out = q, .scale = s, .in = x}, kernels::Context{});
    Tensor out = Tensor::empty({n, k}, DType::kF32);
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) {
            out.ptr<float>()[r * k + c] = e4m3_to_float(q.ptr<uint8_t>()[r * k + c]) * s.ptr<float>()[r * kb + c / 128];
        }
    }
    return out;
}

// The router's top-2 over moe_config's 4 experts for rows x (no bias), as MoeBlock computes it: ids [n, 2] and
// weights [n, 2].
std::pair<Tensor, Tensor> route_top2(const loader::ModelConfig& config, const loader::WeightMap& whole,
                                     const Tensor& x) {
    const int64_t n = x.size(0);
    Tensor logits = Tensor::empty({n, 4}, DType::kF32);
    kernels::gemm({.out = logits, .a = x, .b = whole.at("mlp.gate.weight")}, kernels::Context{});
    Tensor ids = Tensor::empty({n, 2}, DType::kI32);
    Tensor w = Tensor::empty({n, 2}, DType::kF32);
    kernels::moe_routing({.topk_ids = ids,
                          .topk_weights = w,
                          .logits = logits,
                          .bias = TensorView{},
                          .routed_scaling_factor = static_cast<float>(config.routed_scaling_factor),
                          .norm_topk_prob = config.norm_topk_prob},
                         kernels::Context{});
    return {std::move(ids), std::move(w)};
}

// SwiGLU expert on one row with dequantised weights and act-quantised inputs of both GEMMs: the FP8 expert's math.
std::vector<float> fp8_expert_ref(const loader::WeightMap& m, const std::string& p, const TensorView& x_row,
                                  int64_t inter) {
    auto deq = [&](const std::string& name) {
        Result<Tensor> t =
            loader::dequantize_fp8_blocks(m.at(name).view(), m.at(name + "_scale_inv").view(), 128, 128, DType::kF32);
        EXPECT_TRUE(t.ok());
        return *t;
    };
    const Tensor g = deq(p + "gate_proj.weight"), u = deq(p + "up_proj.weight"), d = deq(p + "down_proj.weight");
    const Tensor xq = act_quant_dequant(x_row);
    Tensor a = Tensor::empty({1, inter}, DType::kF32);
    for (int64_t i = 0; i < inter; ++i) {
        double gv = 0.0, uv = 0.0;
        for (int64_t c = 0; c < 128; ++c) {
            gv += static_cast<double>(xq.ptr<float>()[c]) * g.ptr<float>()[i * 128 + c];
            uv += static_cast<double>(xq.ptr<float>()[c]) * u.ptr<float>()[i * 128 + c];
        }
        a.ptr<float>()[i] = static_cast<float>(gv / (1.0 + std::exp(-gv)) * uv);
    }
    const Tensor aq = act_quant_dequant(a);
    std::vector<float> y(128);
    for (int64_t o = 0; o < 128; ++o) {
        double acc = 0.0;
        for (int64_t i = 0; i < inter; ++i)
            acc += static_cast<double>(aq.ptr<float>()[i]) * d.ptr<float>()[o * inter + i];
        y[static_cast<size_t>(o)] = static_cast<float>(acc);
    }
    return y;
}

// The FP8 MoE block (experts stacked as e4m3 with their scales; gate rows, padded up rows; fp8_grouped_gemm) equals
// a direct per-token computation with dequantised weights on act-quantised inputs, routed by the same kernel.
TEST(Fp8Weights, MoeExpertsAreActQuantThenTheDequantisedExperts) {
    for (const int64_t inter : {int64_t{256}, int64_t{96}}) {  // 96: up rows padded to 128 in the stack
        SCOPED_TRACE("moe_intermediate " + std::to_string(inter));
        const loader::ModelConfig config = moe_config(inter);
        const loader::WeightMap whole = moe_weights(inter);
        loader::WeightMap m = whole;
        models::WeightReader r(&m, kernels::Context{}, DType::kF32, 0, kNative);
        Result<models::MoeBlock> moe = models::MoeBlock::load(r, "mlp", config, models::MoeLoadOptions{});
        ASSERT_TRUE(moe.ok()) << moe.status().to_string();
        constexpr int64_t kT = 6;
        const Tensor x = random_f32({kT, 128}, 9);
        Tensor out = Tensor::empty({kT, 128}, DType::kF32);
        moe->forward(x, out, kernels::Context{});

        const auto [ids, w] = route_top2(config, whole, x);
        Tensor want = Tensor::zeros({kT, 128}, DType::kF32);
        for (int64_t t = 0; t < kT; ++t) {
            const TensorView row = x.view().slice(0, t, t + 1);
            std::vector<float> y = fp8_expert_ref(whole, "mlp.shared_experts.", row, inter);
            for (int64_t k = 0; k < 2; ++k) {
                const int e = ids.ptr<int32_t>()[t * 2 + k];
                const std::vector<float> ye =
                    fp8_expert_ref(whole, "mlp.experts." + std::to_string(e) + ".", row, inter);
                for (int64_t o = 0; o < 128; ++o) {
                    y[static_cast<size_t>(o)] += w.ptr<float>()[t * 2 + k] * ye[static_cast<size_t>(o)];
                }
            }
            std::memcpy(want.ptr<float>() + t * 128, y.data(), 128 * sizeof(float));
        }
        expect_close(out, want, test::kF32Gemm, "FP8 MoE block vs per-token dequantised experts");

        // x's FP8 rows from the caller (the fused norm's, models::BlockNorms) give the same bytes as quantising here.
        EXPECT_TRUE(moe->fp8_input());
        const models::Fp8Activations xq = models::fp8_quantize_rows(x, kernels::Context{});
        Tensor out_xq = Tensor::empty({kT, 128}, DType::kF32);
        moe->forward(x, out_xq, kernels::Context{}, {}, &xq);
        EXPECT_EQ(0, std::memcmp(out.view().data, out_xq.view().data, static_cast<size_t>(kT * 128) * sizeof(float)));
    }
}

// Kimi K3's latent MoE with its latent projections in e4m3 (as the checkpoint stores them): routing on x, z =
// latent_down(act_quant(x)), the FP8 experts on z, the weighted sum RMS-normalised, latent_up on the act-quantised
// norm output, plus the FP8 shared expert on x; per token against the dequantised weights. The caller's FP8 rows of x
// (fp8_input: latent_down and the shared expert read them) give the same bytes as quantising in the block.
TEST(Fp8Weights, LatentMoeProjectionsAreFp8Linears) {
    constexpr int64_t kInter = 256, kT = 6;
    const loader::ModelConfig config = moe_config(kInter);
    loader::WeightMap whole = moe_weights(kInter);  // hidden 128; the experts' width is the latent's (128)
    std::mt19937 rng(20261203);
    add_fp8_weight(&whole, "mlp.routed_expert_down_proj.weight", 128, 128, &rng);
    add_fp8_weight(&whole, "mlp.routed_expert_up_proj.weight", 128, 128, &rng);
    whole.emplace("mlp.routed_expert_norm.weight", random_f32({128}, 17, 0.2f));
    for (int64_t i = 0; i < 128; ++i) whole.at("mlp.routed_expert_norm.weight").ptr<float>()[i] += 1.0f;
    loader::WeightMap m = whole;
    models::WeightReader r(&m, kernels::Context{}, DType::kF32, 0, kNative);
    models::MoeLoadOptions options;
    options.latent_dim = 128;
    options.latent_norm = true;
    Result<models::MoeBlock> moe = models::MoeBlock::load(r, "mlp", config, options);
    ASSERT_TRUE(moe.ok()) << moe.status().to_string();
    EXPECT_TRUE(moe->fp8_input());
    const Tensor x = random_f32({kT, 128}, 19);
    Tensor out = Tensor::empty({kT, 128}, DType::kF32);
    moe->forward(x, out, kernels::Context{});

    auto deq = [&](const std::string& name) {
        Result<Tensor> t = loader::dequantize_fp8_blocks(whole.at(name).view(), whole.at(name + "_scale_inv").view(),
                                                         128, 128, DType::kF32);
        EXPECT_TRUE(t.ok());
        return *t;
    };
    const Tensor down = deq("mlp.routed_expert_down_proj.weight"), up = deq("mlp.routed_expert_up_proj.weight");
    const auto matvec = [](const Tensor& w, const Tensor& v) {  // [128, 128] @ [1, 128]
        Tensor y = Tensor::empty({1, 128}, DType::kF32);
        for (int64_t o = 0; o < 128; ++o) {
            double acc = 0.0;
            for (int64_t c = 0; c < 128; ++c)
                acc += static_cast<double>(v.ptr<float>()[c]) * w.ptr<float>()[o * 128 + c];
            y.ptr<float>()[o] = static_cast<float>(acc);
        }
        return y;
    };
    const auto [ids, w] = route_top2(config, whole, x);
    Tensor want = Tensor::empty({kT, 128}, DType::kF32);
    for (int64_t t = 0; t < kT; ++t) {
        const TensorView row = x.view().slice(0, t, t + 1);
        const Tensor z = matvec(down, act_quant_dequant(row));
        Tensor routed = Tensor::zeros({1, 128}, DType::kF32);
        for (int64_t k = 0; k < 2; ++k) {
            const int e = ids.ptr<int32_t>()[t * 2 + k];
            const std::vector<float> ye = fp8_expert_ref(whole, "mlp.experts." + std::to_string(e) + ".", z, kInter);
            for (int64_t o = 0; o < 128; ++o) routed.ptr<float>()[o] += w.ptr<float>()[t * 2 + k] * ye[o];
        }
        Tensor normed = Tensor::empty({1, 128}, DType::kF32);
        kernels::rms_norm(
            {.out = normed, .in = routed, .weight = whole.at("mlp.routed_expert_norm.weight"), .eps = 1e-5f},
            kernels::Context{});
        const Tensor y = matvec(up, act_quant_dequant(normed));
        const std::vector<float> shared = fp8_expert_ref(whole, "mlp.shared_experts.", row, kInter);
        for (int64_t o = 0; o < 128; ++o) want.ptr<float>()[t * 128 + o] = y.ptr<float>()[o] + shared[o];
    }
    expect_close(out, want, test::kF32Gemm, "FP8 latent MoE vs per-token dequantised projections and experts");

    const models::Fp8Activations xq = models::fp8_quantize_rows(x, kernels::Context{});
    Tensor out_xq = Tensor::empty({kT, 128}, DType::kF32);
    moe->forward(x, out_xq, kernels::Context{}, {}, &xq);
    EXPECT_EQ(0, std::memcmp(out.view().data, out_xq.view().data, static_cast<size_t>(kT * 128) * sizeof(float)));
}

TEST(Fp8Weights, MisalignedExpertSliceIsRefused) {
    // moe_intermediate 192 over tp 2: rank columns [0, 96) and [96, 192) cut the first 128-block.
    const loader::ModelConfig config = moe_config(192);
    loader::WeightMap m = moe_weights(192);
    models::WeightReader r(&m, kernels::Context{}, DType::kF32, 0, kNative);
    LoneRank comm(0, 2);
    Result<models::MoeBlock> moe =
        models::MoeBlock::load(r, "mlp", config, models::MoeLoadOptions{}, models::TensorParallel{.tp = &comm});
    ASSERT_FALSE(moe.ok());
    EXPECT_NE(moe.status().to_string().find("cut the 128-wide scale blocks"), std::string::npos)
        << moe.status().to_string();
}

TEST(Fp8Weights, FixtureUnderTp2NativeIsRefusedDequantLoads) {
    Result<loader::ModelConfig> config = loader::load_model_config(kFp8Fixture);
    ASSERT_TRUE(config.ok());
    Result<loader::Checkpoint> ckpt = loader::Checkpoint::open(kFp8Fixture);
    ASSERT_TRUE(ckpt.ok());
    LoneRank comm(1, 2);
    models::ModelOptions options;
    options.tp = models::TensorParallel{.tp = &comm};
    options.fp8_weights = Fp8Weights::kNative;
    // q_b has 48 rows per head: rank 1's heads [2, 4) are rows [96, 192), inside the fixture's only 128-block rows.
    auto native = models::load_model(*config, *ckpt, {0, config->num_hidden_layers}, options, nullptr);
    ASSERT_FALSE(native.ok());
    EXPECT_NE(native.status().to_string().find("q_b_proj.weight"), std::string::npos) << native.status().to_string();
    EXPECT_NE(native.status().to_string().find("--fp8-weights dequant"), std::string::npos);
    options.fp8_weights = Fp8Weights::kDequant;
    auto dequant = models::load_model(*config, *ckpt, {0, config->num_hidden_layers}, options, nullptr);
    EXPECT_TRUE(dequant.ok()) << dequant.status().to_string();
}

TEST(Fp8Weights, DummyFp8WeightsAreSeededAndScaledLikeTheDenseOnes) {
    loader::WeightMap none;
    models::WeightReader r(&none, kernels::Context{}, DType::kF32, /*dummy_seed=*/77, kNative);
    ASSERT_TRUE(r.fp8_native("any.weight"));
    const models::Fp8Tensor a = r.generate_fp8("x.weight", {3, 256, 640}, 0, kernels::Context{});
    const models::Fp8Tensor b = r.generate_fp8("x.weight", {3, 256, 640}, 0, kernels::Context{});
    const models::Fp8Tensor c = r.generate_fp8("y.weight", {3, 256, 640}, 0, kernels::Context{});
    ASSERT_EQ(a.weight.dtype(), DType::kF8E4M3);
    ASSERT_EQ(a.scale.view().shape_vec(), (Shape{3, 2, 5}));
    EXPECT_EQ(std::memcmp(a.weight.ptr<uint8_t>(), b.weight.ptr<uint8_t>(), a.weight.nbytes()), 0);
    EXPECT_EQ(std::memcmp(a.scale.ptr<float>(), b.scale.ptr<float>(), a.scale.nbytes()), 0);
    EXPECT_NE(std::memcmp(a.weight.ptr<uint8_t>(), c.weight.ptr<uint8_t>(), a.weight.nbytes()), 0);
    // Dequantised: finite, mean ~0, std ~ 1/sqrt(k) (the dense dummy matrices' std) within 10%.
    double sum = 0.0, sq = 0.0;
    const int64_t n = a.weight.numel();
    for (int64_t i = 0; i < n; ++i) {
        const int64_t g = i / (256 * 640), row = (i / 640) % 256, col = i % 640;
        const float v =
            e4m3_to_float(a.weight.ptr<uint8_t>()[i]) * a.scale.ptr<float>()[(g * 2 + row / 128) * 5 + col / 128];
        ASSERT_TRUE(std::isfinite(v)) << i;
        sum += v;
        sq += static_cast<double>(v) * v;
    }
    const double mean = sum / static_cast<double>(n);
    const double std = std::sqrt(sq / static_cast<double>(n) - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.05 / std::sqrt(640.0));
    EXPECT_NEAR(std * std::sqrt(640.0), 1.0, 0.1);
}

TEST(Fp8Weights, DummyNativeFixtureModelRunsFiniteAndDeterministic) {
    Result<loader::ModelConfig> config = loader::load_model_config(kFp8Fixture);
    ASSERT_TRUE(config.ok());
    // moe_intermediate 64 < 128: the stacked experts pad the up rows to 128 (MoeBlock::up_offset_).
    auto logits_of = [&](uint64_t seed) -> Tensor {
        models::ModelOptions options;
        options.dummy_weights_seed = seed;
        options.fp8_weights = Fp8Weights::kNative;
        loader::LoadStats stats;
        auto model =
            models::load_model(*config, loader::Checkpoint::none(), {0, config->num_hidden_layers}, options, &stats);
        EXPECT_TRUE(model.ok()) << model.status().to_string();
        if (!model.ok()) return Tensor();
        EXPECT_TRUE(stats.files_opened.empty());
        runtime::ModelRunner runner(std::move(model).value(), runtime::RunnerOptions{.n_pages = 8, .n_threads = 1});
        std::vector<int32_t> prompt;
        for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 100);
        const std::vector<std::vector<int32_t>> prompts{prompt};
        auto l = runner.prefill_all_logits(prompts, 17);
        EXPECT_TRUE(l.ok()) << l.status().to_string();
        return l.ok() ? l->front() : Tensor();
    };
    const Tensor a = logits_of(5), b = logits_of(5), c = logits_of(6);
    ASSERT_TRUE(a.defined() && b.defined() && c.defined());
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_TRUE(std::isfinite(a.ptr<const float>()[i])) << i;
    EXPECT_EQ(std::memcmp(a.ptr<float>(), b.ptr<float>(), a.nbytes()), 0);
    EXPECT_NE(std::memcmp(a.ptr<float>(), c.ptr<float>(), a.nbytes()), 0);
}

// FP8 attention before the FP8 o_proj (ModelOptions::fp8_attention_rows): the attention's epilogue writes o_proj's
// e4m3 rows and scales, bit for bit the bf16 output and o_proj's activation quantisation it replaces, so the logits
// are identical with the fusion on and off. The tiny FP8 fixture's shape with v_head_dim 128 (one block per head; the
// fixture's own 32 takes the unfused path, also checked) and dummy native FP8 weights; whole prompts (the FP8 path)
// and chunks of 17 (later chunks read a cached prefix: still one expansion round, the same path).
TEST(Fp8Weights, FusedAttentionRowsMatchTheUnfusedPair) {
    Result<loader::ModelConfig> config = loader::load_model_config(kFp8Fixture);
    ASSERT_TRUE(config.ok());
    for (const int64_t v_head_dim : {int64_t{128}, config->v_head_dim}) {
        loader::ModelConfig cfg = *config;
        cfg.v_head_dim = v_head_dim;
        // (the profile says which path ran: o_proj quantises its input itself only when unfused)
        bool quantised_by_o_proj = false;
        auto logits_of = [&](bool rows, int64_t chunk) -> Tensor {
            models::ModelOptions options;
            options.dummy_weights_seed = 11;
            options.fp8_weights = Fp8Weights::kNative;
            options.fp8_attention = true;
            options.fp8_attention_rows = rows;
            loader::LoadStats stats;
            auto model =
                models::load_model(cfg, loader::Checkpoint::none(), {0, cfg.num_hidden_layers}, options, &stats);
            EXPECT_TRUE(model.ok()) << model.status().to_string();
            if (!model.ok()) return Tensor();
            runtime::ModelRunner runner(std::move(model).value(), runtime::RunnerOptions{.n_pages = 8, .n_threads = 2});
            std::vector<int32_t> prompt;
            for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 100);
            const std::vector<std::vector<int32_t>> prompts{prompt};
            kernels::Profiler profiler(Device::kCPU);
            runner.set_profiler(&profiler);
            auto l = runner.prefill_all_logits(prompts, chunk);
            runner.set_profiler(nullptr);
            EXPECT_TRUE(l.ok()) << l.status().to_string();
            quantised_by_o_proj = false;
            for (const kernels::ProfileTotal& t : kernels::aggregate(profiler.collect())) {
                quantised_by_o_proj = quantised_by_o_proj || t.path == "layer.attn.o_proj.act_quant";
            }
            return l.ok() ? l->front() : Tensor();
        };
        for (const int64_t chunk : {int64_t{0}, int64_t{17}}) {
            SCOPED_TRACE(::testing::Message() << "v_head_dim " << v_head_dim << " chunk " << chunk);
            const Tensor fused = logits_of(true, chunk);
            EXPECT_EQ(quantised_by_o_proj, v_head_dim != 128) << "the attention should write o_proj's rows";
            const Tensor plain = logits_of(false, chunk);
            EXPECT_TRUE(quantised_by_o_proj);
            ASSERT_TRUE(fused.defined() && plain.defined());
            for (int64_t i = 0; i < fused.numel(); ++i) ASSERT_TRUE(std::isfinite(fused.ptr<const float>()[i])) << i;
            EXPECT_EQ(std::memcmp(fused.ptr<float>(), plain.ptr<float>(), fused.nbytes()), 0);
        }
    }
}

TEST(Fp8Weights, ModeResolution) {
    Result<loader::ModelConfig> fp8 = loader::load_model_config(kFp8Fixture);
    ASSERT_TRUE(fp8.ok());
    models::ModelOptions cpu;
    models::ModelOptions cuda;
    cuda.placement.device = Device::kCUDA;  // resolve_fp8_weights reads the device only
    auto resolved = [](const loader::ModelConfig& c, models::ModelOptions o, Fp8Weights mode) {
        o.fp8_weights = mode;
        return models::resolve_fp8_weights(c, o);
    };
    EXPECT_EQ(*resolved(*fp8, cpu, Fp8Weights::kAuto), Fp8Weights::kDequant);
    EXPECT_EQ(*resolved(*fp8, cuda, Fp8Weights::kAuto), Fp8Weights::kNative);
    EXPECT_EQ(*resolved(*fp8, cpu, Fp8Weights::kNative), Fp8Weights::kNative);
    EXPECT_EQ(*resolved(*fp8, cuda, Fp8Weights::kDequant), Fp8Weights::kDequant);
    loader::ModelConfig blocks64 = *fp8;
    blocks64.fp8->block_n = 64;
    EXPECT_EQ(*resolved(blocks64, cuda, Fp8Weights::kAuto), Fp8Weights::kDequant);
    const Result<Fp8Weights> bad = resolved(blocks64, cuda, Fp8Weights::kNative);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().to_string().find("[128, 128]"), std::string::npos) << bad.status().to_string();
    loader::ModelConfig kimi = *fp8;
    kimi.model_type = "kimi_linear";
    EXPECT_EQ(*resolved(kimi, cpu, Fp8Weights::kNative), Fp8Weights::kNative);
    loader::ModelConfig bf16 = *fp8;
    bf16.fp8.reset();
    EXPECT_EQ(*resolved(bf16, cuda, Fp8Weights::kNative), Fp8Weights::kDequant);
    EXPECT_EQ(*resolved(bf16, cuda, Fp8Weights::kAuto), Fp8Weights::kDequant);
    // Dummy weights: an explicit native generates block-FP8 weights without a quantization_config.
    models::ModelOptions dummy = cuda;
    dummy.dummy_weights_seed = 7;
    EXPECT_EQ(*resolved(bf16, dummy, Fp8Weights::kNative), Fp8Weights::kNative);
    EXPECT_EQ(*resolved(bf16, dummy, Fp8Weights::kAuto), Fp8Weights::kDequant);
    EXPECT_FALSE(models::parse_fp8_weights("fp8").ok());
    EXPECT_EQ(*models::parse_fp8_weights("native"), Fp8Weights::kNative);
}

}  // namespace
}  // namespace penstock
