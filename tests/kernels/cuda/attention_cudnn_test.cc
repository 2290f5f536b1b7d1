// cuda::attention_cudnn (the cuDNN SDPA path) against the CPU reference, bf16 to kBF16Tol for out and lse, one
// "[conf] attention_cudnn | case | ..." line per output. Grid: the MLA MHA form d_qk 192 / d_v 128 at 3, 16 and 128
// heads and d 64/64; ragged batches (lengths 1, 17, 63, 64, 65, 300); a cached prefix whose keys are all visible
// (kAllVisible) and the last piece of a prefix (kCausalBottomRight); an MLA key piece that starts inside the chunk
// (rows with no visible key) and a sequence with no keys; non-causal; GQA; q/k/v/out strided on dims 0/1 the way
// models/mla.cc lays them out (v a view into kv_b's output); hints exact and unknown (0); single sequences (cuDNN's
// dense flavour, or ragged when rows lack keys) and batches (ragged). Also: the calls the path must decline (no mask
// promise, f32, misaligned strides), and cuda::attention's dispatch. Skips without a GPU, and the conformance cases
// skip when the build has no cuDNN. The same cases (plus multi-tile ones) also run Penstock's bf16 wgmma kernel
// (attention_bf16_wgmma.h), which cuda::attention tries before cuDNN.
#include "kernels/cuda/attention_cudnn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention_bf16_wgmma.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"
#include "kernels/ref/ref_ops.h"
#include "tests/kernels/cuda/conformance_log.h"
#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {
namespace {

using kernels::AttentionMaskKind;

struct Seq {
    int32_t len_q, len_k, q_pos0, k_pos0;
};

enum class Layout {
    kDense,   // q, k, v, out contiguous
    kPadded,  // q, k, v, out with an extra head and 8 extra columns per head: strided dims 0/1, 16-byte aligned
    kMlaMha,  // k contiguous, v = columns [nope, nope + d_v) of a [T, H, nope + d_v] kv_b output
    // models/mla.cc: k = columns [0, nope) and v = [nope, nope + d_v) of a [T, H, nope + d_v] kv_b output, and K's
    // last 64 columns AttentionParams::k_rope: the rope columns of [T, 512 + 64] latent rows broadcast over the heads
    // (head stride 0; kMlaRope), or a [T, H, 64] tensor of their own (kMlaRopeHeads)
    kMlaRope,
    kMlaRopeHeads,
    kMisaligned,  // op_test_util's +3 padding: strides not multiples of 8 elements (the path must decline)
};

struct Case {
    std::string name;
    int64_t n_heads, n_kv_heads, d_qk, d_v;
    std::vector<Seq> seqs;
    AttentionMaskKind mask;
    bool causal = true;
    Layout layout = Layout::kDense;
    bool exact_hints = true;  // max_seqlen_q/k = the longest sequence; false: 0 (unknown)
    bool want_lse = true;     // false: no lse output (the call's lse view empty; only out compared)
};

// A Pair over `shape` padded by one head (dim 1) and `pad` columns (dim 2), the view starting `pad` columns in.
Pair padded_pair(std::mt19937& rng, const Shape& shape, int64_t pad, DType dt, bool poison,
                 cuda::CudaCachingAllocator& alloc, const cuda::Stream& stream) {
    Shape padded = shape;
    padded[1] += 1;
    padded[2] += pad;
    std::vector<float> values =
        poison ? std::vector<float>(static_cast<size_t>(numel_of(padded)), 0.0f) : random_floats(rng, numel_of(padded));
    Pair p = make_pair_from(values, padded, dt, /*strided=*/false, alloc, stream);
    if (poison) cuda::fill_bytes_async(p.dev, 0xff, stream);
    p.hv = p.hv.slice(1, 0, shape[1]).slice(2, pad, pad + shape[2]);
    p.dv = p.dv.slice(1, 0, shape[1]).slice(2, pad, pad + shape[2]);
    return p;
}

class AttentionCudnnTest : public CudaTest {
protected:
    Pair input(std::mt19937& rng, const Shape& shape, DType dt, Layout layout) {
        switch (layout) {
            case Layout::kDense:
            case Layout::kMlaMha:
            case Layout::kMlaRope:
            case Layout::kMlaRopeHeads:
                return random_pair(rng, shape, dt, /*strided=*/false, alloc(), stream());
            case Layout::kPadded:
                return padded_pair(rng, shape, /*pad=*/8, dt, /*poison=*/false, alloc(), stream());
            case Layout::kMisaligned:
                return random_pair(rng, shape, dt, /*strided=*/true, alloc(), stream());
        }
        return {};
    }
    Pair output(const Shape& shape, DType dt, Layout layout) {
        std::mt19937 unused(0);
        switch (layout) {
            case Layout::kDense:
            case Layout::kMlaMha:
            case Layout::kMlaRope:
            case Layout::kMlaRopeHeads:
                return poisoned_pair(shape, dt, /*strided=*/false, alloc(), stream());
            case Layout::kPadded:
                return padded_pair(unused, shape, /*pad=*/8, dt, /*poison=*/true, alloc(), stream());
            case Layout::kMisaligned:
                return poisoned_pair(shape, dt, /*strided=*/true, alloc(), stream());
        }
        return {};
    }

