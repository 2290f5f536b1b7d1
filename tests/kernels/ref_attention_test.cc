// CPU reference attention tests: varlen causal attention in absolute positions against a naive double computation
// (GQA ratios 1/3/4, MQA with v a strided view of k's first d_v columns, cached prefixes, rows with no visible key,
// non-causal), merge_attention against a naive log-sum-exp merge, split-keys + merge == one-shot, thread-count
// independence, the host-side hints (checked, never used), and k_rope (the keys' last columns from a second, possibly
// head-broadcast tensor).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/ref/ref_ops.h"
#include "ref_test_util.h"

namespace penstock::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct SeqSpec {
    int32_t len_q, len_k, q_pos0, k_pos0;
};

struct AttnCase {
    std::string name;
    int64_t n_heads, n_kv_heads, d_qk, d_v;
    std::vector<SeqSpec> seqs;
    bool causal = true;
    bool strided = false;
    bool v_in_k = false;  // MLA absorbed form: v = k[:, :, :d_v]
};

// Inputs of one attention call; the views point into the owned buffers.
struct AttnInputs {
    Buffer q, k, v;
    TensorView v_view;
    Tensor cu_q, cu_k, q_pos0, k_pos0;
    int64_t total_q = 0, total_k = 0;
};

AttnInputs make_inputs(std::mt19937& rng, const AttnCase& c) {
    AttnInputs in;
    std::vector<int32_t> cu_q{0}, cu_k{0}, qp, kp;
    for (const SeqSpec& s : c.seqs) {
        cu_q.push_back(cu_q.back() + s.len_q);
        cu_k.push_back(cu_k.back() + s.len_k);
        qp.push_back(s.q_pos0);
        kp.push_back(s.k_pos0);
    }
    in.total_q = cu_q.back();
    in.total_k = cu_k.back();
    in.q = random_buffer(rng, {in.total_q, c.n_heads, c.d_qk}, c.strided);
    in.k = random_buffer(rng, {in.total_k, c.n_kv_heads, c.d_qk}, c.strided);
    if (c.v_in_k) {
        in.v_view = in.k.view.slice(2, 0, c.d_v);
    } else {
        in.v = random_buffer(rng, {in.total_k, c.n_kv_heads, c.d_v}, c.strided);
        in.v_view = in.v.view;
    }
    in.cu_q = i32_tensor(cu_q);
    in.cu_k = i32_tensor(cu_k);
    in.q_pos0 = i32_tensor(qp);
    in.k_pos0 = i32_tensor(kp);
    return in;
}

struct AttnOutputs {
    Tensor out, lse;
};

AttnOutputs run_ref(const AttnCase& c, const AttnInputs& in, ThreadPool* pool) {
    AttnOutputs o{Tensor::from_f32({in.total_q, c.n_heads, c.d_v},
                                   std::vector<float>(size_t(in.total_q * c.n_heads * c.d_v), NAN)),
                  Tensor::from_f32({in.total_q, c.n_heads}, std::vector<float>(size_t(in.total_q * c.n_heads), NAN))};
    ref::attention({.out = o.out,
                    .lse = o.lse,
                    .q = in.q.view,
                    .k = in.k.view,
                    .v = in.v_view,
                    .cu_seqlens_q = in.cu_q,
                    .cu_seqlens_k = in.cu_k,
                    .q_pos0 = in.q_pos0,
                    .k_pos0 = in.k_pos0,
                    .scale = 1.0f / std::sqrt(static_cast<float>(c.d_qk)),
                    .causal = c.causal},
                   pool);
    return o;
}

// Naive attention in double, straight from the definition in ops.h.
void naive_attention(const AttnCase& c, const AttnInputs& in, std::vector<double>* out, std::vector<double>* lse) {
    const std::vector<float> q = read_f32(in.q.view), k = read_f32(in.k.view), v = read_f32(in.v_view);
    const double scale = 1.0f / std::sqrt(static_cast<float>(c.d_qk));
    out->assign(size_t(in.total_q * c.n_heads * c.d_v), 0.0);
    lse->assign(size_t(in.total_q * c.n_heads), -kInf);
    int64_t q_start = 0, k_start = 0;
    for (const SeqSpec& s : c.seqs) {
        for (int64_t i = 0; i < s.len_q; ++i) {
            const int64_t row = q_start + i;
            for (int64_t h = 0; h < c.n_heads; ++h) {
                const int64_t kvh = h / (c.n_heads / c.n_kv_heads);
                std::vector<double> score;
                std::vector<int64_t> key;
                for (int64_t j = 0; j < s.len_k; ++j) {
                    if (c.causal && s.k_pos0 + j > s.q_pos0 + i) continue;
                    double dot = 0;
                    for (int64_t d = 0; d < c.d_qk; ++d) {
                        dot += double(q[size_t((row * c.n_heads + h) * c.d_qk + d)]) *
                               k[size_t(((k_start + j) * c.n_kv_heads + kvh) * c.d_qk + d)];
                    }
                    score.push_back(scale * dot);
                    key.push_back(k_start + j);
                }
                if (score.empty()) continue;
                double mx = -kInf, sum = 0;
                for (double x : score) mx = std::max(mx, x);
                for (double x : score) sum += std::exp(x - mx);
                (*lse)[size_t(row * c.n_heads + h)] = mx + std::log(sum);
                for (size_t j = 0; j < score.size(); ++j) {
                    const double p = std::exp(score[j] - mx) / sum;
                    for (int64_t d = 0; d < c.d_v; ++d) {
                        (*out)[size_t((row * c.n_heads + h) * c.d_v + d)] +=
                            p * v[size_t((key[j] * c.n_kv_heads + kvh) * c.d_v + d)];
                    }
                }
            }
        }
        q_start += s.len_q;
        k_start += s.len_k;
    }
}

