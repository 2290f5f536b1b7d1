// RoPE table construction (see rope_table.h for the formulas' source).
#include "models/rope_table.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace penstock::models {

namespace {

double yarn_mscale(double scale, double mscale) {
    if (scale <= 1.0) return 1.0;
    return 0.1 * mscale * std::log(scale) + 1.0;
}

// theta^(2i/d) in fp32, like torch's `base ** (arange(0, d, 2).float() / d)`.
std::vector<float> pos_freqs(double theta, int64_t dim) {
    std::vector<float> f(static_cast<size_t>(dim / 2));
    for (int64_t i = 0; i < dim / 2; ++i) {
        const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
        f[static_cast<size_t>(i)] = std::pow(static_cast<float>(theta), e);
    }
    return f;
}

}  // namespace

Result<RopeTable> make_rope_table(const loader::ModelConfig& config) {
    const loader::RopeConfig& rc = config.rope;
    RopeTable t;
    t.rot_dim = static_cast<int64_t>(static_cast<double>(config.qk_rope_head_dim) * rc.partial_rotary_factor);
    t.interleaved = config.rope_interleave;
    if (t.rot_dim <= 0 || t.rot_dim % 2 != 0) {
        return invalid_argument("rotary dim " + std::to_string(t.rot_dim) + " must be positive and even");
    }
    const int64_t half = t.rot_dim / 2;
    t.inv_freq = Tensor::empty({half}, DType::kF32);
    float* inv = t.inv_freq.ptr<float>();
    const std::vector<float> pf = pos_freqs(rc.theta, t.rot_dim);
    if (rc.type == "default") {
        for (int64_t i = 0; i < half; ++i) inv[i] = 1.0f / pf[static_cast<size_t>(i)];
        t.attention_factor = 1.0f;
        return t;
    }
    if (rc.type != "yarn") return unimplemented("rope type '" + rc.type + "' is not supported (default, yarn)");

    const double factor = rc.factor;
    const double dim = static_cast<double>(t.rot_dim);
    const auto correction_dim = [&](double rotations) {
        return dim * std::log(static_cast<double>(rc.original_max_position_embeddings) / (rotations * 2.0 * M_PI)) /
               (2.0 * std::log(rc.theta));
    };
    double low = correction_dim(rc.beta_fast);
    double high = correction_dim(rc.beta_slow);
    if (rc.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1.0);
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
        const float extrapolation = 1.0f / pf[static_cast<size_t>(i)];
        const float interpolation = 1.0f / (static_cast<float>(factor) * pf[static_cast<size_t>(i)]);
        const float ramp =
            std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f, 1.0f);
        const float extra_factor = 1.0f - ramp;
        inv[i] = interpolation * (1.0f - extra_factor) + extrapolation * extra_factor;
    }
    if (rc.attention_factor) {
        t.attention_factor = static_cast<float>(*rc.attention_factor);
    } else if (rc.mscale != 0.0 && rc.mscale_all_dim != 0.0) {
        t.attention_factor = static_cast<float>(yarn_mscale(factor, rc.mscale) / yarn_mscale(factor, rc.mscale_all_dim));
    } else {
        t.attention_factor = static_cast<float>(yarn_mscale(factor, 1.0));
    }
    return t;
}

float mla_softmax_scale(const loader::ModelConfig& config) {
    double scale = std::pow(static_cast<double>(config.qk_head_dim()), -0.5);
    if (config.rope.type != "default" && config.rope.mscale_all_dim != 0.0) {
        const double m = yarn_mscale(config.rope.factor, config.rope.mscale_all_dim);
        scale *= m * m;
    }
    return static_cast<float>(scale);
}

}  // namespace penstock::models