    // Runs the case through `run` (device params) and the reference; compares when `compare`. Returns run's answer.
    template <class Run>
    bool check(const Case& c, DType dt, uint32_t seed, Run&& run, bool compare = true) {
        SCOPED_TRACE(::testing::Message() << c.name);
        PENSTOCK_SEEDED(seed);
        std::mt19937 rng(seed);
        std::vector<int32_t> cu_q{0}, cu_k{0}, qp, kp;
        int32_t max_q = 0, max_k = 0;
        for (const Seq& s : c.seqs) {
            cu_q.push_back(cu_q.back() + s.len_q);
            cu_k.push_back(cu_k.back() + s.len_k);
            qp.push_back(s.q_pos0);
            kp.push_back(s.k_pos0);
            max_q = std::max(max_q, s.len_q);
            max_k = std::max(max_k, s.len_k);
        }
        const int64_t total_q = cu_q.back(), total_k = cu_k.back();
        const Pair q = input(rng, {total_q, c.n_heads, c.d_qk}, dt, c.layout);
        const bool rope = c.layout == Layout::kMlaRope || c.layout == Layout::kMlaRopeHeads;
        const Pair k = input(rng, {total_k, c.n_kv_heads, rope ? 64 : c.d_qk}, dt, c.layout);
        TensorView k_dev = k.dv, k_host = k.hv, kr_dev, kr_host;
        Pair v_own, kr_own;
        TensorView v_dev, v_host;
        if (rope) {  // kv_b output [T, H, nope + d_v]: k its first nope columns, v the rest; k_rope from a 2nd tensor
            const int64_t nope = c.d_qk - 64;
            v_own = random_pair(rng, {total_k, c.n_kv_heads, nope + c.d_v}, dt, /*strided=*/false, alloc(), stream());
            k_dev = v_own.dv.slice(2, 0, nope);
            k_host = v_own.hv.slice(2, 0, nope);
            v_dev = v_own.dv.slice(2, nope, nope + c.d_v);
            v_host = v_own.hv.slice(2, nope, nope + c.d_v);
            if (c.layout == Layout::kMlaRope) {  // latent rows [T, 512 + 64], the rope head broadcast
                kr_own = random_pair(rng, {total_k, 512 + 64}, dt, /*strided=*/false, alloc(), stream());
                kr_dev = kr_own.dv.as_strided(512, {total_k, c.n_kv_heads, 64}, {512 + 64, 0, 1});
                kr_host = kr_own.hv.as_strided(512, {total_k, c.n_kv_heads, 64}, {512 + 64, 0, 1});
            } else {
                kr_own = random_pair(rng, {total_k, c.n_kv_heads, 64}, dt, /*strided=*/false, alloc(), stream());
                kr_dev = kr_own.dv;
                kr_host = kr_own.hv;
            }
        } else if (c.layout == Layout::kMlaMha) {  // kv_b output [T, H, nope + d_v]; v its last d_v columns per head
            const int64_t nope = c.d_qk - 64;
            v_own = random_pair(rng, {total_k, c.n_kv_heads, nope + c.d_v}, dt, /*strided=*/false, alloc(), stream());
            v_dev = v_own.dv.slice(2, nope, nope + c.d_v);
            v_host = v_own.hv.slice(2, nope, nope + c.d_v);
        } else {
            v_own = input(rng, {total_k, c.n_kv_heads, c.d_v}, dt, c.layout);
            v_dev = v_own.dv;
            v_host = v_own.hv;
        }
        Pair out = output({total_q, c.n_heads, c.d_v}, dt, c.layout);
        Pair lse = poisoned_pair({total_q, c.n_heads}, DType::kF32, /*strided=*/false, alloc(), stream());
        const Tensor cu_q_d = dev_i32(cu_q, alloc(), stream()), cu_k_d = dev_i32(cu_k, alloc(), stream());
        const Tensor qp_d = dev_i32(qp, alloc(), stream()), kp_d = dev_i32(kp, alloc(), stream());
        const Tensor cu_q_h = i32_tensor(cu_q), cu_k_h = i32_tensor(cu_k);
        const Tensor qp_h = i32_tensor(qp), kp_h = i32_tensor(kp);
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.d_qk)) * 2.0f;  // sharper than uniform
        kernels::AttentionParams dp{.out = out.dv,
                                    .lse = lse.dv,
                                    .q = q.dv,
                                    .k = k_dev,
                                    .v = v_dev,
                                    .k_rope = kr_dev,
                                    .cu_seqlens_q = cu_q_d,
                                    .cu_seqlens_k = cu_k_d,
                                    .q_pos0 = qp_d,
                                    .k_pos0 = kp_d,
                                    .scale = scale,
                                    .causal = c.causal,
                                    .max_seqlen_q = c.exact_hints ? max_q : 0,
                                    .max_seqlen_k = c.exact_hints ? max_k : 0,
                                    .mask_kind = c.mask};
        if (!c.want_lse) dp.lse = TensorView{};
        const bool taken = run(dp);
        if (!compare) return taken;
        kernels::AttentionParams hp = dp;
        hp.out = out.hv;
        hp.lse = c.want_lse ? lse.hv : TensorView{};
        hp.q = q.hv;
        hp.k = k_host;
        hp.v = v_host;
        hp.k_rope = kr_host;
        hp.cu_seqlens_q = cu_q_h;
        hp.cu_seqlens_k = cu_k_h;
        hp.q_pos0 = qp_h;
        hp.k_pos0 = kp_h;
        ref::attention(hp, nullptr);  // also checks that the case's hints hold
        conf_pair("attention_cudnn", c.name + " out", out, out.hv, kBF16Tol, stream());
        if (c.want_lse) conf_pair("attention_cudnn", c.name + " lse", lse, lse.hv, kBF16Tol, stream());
        return taken;
    }
};