const std::vector<AttnCase>& cases() {
    static const std::vector<AttnCase> kCases = {
        {"one_row", 1, 1, 8, 8, {{1, 1, 0, 0}}},
        {"gqa1_prefill", 4, 4, 16, 16, {{5, 5, 0, 0}}},
        {"gqa4_varlen_cached_prefix", 8, 2, 32, 32, {{7, 7, 0, 0}, {3, 10, 7, 0}, {1, 13, 12, 0}}, true, true},
        {"mqa_v_in_k", 8, 1, 36, 32, {{4, 9, 5, 0}, {6, 6, 0, 0}, {2, 5, 3, 0}}, true, true, true},
        {"gqa3_odd_sizes", 6, 2, 5, 3, {{3, 3, 0, 0}, {2, 4, 2, 0}}, true, true},
        {"non_causal", 4, 2, 8, 8, {{3, 5, 0, 0}, {4, 2, 0, 0}}, false},
        {"no_visible_key", 2, 1, 8, 8, {{4, 3, 0, 2}, {2, 0, 0, 0}}},
        {"chunk_with_offset_keys", 4, 1, 12, 12, {{3, 6, 8, 4}}},
    };
    return kCases;
}

TEST(RefAttention, MatchesNaive) {
    constexpr uint32_t kSeed = 1111;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (const AttnCase& c : cases()) {
        SCOPED_TRACE(c.name);
        const AttnInputs in = make_inputs(rng, c);
        const AttnOutputs o = run_ref(c, in, nullptr);
        std::vector<double> out, lse;
        naive_attention(c, in, &out, &lse);
        EXPECT_TRUE(all_close(read_f32(o.out), out, kF32Reduction, {in.total_q, c.n_heads, c.d_v})) << "out";
        EXPECT_TRUE(all_close(read_f32(o.lse), lse, kF32Reduction, {in.total_q, c.n_heads})) << "lse";
    }
}

TEST(RefAttention, RowWithNoVisibleKeyIsZeroWithMinusInfLse) {
    constexpr uint32_t kSeed = 1212;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    // Sequence 0: queries at 0..3, keys at 2..4 -> rows 0 and 1 see nothing. Sequence 1 has no keys at all.
    const AttnCase& c = cases()[6];
    ASSERT_EQ(c.name, "no_visible_key");
    const AttnInputs in = make_inputs(rng, c);
    const AttnOutputs o = run_ref(c, in, nullptr);
    for (int64_t row : {0, 1, 4, 5}) {
        for (int64_t h = 0; h < c.n_heads; ++h) {
            EXPECT_EQ(*o.lse.view().at<float>({row, h}), -std::numeric_limits<float>::infinity()) << row;
            for (int64_t d = 0; d < c.d_v; ++d) EXPECT_EQ(o.out.view().at<float>({row, h})[d], 0.0f) << row;
        }
    }
    for (int64_t row : {2, 3}) EXPECT_TRUE(std::isfinite(*o.lse.view().at<float>({row, 0}))) << row;
}

// Naive merge in double.
void naive_merge(const std::vector<float>& out, const std::vector<float>& lse, const std::vector<float>& in_out,
                 const std::vector<float>& in_lse, int64_t d_v, std::vector<double>* m_out,
                 std::vector<double>* m_lse) {
    m_out->clear();
    m_lse->clear();
    for (size_t r = 0; r < lse.size(); ++r) {
        const double a = lse[r], b = in_lse[r];
        const double l = (a == -kInf && b == -kInf) ? -kInf : std::log(std::exp(a) + std::exp(b));
        m_lse->push_back(l);
        for (int64_t d = 0; d < d_v; ++d) {
            const size_t i = r * size_t(d_v) + size_t(d);
            const double wa = a == -kInf ? 0.0 : std::exp(a - l), wb = b == -kInf ? 0.0 : std::exp(b - l);
            m_out->push_back(l == -kInf ? out[i] : wa * out[i] + wb * in_out[i]);
        }
    }
}

