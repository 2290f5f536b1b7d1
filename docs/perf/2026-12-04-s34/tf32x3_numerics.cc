// Session 34 (no device lent): a CPU model of the f32 DSA indexer's numerics, to decide whether the 3xTF32 draft
// (../2026-12-04-s33/draft-f32-indexer-tf32x3.diff, IndexerVariant::kMmaTf32) fits the reference's tolerance and how
// its error compares with the CUDA-core kernel that kAuto runs today. Not product code; nothing links it.
//   g++ -O2 -std=c++20 -o /tmp/tf32x3 docs/perf/2026-12-04-s34/tf32x3_numerics.cc && /tmp/tf32x3 [rows keys heads dim]
//
// Models (q, k, gates as in GLM-5.3's indexer: 32 heads x 128, scale dim^-0.5, top-2048):
//   exact    double products and sums (the CPU reference accumulates in double);
//   cuda     the register-tiled kernel: per head one fmaf chain over head_dim, then acc = fmaf(gate, relu(scale*dot));
//   tf32 RN  the draft: x = hi + lo, hi = x with its low 13 mantissa bits cleared, lo = x - hi (exact), lo's own low
//            13 bits dropped by the tensor core; per k-step of 8 three mma.m16n8k8 in the draft's order (lo_k.hi_q,
//            hi_k.lo_q, hi_k.hi_q), each adding its 8 exact products to the f32 accumulator with one rounding to
//            nearest;
//   tf32 RZ  the same with the accumulator truncated toward zero (published measurements of Ampere / Hopper tensor
//            cores report truncating f32 accumulation), a pessimistic bound.
// Reported: the test's criterion |x - ref| <= atol + rtol |ref| (kF32IndexerLogits: atol 5e-5, rtol 1e-4) as the
// worst ratio, the error relative to the row's scale, and how many rows' top-k sets differ from the exact model's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

float bits_to_f(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint32_t f_to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float tf32_trunc(float x) { return bits_to_f(f_to_bits(x) & 0xffffe000u); }

// Rounds a double to f32 toward zero.
float round_rz(double v) {
    float f = static_cast<float>(v);  // nearest
    if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
    return f;
}

struct Errors {
    double worst_ratio = 0.0;  // max |x - ref| / (atol + rtol |ref|)
    double max_abs = 0.0;
    double max_rel_scale = 0.0;  // max |x - ref| / (row's max |ref|)
    int rows_topk_differ = 0;
    long long keys_topk_differ = 0;
};

}  // namespace