std::vector<Case> conformance_cases() {
    using M = AttentionMaskKind;
    const std::vector<Seq> ragged = {{1, 1, 0, 0},   {17, 17, 0, 0}, {63, 63, 0, 0},
                                     {64, 64, 0, 0}, {65, 65, 0, 0}, {300, 300, 0, 0}};
    return {
        {"mha_192_128_h16_ragged", 16, 16, 192, 128, ragged, M::kCausalBottomRight},
        {"mha_192_128_h16_ragged_nohints", 16, 16, 192, 128, ragged, M::kCausalBottomRight, true, Layout::kDense,
         false},
        {"mha_192_128_h128_300", 128, 128, 192, 128, {{300, 300, 0, 0}}, M::kCausalBottomRight},
        {"mha_192_128_h3_ragged", 3, 3, 192, 128, ragged, M::kCausalBottomRight},
        {"mha_64_64_h3_ragged", 3, 3, 64, 64, ragged, M::kCausalBottomRight},
        {"mha_64_64_h16_one_token", 16, 16, 64, 64, {{1, 1, 0, 0}}, M::kCausalBottomRight},
        // Prefix pieces of a chunk at positions [prefix, prefix + len): a piece of keys all before the chunk ...
        {"prefix_piece_all_visible",
         16,
         16,
         192,
         128,
         {{17, 40, 40, 0}, {65, 100, 100, 0}, {1, 64, 64, 0}},
         M::kAllVisible},
        // ... and the last piece, which ends at the chunk's last position.
        {"prefix_last_piece",
         16,
         16,
         192,
         128,
         {{17, 30, 13, 0}, {65, 165, 100, 0}, {1, 64, 63, 0}},
         M::kCausalBottomRight},
        // A key piece [256, 400) of a chunk at [100, 400): rows before position 256 see no key.
        {"piece_inside_chunk_empty_rows",
         16,
         16,
         192,
         128,
         {{300, 144, 100, 256}, {17, 17, 0, 0}},
         M::kCausalBottomRight},
        {"single_piece_inside_chunk_empty_rows", 16, 16, 192, 128, {{300, 144, 100, 256}}, M::kCausalBottomRight},
        {"single_prefix_piece_all_visible", 16, 16, 192, 128, {{65, 100, 100, 0}}, M::kAllVisible},
        {"seq_without_keys", 4, 4, 64, 64, {{5, 0, 3, 0}, {9, 9, 0, 0}}, M::kCausalBottomRight},
        {"non_causal", 3, 3, 64, 64, {{17, 40, 0, 0}, {2, 70, 0, 0}}, M::kAllVisible, false},
        {"gqa_8_2", 8, 2, 128, 128, {{33, 33, 0, 0}, {64, 100, 36, 0}}, M::kCausalBottomRight},
        {"padded_strides",
         16,
         16,
         192,
         128,
         {{63, 63, 0, 0}, {65, 80, 15, 0}},
         M::kCausalBottomRight,
         true,
         Layout::kPadded},
        {"mla_mha_layout_h16",
         16,
         16,
         192,
         128,
         {{63, 63, 0, 0}, {64, 64, 0, 0}, {65, 65, 0, 0}},
         M::kCausalBottomRight,
         true,
         Layout::kMlaMha},
        {"mla_mha_layout_h128_prefix",
         128,
         128,
         192,
         128,
         {{65, 129, 64, 0}},
         M::kCausalBottomRight,
         true,
         Layout::kMlaMha},
    };
}

