// logits_diff A.safetensors B.safetensors TOL: compares the f32 `logits` tensors written by `penstock forward`.
// Prints "max_abs_diff D argmax_mismatch M rows R" and exits 0 when the shapes match, D <= TOL and every row's argmax
// agrees (or the two top logits of the reference row are within TOL: a near-tie), 1 otherwise, 2 on bad input.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "loader/safetensors.h"

namespace {

bool read_logits(const char* path, std::vector<float>* out, int64_t* rows, int64_t* cols) {
    auto file = penstock::loader::SafetensorsFile::open(path);
    if (!file.ok()) {
        std::fprintf(stderr, "logits_diff: %s\n", file.status().to_string().c_str());
        return false;
    }
    const penstock::loader::TensorInfo* info = (*file)->find("logits");
    if (info == nullptr || info->dtype != penstock::DType::kF32 || info->shape.size() != 2) {
        std::fprintf(stderr, "logits_diff: %s has no 2-D f32 tensor 'logits'\n", path);
        return false;
    }
    *rows = info->shape[0];
    *cols = info->shape[1];
    const auto bytes = (*file)->bytes(*info);
    out->resize(bytes.size() / sizeof(float));
    std::memcpy(out->data(), bytes.data(), bytes.size());
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: logits_diff A.safetensors B.safetensors TOL\n");
        return 2;
    }
    const double tol = std::atof(argv[3]);
    std::vector<float> a, b;
    int64_t ra = 0, ca = 0, rb = 0, cb = 0;
    if (!read_logits(argv[1], &a, &ra, &ca) || !read_logits(argv[2], &b, &rb, &cb)) return 2;
    if (ra != rb || ca != cb) {
        std::printf("shape mismatch [%lld, %lld] vs [%lld, %lld]\n", static_cast<long long>(ra),
                    static_cast<long long>(ca), static_cast<long long>(rb), static_cast<long long>(cb));
        return 1;
    }
    double max_diff = 0;
    int64_t mismatches = 0;
    for (int64_t r = 0; r < ra; ++r) {
        const float* x = a.data() + r * ca;
        const float* y = b.data() + r * ca;
        int64_t ax = 0, ay = 0;
        for (int64_t c = 0; c < ca; ++c) {
            const double d = std::fabs(static_cast<double>(x[c]) - y[c]);
            if (!(d <= max_diff)) max_diff = d;  // NaN propagates as a failure below
            if (x[c] > x[ax]) ax = c;
            if (y[c] > y[ay]) ay = c;
        }
        if (ax != ay && std::fabs(static_cast<double>(x[ax]) - x[ay]) > tol) ++mismatches;
    }
    std::printf("max_abs_diff %.3g argmax_mismatch %lld rows %lld\n", max_diff, static_cast<long long>(mismatches),
                static_cast<long long>(ra));
    return (max_diff <= tol && mismatches == 0) ? 0 : 1;
}
