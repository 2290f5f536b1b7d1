// Conformance reporting for the DSA / KDA GPU tests: every compared output prints one line
//   [conf] <op> | <case> | max|d| <value> | <atol>/<rtol> | PASS|FAIL
// (collected into docs/perf/ tables) and fails the test through all_close when out of tolerance. Also a perf switch:
// PENSTOCK_CUDA_PERF=1 enables the timing tests (CUDA events around the op, median of reps, no L2 flush).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/kernels/cuda/op_test_util.h"

namespace penstock::test {

inline double max_abs_diff(const std::vector<float>& got, const std::vector<double>& ref) {
    double m = 0.0;
    for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
        const double g = got[i], r = ref[i];
        if (std::isnan(g) != std::isnan(r) || ((std::isinf(g) || std::isinf(r)) && g != r)) return INFINITY;
        if (std::isnan(g) || std::isinf(g)) continue;
        m = std::max(m, std::fabs(g - r));
    }
    return m;
}

inline void conf_line(const std::string& op, const std::string& name, double max_abs, const std::string& tol,
                      bool pass) {
    std::printf("[conf] %s | %s | max|d| %.3g | %s | %s\n", op.c_str(), name.c_str(), max_abs, tol.c_str(),
                pass ? "PASS" : "FAIL");
    std::fflush(stdout);
}

// Compares values and prints the conformance line.
inline void conf_close(const std::string& op, const std::string& name, const std::vector<float>& got,
                       const std::vector<float>& ref, Tolerance tol, const Shape& shape = {}) {
    const std::vector<double> r = to_double(ref);
    const ::testing::AssertionResult res = all_close(got, r, tol, shape);
    char t[64];
    std::snprintf(t, sizeof(t), "atol %.0e rtol %.0e", tol.atol, tol.rtol);
    conf_line(op, name, max_abs_diff(got, r), t, static_cast<bool>(res));
    EXPECT_TRUE(res) << op << " " << name;
}

// A device Pair output (with padding check) against the reference's host view.
inline void conf_pair(const std::string& op, const std::string& name, const Pair& got, const TensorView& ref,
                      Tolerance tol, const cuda::Stream& stream) {
    const Readback rb = read_pair(got, stream, /*check_padding=*/true);
    conf_close(op, name, rb.values, read_f32(ref), tol, ref.shape_vec());
    EXPECT_EQ(rb.touched_padding, 0) << op << " " << name << ": elements written outside the view";
}

// Exact comparison of integer / byte outputs: prints the number of mismatches as max|d| (0 = identical).
template <class T>
inline void conf_exact(const std::string& op, const std::string& name, const std::vector<T>& got,
                       const std::vector<T>& ref) {
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
        if (got[i] != ref[i]) {
            if (first < 0) first = static_cast<int64_t>(i);
            ++bad;
        }
    }
    const bool pass = bad == 0 && got.size() == ref.size();
    std::printf("[conf] %s | %s | mismatches %lld of %zu | exact | %s\n", op.c_str(), name.c_str(),
                static_cast<long long>(bad), ref.size(), pass ? "PASS" : "FAIL");
    std::fflush(stdout);
    EXPECT_TRUE(pass) << op << " " << name << ": " << bad << " mismatches, first at " << first << " (got "
                      << (first >= 0 ? static_cast<double>(got[static_cast<size_t>(first)]) : 0.0) << ", want "
                      << (first >= 0 ? static_cast<double>(ref[static_cast<size_t>(first)]) : 0.0) << ")";
}

inline bool perf_enabled() {
    const char* e = std::getenv("PENSTOCK_CUDA_PERF");
    return e != nullptr && std::string(e) == "1";
}

// Times `op` (enqueued on `stream`): `warmup` untimed calls, then `reps` calls each between two events; returns the
// median in microseconds and prints "[perf] <op> | <shape> | <us> us".
template <class Fn>
double perf_time(const std::string& op, const std::string& shape, const cuda::Stream& stream, Fn&& fn,
                 int warmup = 3, int reps = 10) {
    for (int i = 0; i < warmup; ++i) fn();
    cuda::Event start(stream.device()), end(stream.device());
    std::vector<double> us;
    for (int i = 0; i < reps; ++i) {
        start.record(stream);
        fn();
        end.record(stream);
        end.synchronize();
        us.push_back(1e3 * cuda::Event::elapsed_ms(start, end));
    }
    std::sort(us.begin(), us.end());
    const double med = us[us.size() / 2];
    std::printf("[perf] %s | %s | %.1f us\n", op.c_str(), shape.c_str(), med);
    std::fflush(stdout);
    return med;
}

}  // namespace penstock::test