TEST_F(AttentionCudnnTest, MatchesReference) {
    if (!cuda::attention_cudnn_built()) GTEST_SKIP() << "built without cuDNN (PENSTOCK_CUDNN)";
    uint32_t seed = 2600;
    int taken = 0, n = 0;
    for (const Case& c : conformance_cases()) {
        const bool t = check(c, DType::kBF16, seed++,
                             [&](const kernels::AttentionParams& p) { return cuda::attention_cudnn(p, raw_stream()); });
        EXPECT_TRUE(t) << c.name << ": the cuDNN path declined a case it covers";
        taken += t ? 1 : 0;
        ++n;
        if (HasFatalFailure()) return;
    }
    std::printf("[conf] attention_cudnn | cases taken by cuDNN | %d of %d\n", taken, n);
}

// cuda::attention with a mask promise gives the reference's result whichever path runs it. Also with k_rope
// (AttentionParams): with a mask promise the bf16 wgmma kernel reads it (on sm_90); without one (kGeneral), in f32
// or when cuDNN is forced, cuda::attention concatenates k and k_rope for the other paths; and cuDNN's path declines
// k_rope itself.
TEST_F(AttentionCudnnTest, DispatchMatchesReference) {
    using M = AttentionMaskKind;
    uint32_t seed = 2700;
    std::vector<Case> cases = conformance_cases();
    cases.push_back({"k_rope_promised",
                     8,
                     8,
                     192,
                     128,
                     {{300, 300, 0, 0}, {17, 40, 23, 0}},
                     M::kCausalBottomRight,
                     true,
                     Layout::kMlaRope});
    cases.push_back({"k_rope_general_mask",
                     8,
                     8,
                     192,
                     128,
                     {{300, 300, 0, 0}, {17, 40, 23, 0}},
                     M::kGeneral,
                     true,
                     Layout::kMlaRope});
    cases.push_back(
        {"k_rope_heads_general_mask", 8, 2, 192, 128, {{200, 200, 0, 0}}, M::kGeneral, true, Layout::kMlaRopeHeads});
    for (const Case& c : cases) {
        check(c, DType::kBF16, seed++, [&](const kernels::AttentionParams& p) {
            cuda::attention(p, raw_stream());
            return true;
        });
        if (HasFatalFailure()) return;
    }
    check(cases[cases.size() - 3], DType::kF32, seed++, [&](const kernels::AttentionParams& p) {
        cuda::attention(p, raw_stream());
        return true;
    });
    setenv("PENSTOCK_ATTENTION_KERNEL", "cudnn", /*overwrite=*/1);  // the bf16 kernel declines: concatenated first
    check(cases[cases.size() - 3], DType::kBF16, seed++, [&](const kernels::AttentionParams& p) {
        EXPECT_FALSE(cuda::attention_cudnn(p, raw_stream())) << "cuDNN's path must decline k_rope";
        cuda::attention(p, raw_stream());
        return true;
    });
    unsetenv("PENSTOCK_ATTENTION_KERNEL");
}

