// Pipeline partitions and stage-message encoding: validation errors name the setting; the balanced partition is
// contiguous, complete and no worse than an even split; decode_plan round-trips (sampling parameters and stage
// counters included) and rejects malformed frames.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "loader/model_config.h"
#include "parallel/partition.h"
#include "parallel/pipeline.h"

namespace penstock::parallel {
namespace {

TEST(Partition, ParseValidates) {
    auto ok = parse_partition("7,5,7,5,7,5,7,5,7,5,7,5,7,5,6,3", 16, 93);
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
    EXPECT_EQ(ok->size(), 16u);
    EXPECT_NE(parse_partition("3,3", 2, 4).status().message().find("sums to 6 layers, the model has 4"),
              std::string::npos);
    EXPECT_NE(parse_partition("2,2", 3, 4).status().message().find("has 2 stages, --pp is 3"), std::string::npos);
    EXPECT_FALSE(parse_partition("2,0,2", 3, 4).ok());
    EXPECT_FALSE(parse_partition("2,x", 2, 4).ok());
    EXPECT_FALSE(parse_partition("", 1, 4).ok());
}

TEST(Partition, BalancedIsCompleteAndBeatsEvenSplitOnDeepSeekV3) {
    auto text = loader::read_text_file(std::string(PENSTOCK_FIXTURES_DIR) + "/../configs/deepseek-v3.json");
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    auto json = loader::parse_json_text(*text, "deepseek-v3.json");
    ASSERT_TRUE(json.ok());
    auto config = loader::parse_model_config(*json);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    for (int pp : {1, 2, 4, 8, 16}) {
        auto counts = balance_partition(*config, pp, 8192, 0);
        ASSERT_TRUE(counts.ok()) << counts.status().to_string();
        ASSERT_EQ(static_cast<int>(counts->size()), pp);
        int64_t sum = 0;
        for (int64_t c : *counts) {
            EXPECT_GE(c, 1);
            sum += c;
        }
        EXPECT_EQ(sum, config->num_hidden_layers);
        // The 3 dense layers are cheaper than MoE layers: stage 0 takes at least as many layers as the last stage.
        if (pp > 1) {
            EXPECT_GE(counts->front(), counts->back()) << "pp " << pp;
        }
    }
}

// The Deep-PP sweep files (bench/sweeps/deep_pp_{8,2}gpu_*.toml) serve the first layers of GLM-5.3 / Kimi K3 with
// dummy weights so that the weights fit 141 GB GPUs: with the balanced partition (or the pinned one), the routed
// experts a rank holds (its stage's MoE layers / tp; one byte per weight in FP8, else two) stay under 100 GB in every
// layout of those files.
TEST(Partition, DeepPpSweepDepthsFitTheGpus) {
    struct Case {
        const char* config;
        int64_t num_layers;
        int np;
        std::vector<int64_t> pinned_pp2;  // the 2-GPU file's PP2 partition ({} = balanced)
        bool fp8_dummy = false;           // the file passes --fp8-weights native (block-FP8 dummy weights)
    };
    const Case cases[] = {{"glm-5.3.json", 32, 8, {}},
                          {"kimi-k3.json", 16, 8, {}, true},
                          {"glm-5.3.json", 8, 2, {}},
                          {"kimi-k3.json", 3, 2, {2, 1}}};
    for (const Case& c : cases) {
        auto text = loader::read_text_file(std::string(PENSTOCK_FIXTURES_DIR) + "/../configs/" + c.config);
        ASSERT_TRUE(text.ok()) << text.status().to_string();
        auto json = loader::parse_json_text(*text, c.config);
        ASSERT_TRUE(json.ok());
        auto full = loader::parse_model_config(*json);
        ASSERT_TRUE(full.ok());
        auto config = loader::with_num_layers(*full, c.num_layers);
        ASSERT_TRUE(config.ok()) << config.status().to_string();
        // Routed experts of one MoE layer: gate, up, down of [moe_intermediate, expert hidden] each, one byte per
        // weight where the checkpoint is block FP8 (GLM-5.3: the dummy weights are FP8 too, run natively on the
        // GPU) or the file asks for FP8 dummy weights (Kimi K3 on 8 GPUs), else two (bf16).
        const int64_t expert_hidden = config->raw.value("routed_expert_hidden_size", config->hidden_size);
        const double bytes = config->fp8.has_value() || c.fp8_dummy ? 1.0 : 2.0;
        const double layer_gb =
            3.0 * bytes * static_cast<double>(config->n_routed_experts * config->moe_intermediate_size * expert_hidden) /
            1e9;
        for (int pp = 1; pp <= c.np; pp *= 2) {
            const int tp = c.np / pp;
            std::vector<int64_t> counts;
            if (pp == 2 && !c.pinned_pp2.empty()) {
                counts = c.pinned_pp2;
            } else {
                auto balanced = balance_partition(*config, pp, 8192, 0);
                ASSERT_TRUE(balanced.ok()) << balanced.status().to_string();
                counts = *balanced;
            }
            int64_t begin = 0;
            double worst_gb = 0;
            for (int64_t n : counts) {
                int64_t moe = 0;
                for (int64_t l = begin; l < begin + n; ++l) moe += config->is_moe_layer(l) ? 1 : 0;
                worst_gb = std::max(worst_gb, static_cast<double>(moe) * layer_gb / tp);
                begin += n;
            }
            EXPECT_EQ(begin, c.num_layers);
            EXPECT_LT(worst_gb, 100.0) << c.config << " at " << c.num_layers << " layers, pp " << pp << " tp " << tp;
            std::printf("[figures] %s %lld layers pp %d tp %d: %.1f GB of routed experts on the fullest rank\n",
                        c.config, static_cast<long long>(c.num_layers), pp, tp, worst_gb);
        }
    }
}

TEST(StagePlan, ReleaseOnlyPlanRoundTrips) {
    StagePlan plan;
    plan.free_ids = {3, 1, 4};
    auto back = decode_plan(encode_plan(plan));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(back->batch.seqs.empty());
    EXPECT_FALSE(back->stop);
    EXPECT_EQ(back->free_ids, plan.free_ids);
    EXPECT_TRUE(back->commands.empty());
    // A plan with commands alone (a disaggregated prefill's KV sends for the other stages).
    StagePlan commands;
    commands.commands = {{.request_id = 12, .room = 1ull << 40, .timeout_ms = 60000, .payload = {9, 8, 7}},
                         {.request_id = 13, .room = 5, .timeout_ms = 0, .payload = {}}};
    auto c = decode_plan(encode_plan(commands));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_EQ(c->commands.size(), 2u);
    EXPECT_EQ(c->commands[0].room, 1ull << 40);
    EXPECT_EQ(c->commands[0].timeout_ms, 60000);
    EXPECT_EQ(c->commands[0].payload, (std::vector<uint8_t>{9, 8, 7}));
    EXPECT_EQ(c->commands[1].request_id, 13);
    EXPECT_TRUE(c->commands[1].payload.empty());
    commands.commands[0].timeout_ms = -1;
    EXPECT_EQ(decode_plan(encode_plan(commands)).status().code(), StatusCode::kDataLoss) << "negative timeout";
}

TEST(StagePlan, RoundTripAndMalformedFrames) {
    StagePlan plan;
    for (int s = 0; s < 3; ++s) {
        models::SeqChunk c;
        c.request_id = 100 + s;
        c.prefix_len = 64 * s;
        c.prompt_len = 64 * s + 10 + s;
        c.token_ids.assign(static_cast<size_t>(10 + s), s * 7);
        c.logits = s == 1 ? models::LogitsMode::kAll : models::LogitsMode::kLast;
        plan.batch.seqs.push_back(c);
        plan.release.push_back(s == 2 ? 1 : 0);
        plan.sampling.push_back(runtime::SeqSampling{.sample = s != 0,
                                                     .temperature = 0.25f * s,
                                                     .top_p = 0.9f,
                                                     .top_k = 5 * s - 1,
                                                     .min_p = 0.01f,
                                                     .seed = 0xfeedface00000000ull + s,
                                                     .token_index = 3 * s,
                                                     .top_logprobs = s == 0 ? 0 : 9 * s + 1});
    }
    plan.sampling[1].prompt_logprobs = true;  // kAll: its rows score its tokens 1.. and the next chunk's first
    plan.sampling[1].next_token = 42;
    plan.sampling[2].presence_penalty = 0.5f;  // a penalized sampled sequence carries its output so far
    plan.sampling[2].frequency_penalty = -1.25f;
    plan.sampling[2].history = {3, 9, 3};
    plan.sampling[2].repetition_penalty = 1.3f;  // ... and its prompt's distinct ids
    plan.sampling[2].prompt_tokens = {1, 4, 8};
    plan.sampling[2].banned = {2, 7};  // stop tokens before min_new_tokens
    plan.sampling[2].logit_bias = {{5, -3.5f}, {11, 100.0f}};
    plan.free_ids = {7, 9};
    plan.return_logits = true;
    plan.counters = {
        StageStats{.steps = 4, .busy_ms = 1.5, .stall_ms = 0.25, .bytes_sent = 1000, .bank_bytes_sent = 7}};
    plan.commands = {{.request_id = 77, .room = 4, .timeout_ms = 250, .payload = {1, 2, 3, 4, 5}}};
    const std::vector<uint8_t> bytes = encode_plan(plan);
    auto back = decode_plan(bytes);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->batch.seqs.size(), 3u);
    EXPECT_EQ(back->batch.seqs[2].request_id, 102);
    EXPECT_EQ(back->batch.seqs[1].logits, models::LogitsMode::kAll);
    EXPECT_EQ(back->batch.seqs[2].token_ids, plan.batch.seqs[2].token_ids);
    EXPECT_EQ(back->release, plan.release);
    EXPECT_EQ(back->free_ids, plan.free_ids);
    EXPECT_TRUE(back->return_logits);
    ASSERT_EQ(back->sampling.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        const runtime::SeqSampling &a = back->sampling[i], &b = plan.sampling[i];
        EXPECT_EQ(a.sample, b.sample);
        EXPECT_EQ(a.temperature, b.temperature);
        EXPECT_EQ(a.top_p, b.top_p);
        EXPECT_EQ(a.top_k, b.top_k);
        EXPECT_EQ(a.min_p, b.min_p);
        EXPECT_EQ(a.seed, b.seed);
        EXPECT_EQ(a.token_index, b.token_index);
        EXPECT_EQ(a.top_logprobs, b.top_logprobs);
        EXPECT_EQ(a.prompt_logprobs, b.prompt_logprobs);
        EXPECT_EQ(a.next_token, b.next_token);
        EXPECT_EQ(a.presence_penalty, b.presence_penalty);
        EXPECT_EQ(a.frequency_penalty, b.frequency_penalty);
        EXPECT_EQ(a.history, b.history);
        EXPECT_EQ(a.repetition_penalty, b.repetition_penalty);
        EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
        EXPECT_EQ(a.banned, b.banned);
        EXPECT_EQ(a.logit_bias, b.logit_bias);
    }
    ASSERT_EQ(back->counters.size(), 1u);
    EXPECT_EQ(back->counters[0].steps, 4);
    EXPECT_EQ(back->counters[0].busy_ms, 1.5);
    EXPECT_EQ(back->counters[0].bank_bytes_sent, 7);
    ASSERT_EQ(back->commands.size(), 1u);
    EXPECT_EQ(back->commands[0].payload, plan.commands[0].payload);
    // A sampled sequence that produces no logits, or sampling parameters out of range, are refused.
    // Alternatives beyond kMaxTopLogprobs are refused, as prompt scoring without a row per token; an unsampled
    // sequence carries no alternatives (the encoder writes 0).
    for (int variant = 0; variant < 8; ++variant) {
        StagePlan bad = plan;
        if (variant == 0) bad.batch.seqs[1].logits = models::LogitsMode::kNone;
        if (variant == 1) bad.sampling[1].temperature = -1;
        if (variant == 2) bad.sampling[2].top_p = 0;
        if (variant == 3) bad.sampling[2].top_logprobs = runtime::kMaxTopLogprobs + 1;
        if (variant == 4) bad.sampling[2].prompt_logprobs = true;  // kLast: no row per token
        if (variant == 5) bad.sampling[2].frequency_penalty = 2.5f;
        if (variant == 6) bad.sampling[2].repetition_penalty = 0.0f;
        if (variant == 7) bad.sampling[2].logit_bias[0].second = 101.0f;
        auto r = decode_plan(encode_plan(bad));
        EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << "variant " << variant;
    }
    StagePlan unsampled = plan;
    unsampled.sampling[0].top_logprobs = 5;
    auto quiet = decode_plan(encode_plan(unsampled));
    ASSERT_TRUE(quiet.ok());
    EXPECT_EQ(quiet->sampling[0].top_logprobs, 0);
    // Every truncation and seeded random corruption is either decoded consistently or a DataLoss, never a crash.
    for (size_t n = 0; n < bytes.size(); ++n) {
        auto r = decode_plan(std::span<const uint8_t>(bytes.data(), n));
        EXPECT_FALSE(r.ok()) << "truncated to " << n;
        if (!r.ok()) {
            EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
        }
    }
    std::mt19937 rng(3);
    for (int it = 0; it < 20000; ++it) {
        std::vector<uint8_t> m = bytes;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) m[rng() % m.size()] = static_cast<uint8_t>(rng());
        auto r = decode_plan(m);
        if (r.ok()) {
            int64_t tokens = 0;
            for (const auto& c : r->batch.seqs) tokens += static_cast<int64_t>(c.token_ids.size());
            for (const auto& sp : r->sampling) {
                tokens += static_cast<int64_t>(sp.history.size() + sp.prompt_tokens.size() + sp.banned.size() +
                                               2 * sp.logit_bias.size());
            }
            size_t command_bytes = 0;
            for (const StageCommand& c : r->commands) command_bytes += 28 + c.payload.size();
            EXPECT_EQ(static_cast<size_t>(tokens) * 4 + 36 + 96 * r->batch.seqs.size() + 8 * r->free_ids.size() +
                          40 * r->counters.size() + command_bytes,
                      m.size());
        } else {
            EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
        }
    }
}

}  // namespace
}  // namespace penstock::parallel