TEST(RefMergeAttention, MatchesNaiveWithMinusInfOnEitherSide) {
    constexpr uint32_t kSeed = 1313;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const int64_t n_rows = 9, n_heads = 3, d_v = 7;
    std::vector<float> out = random_floats(rng, n_rows * n_heads * d_v);
    std::vector<float> in_out = random_floats(rng, n_rows * n_heads * d_v);
    std::vector<float> lse = random_floats(rng, n_rows * n_heads, -5.0f, 5.0f);
    std::vector<float> in_lse = random_floats(rng, n_rows * n_heads, -5.0f, 5.0f);
    const float ninf = -std::numeric_limits<float>::infinity();
    // Row 0: running side empty; row 1: partial side empty; row 2: both empty (out 0); row 3: very different lse.
    for (int64_t h = 0; h < n_heads; ++h) {
        lse[size_t(0 * n_heads + h)] = ninf;
        in_lse[size_t(1 * n_heads + h)] = ninf;
        lse[size_t(2 * n_heads + h)] = ninf;
        in_lse[size_t(2 * n_heads + h)] = ninf;
        lse[size_t(3 * n_heads + h)] = 80.0f;
        in_lse[size_t(3 * n_heads + h)] = -80.0f;
        for (int64_t d = 0; d < d_v; ++d) out[size_t((2 * n_heads + h) * d_v + d)] = 0.0f;
    }
    std::vector<double> m_out, m_lse;
    naive_merge(out, lse, in_out, in_lse, d_v, &m_out, &m_lse);
    Tensor t_out = Tensor::from_f32({n_rows, n_heads, d_v}, out), t_lse = Tensor::from_f32({n_rows, n_heads}, lse);
    const Tensor t_in_out = Tensor::from_f32({n_rows, n_heads, d_v}, in_out);
    const Tensor t_in_lse = Tensor::from_f32({n_rows, n_heads}, in_lse);
    ref::merge_attention({.out = t_out, .lse = t_lse, .in_out = t_in_out, .in_lse = t_in_lse}, nullptr);
    EXPECT_TRUE(all_close(read_f32(t_out), m_out, kF32Reduction, {n_rows, n_heads, d_v}));
    EXPECT_TRUE(all_close(read_f32(t_lse), m_lse, kF32Reduction, {n_rows, n_heads}));
    for (int64_t h = 0; h < n_heads; ++h) {
        EXPECT_EQ(*t_lse.view().at<float>({2, h}), ninf);
        for (int64_t d = 0; d < d_v; ++d) EXPECT_EQ(t_out.view().at<float>({2, h})[d], 0.0f);
    }
}

// Copies key rows [begin_s, end_s) of every sequence into a new contiguous [rows, n_kv_heads, d] tensor.
Tensor gather_keys(const TensorView& src, const std::vector<SeqSpec>& seqs, const std::vector<int32_t>& begin,
                   const std::vector<int32_t>& end) {
    const std::vector<float> all = read_f32(src);
    const int64_t row_len = src.size(1) * src.size(2);
    std::vector<float> picked;
    int64_t start = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
        for (int64_t j = begin[s]; j < end[s]; ++j) {
            const auto* row = &all[size_t((start + j) * row_len)];
            picked.insert(picked.end(), row, row + row_len);
        }
        start += seqs[s].len_k;
    }
    return Tensor::from_f32({int64_t(picked.size()) / row_len, src.size(1), src.size(2)}, picked);
}

TEST(RefAttention, SplitKeysThenMergeEqualsOneShot) {
    constexpr uint32_t kSeed = 1414;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    // Split points: middle, nothing in the first piece, nothing in the second, and a sequence whose early rows see no
    // key in either piece (keys start at position 3).
    const AttnCase c{"split", 8, 2, 16, 12, {{7, 7, 0, 0}, {3, 10, 7, 0}, {2, 6, 4, 0}, {5, 4, 0, 3}}, true, true};
    const std::vector<int32_t> split = {3, 0, 6, 2};
    const AttnInputs in = make_inputs(rng, c);
    const AttnOutputs one_shot = run_ref(c, in, nullptr);

    std::vector<int32_t> zero(c.seqs.size(), 0), len(c.seqs.size());
    for (size_t s = 0; s < c.seqs.size(); ++s) len[s] = c.seqs[s].len_k;
    AttnCase ca = c, cb = c;
    for (size_t s = 0; s < c.seqs.size(); ++s) {
        ca.seqs[s].len_k = split[s];
        cb.seqs[s].len_k = c.seqs[s].len_k - split[s];
        cb.seqs[s].k_pos0 = c.seqs[s].k_pos0 + split[s];
    }
    auto piece_inputs = [&](const AttnCase& pc, const std::vector<int32_t>& b, const std::vector<int32_t>& e) {
        AttnInputs p;
        p.q = in.q;
        p.k.backing = gather_keys(in.k.view, c.seqs, b, e);
        p.k.view = p.k.backing.view();
        p.v.backing = gather_keys(in.v_view, c.seqs, b, e);
        p.v_view = p.v.view = p.v.backing.view();
        std::vector<int32_t> cu_k{0}, kp;
        for (const SeqSpec& s : pc.seqs) {
            cu_k.push_back(cu_k.back() + s.len_k);
            kp.push_back(s.k_pos0);
        }
        p.cu_q = in.cu_q;
        p.q_pos0 = in.q_pos0;
        p.cu_k = i32_tensor(cu_k);
        p.k_pos0 = i32_tensor(kp);
        p.total_q = in.total_q;
        p.total_k = cu_k.back();
        return p;
    };
    const AttnOutputs a = run_ref(ca, piece_inputs(ca, zero, split), nullptr);
    const AttnOutputs b = run_ref(cb, piece_inputs(cb, split, len), nullptr);
    ref::merge_attention({.out = a.out, .lse = a.lse, .in_out = b.out, .in_lse = b.lse}, nullptr);

    const Tolerance tol{1e-5, 1e-5};
    EXPECT_TRUE(all_close(read_f32(a.out), to_double(read_f32(one_shot.out)), tol, {in.total_q, c.n_heads, c.d_v}));
    EXPECT_TRUE(all_close(read_f32(a.lse), to_double(read_f32(one_shot.lse)), tol, {in.total_q, c.n_heads}));
    // Sequence 3's first rows (positions 0..2 < 3) see no key in either piece: out stays 0, lse -inf, no NaN.
    const int64_t row = 7 + 3 + 2;
    EXPECT_EQ(*a.lse.view().at<float>({row, 0}), -std::numeric_limits<float>::infinity());
    EXPECT_EQ(a.out.view().at<float>({row, 0})[0], 0.0f);
}