// Penstock's bf16 wgmma kernel (attention_bf16_wgmma.h) on every conformance case above and on cases of several key
// tiles (128 keys each): long single sequences, ragged batches across tile edges, cached prefixes (more keys than
// queries, bottom-right diagonal), a key piece that starts inside the chunk, all-visible, GQA, the three head-dim
// pairs, and no lse. It must take every case (all are within its contract); on a GPU other than sm_90 it declines
// and the test skips. Also with the warpgroup ping-pong switched off (PENSTOCK_ATTN_PINGPONG=0) and with the exact
// running max (PENSTOCK_ATTN_MAX_SLACK=0).
TEST_F(AttentionCudnnTest, Bf16WgmmaKernelMatchesReference) {
    const auto props = cuda::device_properties(0);
    if (!props.ok() || props->cc_major != 9) GTEST_SKIP() << "the bf16 wgmma kernel needs sm_90";
    using M = AttentionMaskKind;
    std::vector<Case> cases = conformance_cases();
    const std::vector<Seq> across_tiles = {{127, 127, 0, 0}, {128, 128, 0, 0}, {129, 129, 0, 0},
                                           {257, 257, 0, 0}, {385, 385, 0, 0}, {2, 2, 0, 0}};
    for (const auto& [dqk, dv] : {std::pair<int64_t, int64_t>{192, 128}, {128, 128}, {64, 64}}) {
        std::string d = "_";  // (built by appends: GCC 12's -Wrestrict misfires on literal + string chains)
        d.append(std::to_string(dqk)).append("_").append(std::to_string(dv));
        cases.push_back({"long_1000" + d, 4, 4, dqk, dv, {{1000, 1000, 0, 0}}, M::kCausalBottomRight});
        cases.push_back({"ragged_across_tiles" + d, 3, 3, dqk, dv, across_tiles, M::kCausalBottomRight});
        cases.push_back(
            {"prefix_700_of_1500" + d, 4, 4, dqk, dv, {{700, 1500, 800, 0}, {300, 310, 10, 0}}, M::kCausalBottomRight});
        cases.push_back(
            {"all_visible_long" + d, 2, 2, dqk, dv, {{130, 900, 900, 0}, {64, 300, 300, 0}}, M::kAllVisible});
    }
    cases.push_back({"piece_inside_chunk_long", 4, 4, 192, 128, {{900, 400, 100, 600}}, M::kCausalBottomRight});
    cases.push_back({"non_causal_long", 4, 4, 128, 128, {{300, 700, 0, 0}, {700, 300, 0, 0}}, M::kAllVisible, false});
    cases.push_back({"gqa_16_4_long", 16, 4, 128, 128, {{600, 600, 0, 0}, {40, 520, 480, 0}}, M::kCausalBottomRight});
    cases.push_back(
        {"mla_mha_layout_long", 8, 8, 192, 128, {{777, 777, 0, 0}}, M::kCausalBottomRight, true, Layout::kMlaMha});
    cases.push_back(
        {"padded_long", 4, 4, 192, 128, {{500, 650, 150, 0}}, M::kCausalBottomRight, true, Layout::kPadded, false});
    // K's rope columns from AttentionParams::k_rope (models/mla.cc): broadcast over the heads, or per head.
    cases.push_back(
        {"mla_k_rope_long", 8, 8, 192, 128, {{777, 777, 0, 0}}, M::kCausalBottomRight, true, Layout::kMlaRope});
    cases.push_back({"mla_k_rope_ragged", 3, 3, 192, 128, across_tiles, M::kCausalBottomRight, true, Layout::kMlaRope});
    cases.push_back({"mla_k_rope_prefix",
                     4,
                     4,
                     192,
                     128,
                     {{700, 1500, 800, 0}, {300, 310, 10, 0}},
                     M::kCausalBottomRight,
                     true,
                     Layout::kMlaRope});
    cases.push_back({"mla_k_rope_heads_gqa",
                     8,
                     2,
                     192,
                     128,
                     {{600, 600, 0, 0}, {40, 520, 480, 0}},
                     M::kCausalBottomRight,
                     true,
                     Layout::kMlaRopeHeads});
    cases.push_back(
        {"mla_k_rope_d128", 4, 4, 128, 128, {{300, 300, 0, 0}}, M::kCausalBottomRight, true, Layout::kMlaRope});
    // The persistent kernel's work items: sequences without query rows (or without anything) between others, and
    // more sequences than the kernel's item prefix takes (the dense grid of items, most past their sequence).
    cases.push_back({"empty_q_seqs",
                     4,
                     4,
                     192,
                     128,
                     {{0, 5, 5, 0}, {130, 130, 0, 0}, {0, 0, 0, 0}, {40, 90, 50, 0}, {0, 7, 7, 0}},
                     M::kCausalBottomRight});
    std::vector<Seq> many;
    for (int i = 0; i < 300; ++i) {
        const int32_t len = i == 150 ? 260 : 1 + i % 5;
        many.push_back({len, len, 0, 0});
    }
    cases.push_back({"many_seqs_dense", 2, 2, 128, 128, many, M::kCausalBottomRight});
    // Passes: the default (ping-pong on, the softmax's default max slack) with lse; without lse; with the warpgroups'
    // ping-pong off (PENSTOCK_ATTN_PINGPONG=0, the other issue schedule); with the exact running max
    // (PENSTOCK_ATTN_MAX_SLACK=0: a warp keeps its maxima only while no row's tile max exceeds them). The last three on
    // the cases of at most two sequences.
    struct Pass {
        const char* suffix;
        bool lse, pingpong, exact_max;
    };
    uint32_t seed = 2900;
    int n = 0;
    for (const Pass& pass : {Pass{"", true, true, false}, Pass{"_no_lse", false, true, false},
                             Pass{"_no_pingpong", true, false, false}, Pass{"_max_slack0", true, true, true}}) {
        if (!pass.pingpong) setenv("PENSTOCK_ATTN_PINGPONG", "0", /*overwrite=*/1);
        if (pass.exact_max) setenv("PENSTOCK_ATTN_MAX_SLACK", "0", /*overwrite=*/1);
        for (const Case& c : cases) {
            if ((!pass.lse || !pass.pingpong || pass.exact_max) && c.seqs.size() > 2) continue;
            Case named = c;
            named.want_lse = pass.lse;
            named.name += pass.suffix;
            const bool t = check(named, DType::kBF16, seed++, [&](const kernels::AttentionParams& p) {
                return cuda::attention_bf16_wgmma(p, static_cast<cudaStream_t>(raw_stream()));
            });
            EXPECT_TRUE(t) << named.name << ": the bf16 wgmma kernel declined a case it covers";
            ++n;
            if (HasFatalFailure()) break;
        }
        unsetenv("PENSTOCK_ATTN_PINGPONG");
        unsetenv("PENSTOCK_ATTN_MAX_SLACK");
        if (HasFatalFailure()) return;
    }
    std::printf("[conf] attention_bf16_wgmma | cases | %d\n", n);
}