int main(int argc, char** argv) {
    const int rows = argc > 1 ? std::atoi(argv[1]) : 32;
    const int keys = argc > 2 ? std::atoi(argv[2]) : 8192;
    const int heads = argc > 3 ? std::atoi(argv[3]) : 32;
    const int dim = argc > 4 ? std::atoi(argv[4]) : 128;
    const int top_k = std::min(2048, keys);
    const double atol = 5e-5, rtol = 1e-4;
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
    std::mt19937 rng(34);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(static_cast<size_t>(rows) * heads * dim), k(static_cast<size_t>(keys) * dim),
        w(static_cast<size_t>(rows) * heads);
    for (float& x : q) x = nd(rng);
    for (float& x : k) x = nd(rng);
    for (float& x : w) x = nd(rng) / std::sqrt(static_cast<float>(heads));
    // hi / lo of every operand, once.
    std::vector<float> q_hi(q.size()), q_lo(q.size()), k_hi(k.size()), k_lo(k.size());
    for (size_t i = 0; i < q.size(); ++i) q_hi[i] = tf32_trunc(q[i]), q_lo[i] = tf32_trunc(q[i] - q_hi[i]);
    for (size_t i = 0; i < k.size(); ++i) k_hi[i] = tf32_trunc(k[i]), k_lo[i] = tf32_trunc(k[i] - k_hi[i]);

    const char* names[3] = {"cuda (fmaf chain)", "3xtf32, RN accumulate", "3xtf32, RZ accumulate"};
    Errors err[3];
    std::vector<double> ref(keys);
    std::vector<float> out[3];
    for (auto& o : out) o.resize(keys);
    for (int r = 0; r < rows; ++r) {
        for (int s = 0; s < keys; ++s) {
            const float* ks = &k[static_cast<size_t>(s) * dim];
            double exact = 0.0;
            float acc_c = 0.0f, acc_rn = 0.0f, acc_rz = 0.0f;
            for (int h = 0; h < heads; ++h) {
                const size_t qo = (static_cast<size_t>(r) * heads + h) * dim;
                const float* qs = &q[qo];
                const float gate = w[static_cast<size_t>(r) * heads + h];
                double dot = 0.0;
                float dot_c = 0.0f, dot_rn = 0.0f, dot_rz = 0.0f;
                for (int c = 0; c < dim; ++c) {
                    dot += static_cast<double>(qs[c]) * ks[c];
                    dot_c = std::fma(qs[c], ks[c], dot_c);
                }
                for (int c0 = 0; c0 < dim; c0 += 8) {
                    for (int term = 0; term < 3; ++term) {
                        double sum = 0.0;  // 8 products of tf32 values: each exact in double, the sum too
                        for (int c = c0; c < c0 + 8; ++c) {
                            const size_t ki = static_cast<size_t>(s) * dim + c, qi = qo + c;
                            const float a = term == 1 || term == 2 ? k_hi[ki] : k_lo[ki];
                            const float b = term == 0 || term == 2 ? q_hi[qi] : q_lo[qi];
                            sum += static_cast<double>(a) * b;
                        }
                        dot_rn = static_cast<float>(static_cast<double>(dot_rn) + sum);
                        dot_rz = round_rz(static_cast<double>(dot_rz) + sum);
                    }
                }
                const double sd = static_cast<double>(scale) * dot;
                exact += static_cast<double>(gate) * (sd > 0.0 ? sd : 0.0);
                const auto fold = [&](float d, float& acc) {
                    const float sc = scale * d;
                    acc = std::fma(gate, sc > 0.0f ? sc : 0.0f, acc);
                };
                fold(dot_c, acc_c);
                fold(dot_rn, acc_rn);
                fold(dot_rz, acc_rz);
            }
            ref[s] = exact;
            out[0][s] = acc_c;
            out[1][s] = acc_rn;
            out[2][s] = acc_rz;
        }
        double row_scale = 0.0;
        for (int s = 0; s < keys; ++s) row_scale = std::max(row_scale, std::fabs(ref[s]));
        // Top-k sets: indices of the top_k largest values (no ties in these rows: every logit is a sum of 32 heads).
        std::vector<int> idx(keys);
        const auto topk_set = [&](const auto& v) {
            for (int s = 0; s < keys; ++s) idx[s] = s;
            std::nth_element(idx.begin(), idx.begin() + top_k, idx.end(), [&](int a, int b) { return v[a] > v[b]; });
            std::vector<int> set(idx.begin(), idx.begin() + top_k);
            std::sort(set.begin(), set.end());
            return set;
        };
        const std::vector<int> ref_set = topk_set(ref);
        for (int m = 0; m < 3; ++m) {
            for (int s = 0; s < keys; ++s) {
                const double e = std::fabs(static_cast<double>(out[m][s]) - ref[s]);
                err[m].worst_ratio = std::max(err[m].worst_ratio, e / (atol + rtol * std::fabs(ref[s])));
                err[m].max_abs = std::max(err[m].max_abs, e);
                err[m].max_rel_scale = std::max(err[m].max_rel_scale, e / row_scale);
            }
            const std::vector<int> set = topk_set(out[m]);
            std::vector<int> diff;
            std::set_symmetric_difference(set.begin(), set.end(), ref_set.begin(), ref_set.end(), std::back_inserter(diff));
            if (!diff.empty()) ++err[m].rows_topk_differ;
            err[m].keys_topk_differ += static_cast<long long>(diff.size()) / 2;
        }
    }
    std::printf("rows %d keys %d heads %d dim %d top_k %d (q, k ~ N(0, 1), gates ~ N(0, 1/heads))\n", rows, keys, heads,
                dim, top_k);
    std::printf("%-24s %12s %12s %14s %18s\n", "model", "worst/tol", "max |err|", "max err/row", "top-k rows (keys)");
    for (int m = 0; m < 3; ++m) {
        std::printf("%-24s %12.4f %12.3e %14.3e %10d (%lld)\n", names[m], err[m].worst_ratio, err[m].max_abs,
                    err[m].max_rel_scale, err[m].rows_topk_differ, err[m].keys_topk_differ);
    }
    return 0;
}