TEST(RefAttention, ThreadCountIndependent) {
    constexpr uint32_t kSeed = 1515;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const AttnCase c{"threads", 8, 2, 24, 16, {{31, 31, 0, 0}, {17, 40, 23, 0}, {9, 9, 0, 0}}, true, true};
    const AttnInputs in = make_inputs(rng, c);
    ThreadPool pool1(1), pool3(3);
    const AttnOutputs serial = run_ref(c, in, nullptr);
    for (ThreadPool* pool : {&pool1, &pool3}) {
        const AttnOutputs o = run_ref(c, in, pool);
        EXPECT_TRUE(same_bits(read_f32(serial.out), read_f32(o.out))) << "pool size " << pool->size();
        EXPECT_TRUE(same_bits(read_f32(serial.lse), read_f32(o.lse))) << "pool size " << pool->size();
    }
    // merge_attention too.
    const Tensor in_out = Tensor::from_f32({in.total_q, c.n_heads, c.d_v}, read_f32(serial.out));
    const Tensor in_lse = Tensor::from_f32({in.total_q, c.n_heads}, random_floats(rng, in.total_q * c.n_heads));
    std::vector<std::vector<float>> results;
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool1, &pool3}) {
        const AttnOutputs o = run_ref(c, in, nullptr);
        ref::merge_attention({.out = o.out, .lse = o.lse, .in_out = in_out, .in_lse = in_lse}, pool);
        results.push_back(read_f32(o.out));
    }
    EXPECT_TRUE(same_bits(results[0], results[1]));
    EXPECT_TRUE(same_bits(results[0], results[2]));
}

// AttentionParams::k_rope: the keys' last columns from a second tensor, per kv head or broadcast over the heads by a
// stride-0 view (MLA's MHA form). The result is bit for bit that of one k holding [k ; k_rope] per row and head, and
// k_rope whose rows, heads or dtype differ from k's aborts.
TEST(RefAttention, KRopeIsTheKeysLastColumns) {
    constexpr uint32_t kSeed = 1717;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    for (const bool bcast : {false, true}) {
        SCOPED_TRACE(bcast ? "broadcast over heads" : "per kv head");
        const AttnCase c{"k_rope", 4, 2, 24, 16, {{9, 9, 0, 0}, {5, 12, 7, 0}}, true, true};
        AttnInputs in = make_inputs(rng, c);
        const int64_t dk = 16, dr = c.d_qk - dk;
        const Buffer rope = random_buffer(rng, {in.total_k, bcast ? 1 : c.n_kv_heads, dr}, true);
        const TensorView k_rope =
            bcast ? rope.view.as_strided(0, {in.total_k, c.n_kv_heads, dr}, {rope.view.stride(0), 0, 1}) : rope.view;
        // The joined k: [k[:, :, :dk] ; k_rope] written into the case's own k, which the plain call then reads whole.
        ref::copy({.out = in.k.view.slice(2, dk, c.d_qk), .in = k_rope}, nullptr);
        const AttnOutputs whole = run_ref(c, in, nullptr);
        AttnOutputs split{
            Tensor::from_f32({in.total_q, c.n_heads, c.d_v},
                             std::vector<float>(size_t(in.total_q * c.n_heads * c.d_v), NAN)),
            Tensor::from_f32({in.total_q, c.n_heads}, std::vector<float>(size_t(in.total_q * c.n_heads), NAN))};
        kernels::AttentionParams p{.out = split.out,
                                   .lse = split.lse,
                                   .q = in.q.view,
                                   .k = in.k.view.slice(2, 0, dk),
                                   .v = in.v_view,
                                   .k_rope = k_rope,
                                   .cu_seqlens_q = in.cu_q,
                                   .cu_seqlens_k = in.cu_k,
                                   .q_pos0 = in.q_pos0,
                                   .k_pos0 = in.k_pos0,
                                   .scale = 1.0f / std::sqrt(static_cast<float>(c.d_qk)),
                                   .causal = c.causal};
        ref::attention(p, nullptr);
        EXPECT_TRUE(same_bits(read_f32(whole.out), read_f32(split.out))) << "out";
        EXPECT_TRUE(same_bits(read_f32(whole.lse), read_f32(split.lse))) << "lse";
        std::vector<double> out, lse;
        naive_attention(c, in, &out, &lse);
        EXPECT_TRUE(all_close(read_f32(split.out), out, kF32Reduction, {in.total_q, c.n_heads, c.d_v})) << "naive";
        p.k_rope = k_rope.slice(0, 0, in.total_k - 1);
        EXPECT_DEATH(ref::attention(p, nullptr), "k_rope");
    }
}