TEST_F(AttentionCudnnTest, DeclinesWhatItDoesNotCover) {
    using M = AttentionMaskKind;
    const std::vector<Seq> seqs = {{17, 17, 0, 0}};
    auto declines = [&](const Case& c, DType dt) {
        return !check(
            c, dt, 2800, [&](const kernels::AttentionParams& p) { return cuda::attention_cudnn(p, raw_stream()); },
            /*compare=*/false);
    };
    EXPECT_TRUE(declines({"no_promise", 4, 4, 64, 64, seqs, M::kGeneral}, DType::kBF16));
    EXPECT_TRUE(declines({"f32", 4, 4, 64, 64, seqs, M::kCausalBottomRight}, DType::kF32));
    EXPECT_TRUE(
        declines({"misaligned", 4, 4, 64, 64, seqs, M::kCausalBottomRight, true, Layout::kMisaligned}, DType::kBF16));
    EXPECT_TRUE(declines({"bottom_right_not_causal", 4, 4, 64, 64, seqs, M::kCausalBottomRight, false}, DType::kBF16));
    EXPECT_TRUE(declines({"d_qk_not_multiple_of_8", 4, 4, 60, 64, seqs, M::kCausalBottomRight}, DType::kBF16));
}

}  // namespace
}  // namespace penstock::test