// The host-side hints (max_seqlen_q/k, mask_kind) never change the reference's result, and a hint the metadata
// contradicts aborts (a backend that plans from it would compute something else).
TEST(RefAttention, HintsAreCheckedNeverUsed) {
    constexpr uint32_t kSeed = 1616;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    // Sequence 0: the last piece of a prefix (bottom-right); 1: no keys (exempt from the promise); 2: no prefix.
    const AttnCase c{"hints", 4, 2, 16, 8, {{5, 12, 7, 0}, {3, 0, 9, 0}, {6, 6, 0, 0}}};
    const AttnInputs in = make_inputs(rng, c);
    const AttnOutputs plain = run_ref(c, in, nullptr);
    auto run_hinted = [&](int32_t max_q, int32_t max_k, kernels::AttentionMaskKind mask, bool causal = true) {
        AttnOutputs o{Tensor::from_f32({in.total_q, c.n_heads, c.d_v},
                                       std::vector<float>(size_t(in.total_q * c.n_heads * c.d_v), NAN)),
                      Tensor::from_f32({in.total_q, c.n_heads}, std::vector<float>(size_t(in.total_q * c.n_heads)))};
        ref::attention({.out = o.out,
                        .lse = o.lse,
                        .q = in.q.view,
                        .k = in.k.view,
                        .v = in.v_view,
                        .cu_seqlens_q = in.cu_q,
                        .cu_seqlens_k = in.cu_k,
                        .q_pos0 = in.q_pos0,
                        .k_pos0 = in.k_pos0,
                        .scale = 1.0f / std::sqrt(static_cast<float>(c.d_qk)),
                        .causal = causal,
                        .max_seqlen_q = max_q,
                        .max_seqlen_k = max_k,
                        .mask_kind = mask},
                       nullptr);
        return o;
    };
    const AttnOutputs hinted = run_hinted(6, 12, kernels::AttentionMaskKind::kCausalBottomRight);
    EXPECT_TRUE(same_bits(read_f32(plain.out), read_f32(hinted.out)));
    EXPECT_TRUE(same_bits(read_f32(plain.lse), read_f32(hinted.lse)));
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(run_hinted(5, 12, kernels::AttentionMaskKind::kGeneral), "max_seqlen_q");
    EXPECT_DEATH(run_hinted(0, 11, kernels::AttentionMaskKind::kGeneral), "max_seqlen_k");
    EXPECT_DEATH(run_hinted(0, 0, kernels::AttentionMaskKind::kAllVisible), "kAllVisible");
    EXPECT_DEATH(run_hinted(0, 0, kernels::AttentionMaskKind::kCausalBottomRight, /*causal=*/false),
                 "kCausalBottomRight");
    // All keys before every row: kAllVisible holds (and kCausalBottomRight does not).
    const AttnCase prefix{"prefix", 2, 2, 8, 8, {{4, 10, 10, 0}, {2, 3, 3, 0}}};
    const AttnInputs pin = make_inputs(rng, prefix);
    ref::attention({.out = Tensor::from_f32({6, 2, 8}, std::vector<float>(96)),
                    .lse = Tensor::from_f32({6, 2}, std::vector<float>(12)),
                    .q = pin.q.view,
                    .k = pin.k.view,
                    .v = pin.v_view,
                    .cu_seqlens_q = pin.cu_q,
                    .cu_seqlens_k = pin.cu_k,
                    .q_pos0 = pin.q_pos0,
                    .k_pos0 = pin.k_pos0,
                    .mask_kind = kernels::AttentionMaskKind::kAllVisible},
                   nullptr);
}

// Runs `p` (FP8 q / k / v) with an f32 out and lse, and the f32 attention of (qf, kf, vf) under the same metadata;
// expects the same out and lse bit for bit. Returns the f32 attention's out.
Tensor expect_fp8_equals_f32_of(kernels::AttentionParams p, const Tensor& qf, const Tensor& kf, const Tensor& vf) {
    const int64_t tq = p.q.size(0), heads = p.q.size(1), dv = p.v.size(2);
    Tensor want = Tensor::empty({tq, heads, dv}, DType::kF32);
    Tensor want_lse = Tensor::empty({tq, heads}, DType::kF32);
    kernels::AttentionParams pf = p;
    pf.q = qf;
    pf.k = kf;
    pf.v = vf;
    pf.out = want;
    pf.lse = want_lse;
    ref::attention(pf, nullptr);
    Tensor got = Tensor::empty({tq, heads, dv}, DType::kF32);
    Tensor got_lse = Tensor::empty({tq, heads}, DType::kF32);
    p.out = got;
    p.lse = got_lse;
    ref::attention(p, nullptr);
    EXPECT_EQ(read_f32(got), read_f32(want));
    EXPECT_EQ(read_f32(got_lse), read_f32(want_lse));
    return want;
}

// FP8 attention (kernels/ops.h): e4m3 q / k / v with per-tensor descales equal the f32 attention of the dequantised
// inputs; an FP8 out is that result times 1 / out_descale, rounded to e4m3, with out_descale = v_descale * headroom;
// and the whole is within FP8 accuracy of the f32 attention on the original inputs.
TEST(RefAttention, Fp8InputsAndOutput) {
    constexpr uint32_t kSeed = 2468;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const AttnCase c{"fp8_ragged", 4, 2, 32, 16, {{5, 5, 0, 0}, {9, 9, 0, 0}, {1, 1, 0, 0}}, true, true};
    const AttnInputs in = make_inputs(rng, c);
    auto quantize = [](const TensorView& x, Tensor* scale) {
        Tensor q = Tensor::empty({x.size(0), x.size(1), x.size(2)}, DType::kF8E4M3);
        *scale = Tensor::empty({1}, DType::kF32);
        ref::fp8_quantize_tensor({.out = q, .scale = *scale, .in = x}, nullptr);
        return q;
    };
    auto widen = [](const TensorView& x, const Tensor& scale) {
        Tensor f = Tensor::empty({x.size(0), x.size(1), x.size(2)}, DType::kF32);
        ref::fp8_dequantize_tensor({.out = f, .scale = scale, .in = x}, nullptr);
        return f;
    };
    Tensor qs, ks, vs;
    const Tensor q8 = quantize(in.q.view, &qs), k8 = quantize(in.k.view, &ks), v8 = quantize(in.v_view, &vs);
    kernels::AttentionParams p{.out = TensorView{},
                               .lse = TensorView{},
                               .q = q8,
                               .k = k8,
                               .v = v8,
                               .cu_seqlens_q = in.cu_q,
                               .cu_seqlens_k = in.cu_k,
                               .q_pos0 = in.q_pos0,
                               .k_pos0 = in.k_pos0,
                               .scale = 1.0f / std::sqrt(32.0f),
                               .mask_kind = kernels::AttentionMaskKind::kCausalBottomRight,
                               .equal_lengths = true,
                               .q_descale = qs,
                               .k_descale = ks,
                               .v_descale = vs};
    // f32 out: exactly the f32 attention of the dequantised inputs.
    const Tensor want = expect_fp8_equals_f32_of(p, widen(q8, qs), widen(k8, ks), widen(v8, vs));
    // FP8 out.
    Tensor o8 = Tensor::empty({in.total_q, c.n_heads, c.d_v}, DType::kF8E4M3);
    Tensor od = Tensor::from_f32({1}, std::vector<float>{-1.0f});
    p.out = o8;
    p.out_descale = od;
    ref::attention(p, nullptr);
    const float out_descale = vs.ptr<float>()[0] * kernels::kFp8AttnOutHeadroom;
    EXPECT_EQ(od.ptr<float>()[0], out_descale);
    const std::vector<float> w = read_f32(want);
    for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_EQ(o8.ptr<uint8_t>()[i], float_to_e4m3(w[i] * (1.0f / out_descale))) << i;
    }
    // Within FP8 accuracy of the unquantised f32 attention: relative RMS error a few percent.
    const AttnOutputs exact = run_ref(c, in, nullptr);
    const std::vector<float> e = read_f32(exact.out);
    const Tensor o8f = widen(o8, od);
    const std::vector<float> g = read_f32(o8f);
    double err = 0.0, ref_sq = 0.0;
    for (size_t i = 0; i < e.size(); ++i) {
        err += (g[i] - e[i]) * (g[i] - e[i]);
        ref_sq += e[i] * e[i];
    }
    std::printf("FP8 attention vs f32: relative RMS error %.4f\n", std::sqrt(err / ref_sq));
    EXPECT_LT(std::sqrt(err / ref_sq), 0.08) << "relative RMS error of the FP8 attention";
    EXPECT_GT(std::sqrt(err / ref_sq), 0.0) << "the FP8 path should round something";
}

// Per-row FP8 descales (q per row and head, k per block of keys of each sequence, fp8_quantize_heads): the result is
// the f32 attention of x * descale[row, head] dequantised here by hand; with k_descale_block promised the reference
// checks that the k descales are equal within each block and aborts on a broken promise.
TEST(RefAttention, Fp8PerRowDescales) {
    constexpr uint32_t kSeed = 2469;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const AttnCase c{"fp8_rows", 4, 2, 32, 16, {{5, 5, 0, 0}, {3, 9, 6, 0}, {1, 1, 0, 0}}, true, false};
    const AttnInputs in = make_inputs(rng, c);
    auto quantize = [](const TensorView& x, const TensorView& cu, int32_t block, Tensor* scale) {
        Tensor q = Tensor::empty({x.size(0), x.size(1), x.size(2)}, DType::kF8E4M3);
        *scale = Tensor::empty({x.size(0), x.size(1)}, DType::kF32);
        ref::fp8_quantize_heads({.out = q, .scale = *scale, .in = x, .cu_seqlens = cu, .block = block}, nullptr);
        return q;
    };
    auto widen = [](const Tensor& x, const Tensor& scale) {
        std::vector<float> f(static_cast<size_t>(x.numel()));
        const int64_t heads = x.size(1), d = x.size(2);
        for (int64_t i = 0; i < x.numel(); ++i) {
            f[static_cast<size_t>(i)] = e4m3_to_float(x.ptr<uint8_t>()[i]) * scale.ptr<float>()[i / d];
        }
        return Tensor::from_f32({x.size(0), heads, d}, f);
    };
    Tensor qs, ks, vs = Tensor::empty({1}, DType::kF32);
    const Tensor q8 = quantize(in.q.view, TensorView{}, 1, &qs);
    const Tensor k8 = quantize(in.k.view, in.cu_k, 4, &ks);
    Tensor v8 = Tensor::empty({in.total_k, c.n_kv_heads, c.d_v}, DType::kF8E4M3);
    ref::fp8_quantize_tensor({.out = v8, .scale = vs, .in = in.v_view}, nullptr);
    EXPECT_NE(qs.ptr<float>()[0], qs.ptr<float>()[c.n_heads]) << "per-row q scales should differ";
    kernels::AttentionParams p{.out = TensorView{},
                               .lse = TensorView{},
                               .q = q8,
                               .k = k8,
                               .v = v8,
                               .cu_seqlens_q = in.cu_q,
                               .cu_seqlens_k = in.cu_k,
                               .q_pos0 = in.q_pos0,
                               .k_pos0 = in.k_pos0,
                               .scale = 1.0f / std::sqrt(32.0f),
                               .mask_kind = kernels::AttentionMaskKind::kCausalBottomRight,
                               .q_descale = qs,
                               .k_descale = ks,
                               .v_descale = vs,
                               .k_descale_block = 4};
    Tensor vf = Tensor::empty({in.total_k, c.n_kv_heads, c.d_v}, DType::kF32);
    ref::fp8_dequantize_tensor({.out = vf, .scale = vs, .in = v8}, nullptr);
    expect_fp8_equals_f32_of(p, widen(q8, qs), widen(k8, ks), vf);
    Tensor got = Tensor::empty({in.total_q, c.n_heads, c.d_v}, DType::kF32);
    Tensor got_lse = Tensor::empty({in.total_q, c.n_heads}, DType::kF32);
    p.out = got;
    p.lse = got_lse;
    // A block of 4 keys holds one descale per head; promising blocks of 2 holds too (a refinement), blocks of 8 not.
    p.k_descale_block = 2;
    ref::attention(p, nullptr);
    p.k_descale_block = 8;
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(ref::attention(p, nullptr), "k_descale_block 8 promised");
    // Descales of the wrong shape.
    p.k_descale_block = 0;
    p.q_descale = ks;
    EXPECT_DEATH(ref::attention(p, nullptr), "q_descale must be");
    p.q_descale = qs;
    p.v_descale = qs;
    EXPECT_DEATH(ref::attention(p, nullptr), "v_descale is per tensor");
}

// out_scale (kernels/ops.h): an e4m3 out per row and head is the result in out_scale_from (bf16: rounded once; f32)
// followed by fp8_act_quant of its rows, bit for bit, with the scales in the block-FP8 GEMMs' transposed layout;
// 3 heads (not a power of two), a sequence whose rows see no key (out 0: the scale's 1e-4 floor), and the checks of
// the contract.
TEST(RefAttention, Fp8OutPerRowAndHeadIsActQuantOfTheResult) {
    constexpr uint32_t kSeed = 2471;
    PENSTOCK_SEEDED(kSeed);
    std::mt19937 rng(kSeed);
    const AttnCase c{"fp8_rows_out", 3, 3, 32, 128, {{5, 5, 0, 0}, {3, 9, 6, 0}, {2, 2, 0, 5}, {1, 1, 0, 0}}};
    const AttnInputs in = make_inputs(rng, c);
    auto quantize = [](const TensorView& x, Tensor* scale) {
        Tensor q = Tensor::empty({x.size(0), x.size(1), x.size(2)}, DType::kF8E4M3);
        *scale = Tensor::empty({1}, DType::kF32);
        ref::fp8_quantize_tensor({.out = q, .scale = *scale, .in = x}, nullptr);
        return q;
    };
    Tensor qs, ks, vs;
    const Tensor q8 = quantize(in.q.view, &qs), k8 = quantize(in.k.view, &ks), v8 = quantize(in.v_view, &vs);
    const int64_t tq = in.total_q, h = c.n_heads;
    Tensor f32 = Tensor::empty({tq, h, 128}, DType::kF32), lse_f32 = Tensor::empty({tq, h}, DType::kF32);
    kernels::AttentionParams p{.out = f32,
                               .lse = lse_f32,
                               .q = q8,
                               .k = k8,
                               .v = v8,
                               .cu_seqlens_q = in.cu_q,
                               .cu_seqlens_k = in.cu_k,
                               .q_pos0 = in.q_pos0,
                               .k_pos0 = in.k_pos0,
                               .scale = 1.0f / std::sqrt(32.0f),
                               .mask_kind = kernels::AttentionMaskKind::kGeneral,
                               .q_descale = qs,
                               .k_descale = ks,
                               .v_descale = vs};
    ref::attention(p, nullptr);
    Tensor bf = Tensor::empty({tq, h, 128}, DType::kBF16);
    ref::copy({.out = bf, .in = f32}, nullptr);
    for (const DType from : {DType::kBF16, DType::kF32}) {
        SCOPED_TRACE(dtype_name(from));
        const Tensor& unfused = from == DType::kBF16 ? bf : f32;
        Tensor want = Tensor::empty({tq, h * 128}, DType::kF8E4M3), want_scale = Tensor::empty({tq, h}, DType::kF32);
        ref::fp8_act_quant({.out = want, .scale = want_scale, .in = unfused.view().reshape({tq, h * 128})}, nullptr);
        Tensor got = Tensor::empty({tq, h, 128}, DType::kF8E4M3), lse = Tensor::empty({tq, h}, DType::kF32);
        Tensor scale_store = Tensor::empty({h * tq}, DType::kF32);  // [tq, h] with strides {1, tq}
        const TensorView got_scale = scale_store.view().as_strided(0, {tq, h}, {1, tq});
        kernels::AttentionParams f = p;
        f.out = got;
        f.lse = lse;
        f.out_scale = got_scale;
        f.out_scale_from = from;
        ref::attention(f, nullptr);
        for (int64_t i = 0; i < want.numel(); ++i) {
            ASSERT_EQ(got.ptr<uint8_t>()[i], want.ptr<uint8_t>()[i]) << "byte " << i;
        }
        for (int64_t i = 0; i < tq; ++i) {
            for (int64_t j = 0; j < h; ++j) {
                const float sc = want_scale.ptr<float>()[i * h + j];
                EXPECT_EQ(*got_scale.at<float>({i, j}), sc) << "row " << i << " head " << j;
                EXPECT_EQ(lse.ptr<float>()[i * h + j], lse_f32.ptr<float>()[i * h + j]) << "lse row " << i;
                // Rows 8 and 9 (queries at 0..1, keys at 5..6) see no key: zero bytes and the floor's scale.
                if (i == 8 || i == 9) {
                    EXPECT_EQ(sc, 1e-4f / 448.0f) << "row " << i;
                    EXPECT_EQ(got.ptr<uint8_t>()[(i * h + j) * 128], 0) << "row " << i;
                } else {
                    EXPECT_GT(sc, 1e-4f / 448.0f) << "row " << i;
                }
            }
        }
    }
    // bf16 and f32 differ somewhere (the rounding is applied)
    Tensor a = Tensor::empty({tq, h * 128}, DType::kF8E4M3), b = Tensor::empty({tq, h * 128}, DType::kF8E4M3);
    Tensor sa = Tensor::empty({tq, h}, DType::kF32), sb = Tensor::empty({tq, h}, DType::kF32);
    ref::fp8_act_quant({.out = a, .scale = sa, .in = bf.view().reshape({tq, h * 128})}, nullptr);
    ref::fp8_act_quant({.out = b, .scale = sb, .in = f32.view().reshape({tq, h * 128})}, nullptr);
    EXPECT_NE(std::memcmp(sa.ptr<float>(), sb.ptr<float>(), sa.nbytes()), 0);

    GTEST_FLAG_SET(death_test_style, "threadsafe");
    Tensor ok_out = Tensor::empty({tq, h, 128}, DType::kF8E4M3), ok_scale = Tensor::empty({tq, h}, DType::kF32);
    kernels::AttentionParams bad = p;
    bad.out_scale = ok_scale;
    EXPECT_DEATH(ref::attention(bad, nullptr), "out_scale needs an f8e4m3 out");
    Tensor wide = Tensor::empty({tq, h, 256}, DType::kF8E4M3);
    bad.out = wide.view().slice(2, 0, 128);  // rows of 2 x 128 bytes per head: not contiguous over (heads, d_v)
    EXPECT_DEATH(ref::attention(bad, nullptr), "contiguous over");
    bad.out = ok_out;
    bad.out_scale = ok_scale.view().slice(1, 0, h - 1);
    EXPECT_DEATH(ref::attention(bad, nullptr), "out_scale must be");
    bad.out_scale = ok_scale;
    bad.out_scale_from = DType::kF8E4M3;
    EXPECT_DEATH(ref::attention(bad, nullptr), "out_scale_from must be bf16 or f32");
    const AttnCase c64{"fp8_rows_out_d64", 2, 2, 32, 64, {{3, 3, 0, 0}}};
    const AttnInputs in64 = make_inputs(rng, c64);
    Tensor s64;
    const Tensor q64 = quantize(in64.q.view, &s64), k64 = quantize(in64.k.view, &s64),
                 v64 = quantize(in64.v_view, &s64);
    Tensor o64 = Tensor::empty({3, 2, 64}, DType::kF8E4M3), sc64 = Tensor::empty({3, 2}, DType::kF32);
    kernels::AttentionParams d64 = p;
    d64.out = o64;
    d64.lse = {};
    d64.out_scale = sc64;
    d64.q = q64;
    d64.k = k64;
    d64.v = v64;
    d64.q_descale = d64.k_descale = d64.v_descale = s64;
    d64.cu_seqlens_q = in64.cu_q;
    d64.cu_seqlens_k = in64.cu_k;
    d64.q_pos0 = in64.q_pos0;
    d64.k_pos0 = in64.k_pos0;
    EXPECT_DEATH(ref::attention(d64, nullptr), "out_scale needs d_v 128");
}

TEST(RefAttention, Fp8RejectsMixedDtypesAndBrokenEqualLengthsHint) {
    constexpr uint32_t kSeed = 1357;
    std::mt19937 rng(kSeed);
    const AttnCase c{"prefix", 2, 2, 16, 16, {{3, 5, 2, 0}}};
    const AttnInputs in = make_inputs(rng, c);
    Tensor out = Tensor::empty({in.total_q, 2, 16}, DType::kF32);
    Tensor lse = Tensor::empty({in.total_q, 2}, DType::kF32);
    Tensor q8 = Tensor::empty({in.total_q, 2, 16}, DType::kF8E4M3);
    Tensor s = Tensor::from_f32({1}, std::vector<float>{1.0f});
    kernels::AttentionParams p{.out = out,
                               .lse = lse,
                               .q = q8,
                               .k = in.k.view,
                               .v = in.v_view,
                               .cu_seqlens_q = in.cu_q,
                               .cu_seqlens_k = in.cu_k,
                               .q_pos0 = in.q_pos0,
                               .k_pos0 = in.k_pos0,
                               .q_descale = s,
                               .k_descale = s,
                               .v_descale = s};
    EXPECT_DEATH(ref::attention(p, nullptr), "all f8e4m3 or none");
    kernels::AttentionParams f = p;
    f.q = in.q.view;
    f.equal_lengths = true;  // 3 queries, 5 keys
    EXPECT_DEATH(ref::attention(f, nullptr), "equal_lengths hint broken");
    f.equal_lengths = false;
    Tensor o8 = Tensor::empty({in.total_q, 2, 16}, DType::kF8E4M3);
    f.out = o8;
    EXPECT_DEATH(ref::attention(f, nullptr), "FP8 out needs FP8 q, k and v");
}

}  // namespace
}  // namespace penstock::test
