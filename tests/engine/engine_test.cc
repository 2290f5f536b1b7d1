// Engine loop tests on the embedded tiny DeepSeek-V3 model: first-token logits through the engine equal
// ModelRunner::prefill_all_logits for several chunk sizes and concurrent mixes; finish reasons (length, stop token,
// stop string); aborts and timeouts return KV pages to baseline; an injected step failure fails only the requests
// of that step; queue bound; seeded sampling reproducible across batching and engines (the sampler itself:
// sampling_test.cc).
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "engine/sampling.h"
#include "engine/tokenizer.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/model.h"

namespace penstock::engine {
namespace {

const std::string kModelDir = std::string(PENSTOCK_ASSETS_DIR) + "/tiny-deepseek-v3";
constexpr float kMaxAbsDiff = 2e-4f;

std::unique_ptr<runtime::ModelRunner> make_runner(int64_t n_pages, const std::string& dir = kModelDir) {
    auto config = loader::load_model_config(dir);
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    auto ckpt = loader::Checkpoint::open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    loader::LoadStats stats;
    auto model = models::load_model(*config, *ckpt, {0, config->num_hidden_layers}, {}, &stats);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    return std::make_unique<runtime::ModelRunner>(std::move(model).value(),
                                                  runtime::RunnerOptions{.n_pages = n_pages, .n_threads = 2});
}

std::vector<int32_t> seeded_prompt(int64_t len, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> tok(2, 511);
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int32_t& t : p) t = tok(rng);
    return p;
}

std::unique_ptr<Engine> make_engine(EngineOptions o, int64_t n_pages = 256, const Tokenizer* tok = nullptr) {
    auto e = Engine::create(make_runner(n_pages), tok, std::move(o));
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return std::move(e).value();
}

// Collects every output of a request until it finishes (or 60 s pass).
struct Collected {
    std::vector<int32_t> ids;
    std::string text;
    std::vector<OutputLogprob> logprobs;
    std::vector<OutputLogprob> prompt_logprobs;
    RequestOutput last;
};
Collected collect(RequestHandle& h) {
    Collected c;
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < until) {
        for (RequestOutput& ev : h.wait(std::chrono::milliseconds(50))) {
            c.ids.insert(c.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
            c.text += ev.text;
            c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
            c.prompt_logprobs.insert(c.prompt_logprobs.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
            if (ev.finished) {
                c.last = std::move(ev);
                return c;
            }
        }
    }
    ADD_FAILURE() << "request " << h.id() << " did not finish";
    return c;
}

GenerateRequest greedy(std::vector<int32_t> prompt, int64_t max_new, bool ignore_eos = true) {
    GenerateRequest r;
    r.prompt = std::move(prompt);
    r.params.max_new_tokens = max_new;
    r.params.sampling.temperature = 0;
    r.params.ignore_eos = ignore_eos;
    return r;
}

void wait_idle(const Engine& e) {
    for (int i = 0; i < 2000 && (e.n_live() > 0 || e.metrics().kv_pages_used > 0); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

// return_logprob: each token's log-probability and alternatives are sample_token's on the very row the token was
// drawn from (the logits observer sees every sampled row), whatever the sampling parameters (token texts: the server
// tests, which have a tokenizer).
TEST(EngineLogprobs, EachTokenCarriesItsRowsRawLogSoftmaxAndAlternatives) {
    std::mutex mu;
    std::map<int64_t, std::vector<std::vector<float>>> rows;  // request id -> its sampled rows in order
    EngineOptions o;
    o.scheduler.chunked_prefill_size = 64;
    o.logits_observer = [&](int64_t id, std::span<const float> row) {
        std::lock_guard<std::mutex> lock(mu);
        rows[id].emplace_back(row.begin(), row.end());
    };
    auto eng = make_engine(std::move(o));
    std::vector<GenerateRequest> reqs;
    for (int i = 0; i < 3; ++i) {
        GenerateRequest r = greedy(seeded_prompt(20 + 61 * i, 700 + i), 5);
        r.params.return_logprob = i != 1;
        r.params.top_logprobs = i == 2 ? 0 : 6;
        if (i == 2) {
            r.params.sampling.temperature = 1.3f;
            r.params.sampling.top_k = 4;
            r.params.sampling.seed = 11;
        }
        reqs.push_back(r);
    }
    GenerateRequest bad = reqs[0];
    bad.params.top_logprobs = runtime::kMaxTopLogprobs + 1;
    EXPECT_EQ(eng->submit(bad).status().code(), StatusCode::kInvalidArgument);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (const GenerateRequest& r : reqs) hs.push_back(*eng->submit(r));
    eng->start();
    for (size_t i = 0; i < hs.size(); ++i) {
        const Collected c = collect(*hs[i]);
        ASSERT_EQ(c.ids.size(), 5u);
        if (!reqs[i].params.return_logprob) {
            EXPECT_TRUE(c.logprobs.empty());
            continue;
        }
        ASSERT_EQ(c.logprobs.size(), 5u);
        std::lock_guard<std::mutex> lock(mu);
        const std::vector<std::vector<float>>& r = rows[hs[i]->id()];
        ASSERT_EQ(r.size(), 5u);
        for (size_t t = 0; t < 5; ++t) {
            runtime::SeqSampling s = seq_sampling(reqs[i].params.sampling, 0, 0);
            s.top_logprobs = reqs[i].params.top_logprobs;
            const runtime::Sampled want = runtime::sample_token(r[t], s);
            const OutputLogprob& got = c.logprobs[t];
            EXPECT_EQ(got.chosen.token, c.ids[t]);
            ASSERT_TRUE(got.chosen.logprob.has_value());
            double lse = 0, top = -INFINITY;
            for (float v : r[t]) top = std::max(top, static_cast<double>(v));
            for (float v : r[t]) lse += std::exp(static_cast<double>(v) - top);
            lse = top + std::log(lse);
            EXPECT_NEAR(*got.chosen.logprob, r[t][static_cast<size_t>(c.ids[t])] - lse, 1e-5) << "token " << t;
            ASSERT_EQ(got.top.size(), want.top.size());
            for (size_t k = 0; k < got.top.size(); ++k) {
                EXPECT_EQ(got.top[k].token, want.top[k].token);
                EXPECT_EQ(got.top[k].logprob, want.top[k].logprob);
            }
            EXPECT_TRUE(got.chosen.text.empty()) << "no tokenizer: no token texts";
        }
    }
}

// logprob_start_len: the prompt's log-probabilities, chunk by chunk (rows of three chunks, the last row of each
// scoring the next chunk's first token), equal an unchunked reference forward's log-softmax at every position from
// the start, with the same alternatives; position 0 has no value.
TEST(EngineLogprobs, PromptLogprobsEqualTheUnchunkedForward) {
    const std::vector<int32_t> prompt = seeded_prompt(150, 911);
    auto ref_runner = make_runner(64);
    auto ref = ref_runner->prefill_all_logits(std::span(&prompt, 1), /*chunk_size=*/0);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    const Tensor& l = ref->front();
    const int64_t vocab = l.size(1);
    EngineOptions o;
    o.scheduler.chunked_prefill_size = 64;
    o.scheduler.max_prefill_tokens = 64;
    auto eng = make_engine(std::move(o));
    eng->start();
    for (int64_t start : {int64_t{0}, int64_t{100}, int64_t{149}}) {
        GenerateRequest r = greedy(prompt, 2);
        r.params.logprob_start_len = start;
        r.params.top_logprobs = 3;
        const Collected c = collect(**eng->submit(r));
        ASSERT_EQ(c.last.finish_reason, "length");
        ASSERT_EQ(static_cast<int64_t>(c.prompt_logprobs.size()), 150 - start) << "start " << start;
        EXPECT_TRUE(c.logprobs.empty()) << "return_logprob is off";
        for (int64_t pos = start; pos < 150; ++pos) {
            const OutputLogprob& e = c.prompt_logprobs[static_cast<size_t>(pos - start)];
            EXPECT_EQ(e.chosen.token, prompt[static_cast<size_t>(pos)]);
            if (pos == 0) {
                EXPECT_FALSE(e.chosen.logprob.has_value());
                EXPECT_TRUE(e.top.empty());
                continue;
            }
            ASSERT_TRUE(e.chosen.logprob.has_value()) << "position " << pos;
            const std::span<const float> row(l.ptr<const float>() + (pos - 1) * vocab, static_cast<size_t>(vocab));
            const runtime::Sampled want = runtime::score_token(row, prompt[static_cast<size_t>(pos)], 3);
            EXPECT_NEAR(*e.chosen.logprob, want.logprob, kMaxAbsDiff) << "position " << pos;
            ASSERT_EQ(e.top.size(), 3u);
            for (size_t k = 0; k < 3; ++k) {
                EXPECT_EQ(e.top[k].token, want.top[k].token) << "position " << pos;
                EXPECT_NEAR(*e.top[k].logprob, want.top[k].logprob, kMaxAbsDiff);
            }
        }
    }
    GenerateRequest bad = greedy(prompt, 2);
    bad.params.logprob_start_len = 150;
    EXPECT_EQ(eng->submit(bad).status().code(), StatusCode::kInvalidArgument);
    wait_idle(*eng);
    EXPECT_EQ(eng->metrics().kv_pages_used, 0);
}

// SPEC §6 idle invariant checks: each time the engine becomes idle it checks the page accounting. A page taken behind
// the scheduler's back is found at the next idle moment: warned and counted (serving goes on), or with kAbort the
// process aborts.
void run_one(Engine& e, int seed) {
    EXPECT_EQ(collect(**e.submit(greedy(seeded_prompt(30, seed), 2))).last.finish_reason, "length");
}
void wait_idle_checks(const Engine& e, int64_t n) {
    for (int i = 0; i < 400 && e.metrics().idle_checks_total < n; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

TEST(EngineIdleInvariants, ALeakedPageIsFoundWhenTheEngineGoesIdle) {
    auto runner = make_runner(64);
    kv_cache::PagePool* pool = &runner->page_pool();
    auto made = Engine::create(std::move(runner), nullptr, EngineOptions{});
    ASSERT_TRUE(made.ok());
    Engine& e = **made;
    e.start();
    run_one(e, 1);
    wait_idle_checks(e, 1);
    EXPECT_EQ(e.metrics().idle_checks_total, 1);
    EXPECT_EQ(e.metrics().invariant_violations_total, 0);
    // The engine is idle: nothing else touches the pool while the test takes a page.
    Result<std::vector<int32_t>> leaked = pool->allocate(1);
    ASSERT_TRUE(leaked.ok());
    run_one(e, 2);  // still serves
    wait_idle_checks(e, 2);
    EXPECT_EQ(e.metrics().idle_checks_total, 2);
    EXPECT_EQ(e.metrics().invariant_violations_total, 1);
    pool->release(*leaked);
    run_one(e, 3);
    wait_idle_checks(e, 3);
    EXPECT_EQ(e.metrics().invariant_violations_total, 1) << "back in order";
    EngineOptions off;
    off.idle_invariant_check = InvariantCheck::kOff;
    auto quiet = make_engine(std::move(off));
    quiet->start();
    run_one(*quiet, 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    EXPECT_EQ(quiet->metrics().idle_checks_total, 0);
}

TEST(EngineIdleInvariantsDeathTest, AbortSettingEndsTheProcess) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            auto runner = make_runner(64);
            kv_cache::PagePool* pool = &runner->page_pool();
            EngineOptions o;
            o.idle_invariant_check = InvariantCheck::kAbort;
            auto e = std::move(Engine::create(std::move(runner), nullptr, std::move(o))).value();
            e->start();
            (void)pool->allocate(1);
            run_one(*e, 5);
            std::this_thread::sleep_for(std::chrono::seconds(5));
        },
        "idle invariant check failed");
}

struct MixCase {
    int64_t chunk;                 // chunked_prefill_size (0: no chunking)
    std::vector<int64_t> lengths;  // prompts submitted together
};

class FirstTokenLogits : public ::testing::TestWithParam<MixCase> {};

TEST_P(FirstTokenLogits, EqualUnchunkedPrefill) {
    const MixCase& c = GetParam();
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < c.lengths.size(); ++i) prompts.push_back(seeded_prompt(c.lengths[i], 100 + i));
    // Reference: each prompt alone, unchunked.
    auto ref_runner = make_runner(64);
    std::vector<std::vector<float>> want;
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto r = ref_runner->prefill_all_logits(std::span(&prompts[i], 1), /*chunk_size=*/0);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        const Tensor& l = r->front();
        const int64_t vocab = l.size(1);
        const float* last = l.ptr<const float>() + (l.size(0) - 1) * vocab;
        want.emplace_back(last, last + vocab);
    }
    std::mutex mu;
    std::map<int64_t, std::vector<float>> first;  // engine request id -> first sampled row
    EngineOptions o;
    o.scheduler.chunked_prefill_size = c.chunk;
    o.scheduler.max_prefill_tokens = c.chunk > 0 ? c.chunk : 4096;
    o.logits_observer = [&](int64_t id, std::span<const float> row) {
        std::lock_guard<std::mutex> lock(mu);
        first.try_emplace(id, row.begin(), row.end());
    };
    auto eng = make_engine(std::move(o));
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (const auto& p : prompts) {
        auto h = eng->submit(greedy(p, 3));
        ASSERT_TRUE(h.ok()) << h.status().to_string();
        hs.push_back(*h);
    }
    eng->start();
    for (auto& h : hs) EXPECT_EQ(collect(*h).last.finish_reason, "length");
    for (size_t i = 0; i < hs.size(); ++i) {
        std::lock_guard<std::mutex> lock(mu);
        ASSERT_EQ(first.count(hs[i]->id()), 1u);
        const std::vector<float>& got = first[hs[i]->id()];
        ASSERT_EQ(got.size(), want[i].size());
        float worst = 0;
        for (size_t v = 0; v < got.size(); ++v) worst = std::max(worst, std::abs(got[v] - want[i][v]));
        EXPECT_LE(worst, kMaxAbsDiff) << "prompt " << i << " (" << prompts[i].size() << " tokens), chunk " << c.chunk;
        const auto argmax = [](const std::vector<float>& x) {
            return std::max_element(x.begin(), x.end()) - x.begin();
        };
        EXPECT_EQ(argmax(got), argmax(want[i])) << "prompt " << i;
    }
    wait_idle(*eng);
    EXPECT_EQ(eng->metrics().kv_pages_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Mixes, FirstTokenLogits,
                         ::testing::Values(MixCase{0, {37}}, MixCase{64, {200}}, MixCase{128, {5, 130, 64, 65}},
                                           MixCase{64, {1, 150, 63, 129, 20}}, MixCase{0, {90, 3, 140}}));

TEST(Engine, GreedyTokensDoNotDependOnBatching) {
    const std::vector<int32_t> p = seeded_prompt(70, 7);
    auto alone = make_engine({});
    alone->start();
    auto h = alone->submit(greedy(p, 6));
    ASSERT_TRUE(h.ok());
    const std::vector<int32_t> want = collect(**h).ids;
    EngineOptions o;
    o.scheduler.chunked_prefill_size = 64;
    auto mixed = make_engine(std::move(o));
    mixed->start();
    std::vector<std::shared_ptr<RequestHandle>> others;
    for (int i = 0; i < 4; ++i) others.push_back(*mixed->submit(greedy(seeded_prompt(40 + 30 * i, 50 + i), 5)));
    auto h2 = mixed->submit(greedy(p, 6));
    ASSERT_TRUE(h2.ok());
    EXPECT_EQ(collect(**h2).ids, want);
    for (auto& o2 : others) collect(*o2);
}

TEST(Engine, FinishReasons) {
    auto eng = make_engine({.eos_token_ids = {1}});
    eng->start();
    const std::vector<int32_t> p = seeded_prompt(20, 3);
    // Length.
    Collected len = collect(**eng->submit(greedy(p, 4)));
    EXPECT_EQ(len.last.finish_reason, "length");
    EXPECT_EQ(len.ids.size(), 4u);
    EXPECT_EQ(len.last.completion_tokens, 4);
    EXPECT_EQ(len.last.prompt_tokens, 20);
    // Stop token: the greedy run's third token, as a stop token id.
    GenerateRequest r = greedy(p, 10);
    r.params.stop_token_ids = {len.ids[2]};
    Collected stop = collect(**eng->submit(r));
    EXPECT_EQ(stop.last.finish_reason, "stop");
    ASSERT_TRUE(stop.last.matched_stop_token.has_value());
    EXPECT_EQ(*stop.last.matched_stop_token, len.ids[2]);
    EXPECT_LE(stop.ids.size(), 3u);
    EXPECT_EQ(stop.ids.back(), len.ids[2]);
    // Invalid requests are refused synchronously.
    EXPECT_EQ(eng->submit(greedy({}, 1)).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(eng->submit(greedy({600}, 1)).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(eng->submit(greedy(p, 100000)).status().code(), StatusCode::kOutOfRange);
    GenerateRequest bad = greedy(p, 1);
    bad.params.sampling.top_p = std::nanf("");
    EXPECT_EQ(eng->submit(bad).status().code(), StatusCode::kInvalidArgument);
    bad = greedy(p, 1);
    bad.params.stop = {"x"};  // no tokenizer
    EXPECT_EQ(eng->submit(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(Engine, StopStringsTruncateText) {
    auto tok = Tokenizer::from_dir(kModelDir);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    auto eng = make_engine({}, 256, tok->get());
    eng->start();
    const std::vector<int32_t> p = seeded_prompt(12, 9);
    Collected free_run = collect(**eng->submit(greedy(p, 12)));
    ASSERT_GE(free_run.text.size(), 4u);
    // A stop string taken from the middle of the free run's text: the output ends just before it.
    const std::string stop = free_run.text.substr(free_run.text.size() / 2, 2);
    GenerateRequest r = greedy(p, 12);
    r.params.stop = {stop};
    Collected cut = collect(**eng->submit(r));
    EXPECT_EQ(cut.last.finish_reason, "stop");
    EXPECT_EQ(cut.last.matched_stop, stop);
    EXPECT_EQ(cut.text, free_run.text.substr(0, free_run.text.find(stop)));
    wait_idle(*eng);
    EXPECT_EQ(eng->metrics().kv_pages_used, 0);
}

TEST(Engine, AbortAndTimeoutFreePages) {
    auto eng = make_engine({});
    eng->start();
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 4; ++i) hs.push_back(*eng->submit(greedy(seeded_prompt(100, 20 + i), 2000)));
    GenerateRequest timed = greedy(seeded_prompt(50, 30), 2000);
    timed.timeout = std::chrono::milliseconds(50);
    auto th = eng->submit(timed);
    ASSERT_TRUE(th.ok());
    for (int i = 0; i < 1000 && eng->metrics().running < 4; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_GT(eng->metrics().kv_pages_used, 0);
    for (auto& h : hs) eng->abort(h->id(), AbortReason::kClientDisconnect);
    for (auto& h : hs) {
        const Collected c = collect(*h);
        EXPECT_EQ(c.last.finish_reason, "abort");
        EXPECT_EQ(c.last.error.code(), StatusCode::kCancelled);
    }
    const Collected t = collect(**th);
    EXPECT_EQ(t.last.finish_reason, "timeout");
    EXPECT_EQ(t.last.error.code(), StatusCode::kDeadlineExceeded);
    wait_idle(*eng);
    const EngineMetrics m = eng->metrics();
    EXPECT_EQ(m.kv_pages_used, 0);
    EXPECT_EQ(m.running, 0);
    EXPECT_EQ(m.aborted_by_reason.at("client_disconnect"), 4);
    EXPECT_EQ(m.aborted_by_reason.at("timeout"), 1);
}

TEST(Engine, InjectedStepFailureFailsOnlyItsRequests) {
    const int kRequests = 24;  // one victim among many (RELIABILITY T3)
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < kRequests; ++i) prompts.push_back(seeded_prompt(20 + 5 * i, 70 + i));
    const auto run = [&](bool inject) {
        EngineOptions o;
        o.scheduler.chunked_prefill_size = 64;
        o.scheduler.max_prefill_tokens = 64;  // one prompt per step, so a failed step holds one request
        auto eng = make_engine(std::move(o));
        std::vector<std::shared_ptr<RequestHandle>> hs;
        for (const auto& p : prompts) hs.push_back(*eng->submit(greedy(p, 4)));
        const int64_t victim = hs[7]->id();
        if (inject) {
            // Not thread-safe to set after start: set before.
            EngineOptions* opts = const_cast<EngineOptions*>(&eng->options());
            opts->step_fault = [victim](const scheduler::BatchPlan& plan) {
                for (const auto& e : plan.entries) {
                    if (e.request_id == victim && e.kind == scheduler::EntryKind::kPrefill) {
                        return internal_error("injected fault");
                    }
                }
                return ok_status();
            };
        }
        eng->start();
        std::vector<Collected> out;
        for (auto& h : hs) out.push_back(collect(*h));
        wait_idle(*eng);
        EXPECT_EQ(eng->metrics().kv_pages_used, 0);
        return out;
    };
    const std::vector<Collected> clean = run(false);
    const std::vector<Collected> faulty = run(true);
    for (int i = 0; i < kRequests; ++i) {
        if (i == 7) {
            EXPECT_EQ(faulty[i].last.finish_reason, "error");
            EXPECT_EQ(faulty[i].last.error.code(), StatusCode::kInternal);
        } else {
            EXPECT_EQ(faulty[i].last.finish_reason, "length") << i;
            EXPECT_EQ(faulty[i].ids, clean[i].ids) << "request " << i << " changed by another request's failure";
        }
    }
}

TEST(Engine, BoundedQueue) {
    EngineOptions o;
    o.scheduler.max_queue_size = 3;
    auto eng = make_engine(std::move(o));  // not started: nothing leaves the queue
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(eng->submit(greedy({5, 6, 7}, 1)).ok());
    EXPECT_EQ(eng->submit(greedy({5, 6, 7}, 1)).status().code(), StatusCode::kResourceExhausted);
    eng->stop_accepting();
    EXPECT_EQ(eng->submit(greedy({5}, 1)).status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(eng->metrics().rejected_by_reason.at("queue_full"), 1);
}

// ---- sampling ----

// Seeded sampling is reproducible: the same seeded request gives the same tokens on a fresh engine, alone or among
// other requests (batching and step boundaries never matter), and requests without a seed repeat with the same
// engine seed.
TEST(Engine, SeededSamplingIsReproducible) {
    const auto sampled = [](std::vector<int32_t> prompt, std::optional<uint64_t> seed) {
        GenerateRequest r = greedy(std::move(prompt), 12);
        r.params.sampling = {.temperature = 0.9f, .top_p = 0.9f, .top_k = 50, .seed = seed};
        return r;
    };
    const std::vector<int32_t> p = seeded_prompt(40, 11);
    std::vector<int32_t> alone;
    {
        auto eng = make_engine({});
        eng->start();
        auto h = eng->submit(sampled(p, 1234));
        ASSERT_TRUE(h.ok());
        alone = collect(**h).ids;
    }
    ASSERT_EQ(alone.size(), 12u);
    EngineOptions o;
    o.scheduler.chunked_prefill_size = 64;
    o.scheduler.max_prefill_tokens = 64;
    o.seed = 99;
    auto eng = make_engine(std::move(o));
    std::vector<std::shared_ptr<RequestHandle>> others;
    for (int i = 0; i < 3; ++i)
        others.push_back(*eng->submit(sampled(seeded_prompt(50 + 20 * i, 60 + i), std::nullopt)));
    auto h = eng->submit(sampled(p, 1234));
    ASSERT_TRUE(h.ok());
    eng->start();
    EXPECT_EQ(collect(**h).ids, alone);
    std::vector<std::vector<int32_t>> unseeded;
    for (auto& x : others) unseeded.push_back(collect(*x).ids);
    // The same unseeded requests, in the same submission order, on a fresh engine with the same engine seed.
    EngineOptions o2;
    o2.seed = 99;
    auto again = make_engine(std::move(o2));
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 3; ++i) hs.push_back(*again->submit(sampled(seeded_prompt(50 + 20 * i, 60 + i), std::nullopt)));
    again->start();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(collect(*hs[static_cast<size_t>(i)]).ids, unseeded[static_cast<size_t>(i)]);
}

// Prefill/decode disaggregation at the engine level (SPEC §5): a prefill engine computes the first token and sends the
// KV pages over UCX into the pages a decode engine reserved for the room; the decode engine generates the rest. The
// tokens equal one engine's generation, and both ends return to zero pages.
Result<disagg::KvDestination> wait_for_destination(const Engine& decode, uint64_t room, Clock::time_point deadline,
                                                   bool lazy) {
    for (;;) {
        const Result<std::vector<uint8_t>> bytes = decode.destination(room, lazy);
        if (bytes.ok()) return disagg::KvDestination::decode(*bytes);
        if (bytes.status().code() != StatusCode::kNotFound || Clock::now() > deadline) return bytes.status();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

EngineOptions disagg_options(DisaggOptions::Mode mode, const Engine* decode = nullptr, bool lazy = false) {
    EngineOptions o;
    o.disagg.mode = mode;
    o.disagg.lazy_allocation = lazy;
    o.disagg.timeouts = {.bootstrap = std::chrono::milliseconds(5000),
                         .waiting = std::chrono::milliseconds(30000),
                         .transfer = std::chrono::milliseconds(5000)};
    if (decode != nullptr) {
        o.disagg.resolve_destination = [decode, lazy](uint64_t room, Clock::time_point deadline) {
            return wait_for_destination(*decode, room, deadline, lazy);
        };
    }
    return o;
}

class EngineDisaggLazy : public ::testing::TestWithParam<bool> {};

// Eager allocation (the room's pages reserved when the decode request arrives) and lazy allocation (reserved when the
// prefill end asks for the destination) give the same tokens.
TEST_P(EngineDisaggLazy, PrefillThenDecodeEqualsOneEngine) {
    if (disagg::transfer_backends().empty()) GTEST_SKIP() << "this build has no transfer engine (libucx-dev)";
    const bool lazy = GetParam();
    const std::vector<int64_t> lengths = {70, 130, 9};
    std::vector<std::vector<int32_t>> want;
    {
        auto one = make_engine({});
        one->start();
        for (size_t i = 0; i < lengths.size(); ++i) {
            auto h = one->submit(greedy(seeded_prompt(lengths[i], 90 + i), 6));
            ASSERT_TRUE(h.ok());
            want.push_back(collect(**h).ids);
        }
    }
    auto decode = make_engine(disagg_options(DisaggOptions::Mode::kDecode, nullptr, lazy));
    EngineOptions po = disagg_options(DisaggOptions::Mode::kPrefill, decode.get(), lazy);
    po.scheduler.chunked_prefill_size = 64;  // the prefill end chunks; the KV is the same
    po.disagg.transfer_queues = 2;           // three rooms over two queues (threads with their own engines)
    auto prefill = make_engine(std::move(po));
    decode->start();
    prefill->start();
    std::vector<std::shared_ptr<RequestHandle>> dh, ph;
    for (size_t i = 0; i < lengths.size(); ++i) {
        GenerateRequest d = greedy(seeded_prompt(lengths[i], 90 + i), 6);
        d.bootstrap_room = 1000 + i;
        dh.push_back(*decode->submit(std::move(d)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (lazy) {
        EXPECT_EQ(decode->metrics().kv_pages_used, 0) << "claimed, no pages until the prefill end asks";
    } else {
        EXPECT_GT(decode->metrics().kv_pages_used, 0);
    }
    for (size_t i = 0; i < lengths.size(); ++i) {
        GenerateRequest p = greedy(seeded_prompt(lengths[i], 90 + i), 6);
        p.bootstrap_room = 1000 + i;
        ph.push_back(*prefill->submit(std::move(p)));
    }
    for (size_t i = 0; i < lengths.size(); ++i) {
        const Collected p = collect(*ph[i]);
        EXPECT_TRUE(p.last.error.ok()) << p.last.error.to_string();
        ASSERT_EQ(p.ids.size(), 1u) << "the prefill end computes the first token only";
        EXPECT_EQ(p.ids[0], want[i][0]);
        const Collected d = collect(*dh[i]);
        EXPECT_TRUE(d.last.error.ok()) << d.last.error.to_string();
        EXPECT_EQ(d.ids, want[i]) << "prompt " << lengths[i];
        EXPECT_EQ(d.last.finish_reason, "length");
    }
    wait_idle(*decode);
    for (int i = 0; i < 2000 && prefill->metrics().kv_pages_used > 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(decode->metrics().kv_pages_used, 0);
    EXPECT_EQ(prefill->metrics().kv_pages_used, 0) << "held pages are freed once sent";
    EXPECT_EQ(prefill->metrics().kv_transfers.at("sent"), 3);
    EXPECT_EQ(decode->metrics().kv_transfers.at("received"), 3);
}

INSTANTIATE_TEST_SUITE_P(Allocation, EngineDisaggLazy, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Lazy" : "Eager"; });

// The two ends disagree on lazy allocation (RELIABILITY T12): the decode request fails at once naming the setting, the
// prefill end's transfer fails, and both return to zero pages. A lazy claim nobody asks for fails at its deadline.
TEST(EngineDisagg, LazyAllocationMismatchIsRefused) {
    if (disagg::transfer_backends().empty()) GTEST_SKIP() << "this build has no transfer engine (libucx-dev)";
    for (const bool decode_lazy : {true, false}) {
        EngineOptions dopt = disagg_options(DisaggOptions::Mode::kDecode, nullptr, decode_lazy);
        dopt.disagg.timeouts.waiting = std::chrono::milliseconds(5000);
        auto decode = make_engine(std::move(dopt));
        auto prefill = make_engine(disagg_options(DisaggOptions::Mode::kPrefill, decode.get(), !decode_lazy));
        decode->start();
        prefill->start();
        GenerateRequest r = greedy(seeded_prompt(40, 8), 4);
        r.bootstrap_room = 77;
        auto dh = decode->submit(r);
        auto ph = prefill->submit(r);
        ASSERT_TRUE(dh.ok() && ph.ok());
        const Collected d = collect(**dh);
        EXPECT_EQ(d.last.finish_reason, "error");
        EXPECT_NE(d.last.error.message().find("--disaggregation-lazy-allocation is "), std::string::npos)
            << d.last.error.to_string();
        collect(**ph);
        wait_idle(*decode);
        for (int i = 0; i < 2000 && prefill->metrics().kv_transfers["send_failed"] == 0; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        wait_idle(*prefill);
        EXPECT_EQ(decode->metrics().kv_pages_used, 0);
        EXPECT_EQ(prefill->metrics().kv_pages_used, 0);
        EXPECT_EQ(prefill->metrics().kv_transfers["send_failed"], 1);
    }
    EngineOptions dopt = disagg_options(DisaggOptions::Mode::kDecode, nullptr, true);
    dopt.disagg.timeouts.waiting = std::chrono::milliseconds(100);
    auto decode = make_engine(std::move(dopt));
    decode->start();
    GenerateRequest r = greedy(seeded_prompt(40, 8), 4);
    r.bootstrap_room = 5;
    auto h = decode->submit(r);
    ASSERT_TRUE(h.ok());
    const Collected c = collect(**h);
    EXPECT_EQ(c.last.error.code(), StatusCode::kUnavailable);
    EXPECT_NE(c.last.error.message().find("did not ask for the room"), std::string::npos) << c.last.error.to_string();
    wait_idle(*decode);
    EXPECT_EQ(decode->metrics().kv_pages_used, 0);
}

// RELIABILITY T7 on the decode end: a request aborted while its KV is on the way ends at once (abort), but its pages
// stay held until the room is over (the prefill end may still be writing them); then every page is free.
TEST(EngineDisagg, AbortWhileTheKvIsOnTheWayHoldsThePagesUntilTheRoomEnds) {
    if (disagg::transfer_backends().empty()) GTEST_SKIP() << "this build has no transfer engine (libucx-dev)";
    auto decode = make_engine(disagg_options(DisaggOptions::Mode::kDecode));
    auto prefill = make_engine(disagg_options(DisaggOptions::Mode::kPrefill, decode.get()));
    decode->start();
    prefill->start();
    GenerateRequest r = greedy(seeded_prompt(150, 12), 8);
    r.bootstrap_room = 31;
    auto dh = decode->submit(r);
    ASSERT_TRUE(dh.ok());
    for (int i = 0; i < 1000 && !decode->destination(31).ok(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const int64_t pages = decode->metrics().kv_pages_used;
    EXPECT_EQ(pages, 3) << "150 + 8 tokens";
    decode->abort((*dh)->id(), AbortReason::kClientDisconnect);
    const Collected d = collect(**dh);
    EXPECT_EQ(d.last.finish_reason, "abort");
    EXPECT_EQ(decode->metrics().kv_pages_used, pages) << "held: the prefill end may still write them";
    auto ph = prefill->submit(r);
    ASSERT_TRUE(ph.ok());
    collect(**ph);
    for (int i = 0; i < 2000 && (decode->metrics().kv_pages_used > 0 || prefill->metrics().kv_pages_used > 0); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(decode->metrics().kv_pages_used, 0) << "freed once the room's KV arrived";
    EXPECT_EQ(prefill->metrics().kv_pages_used, 0);
    EXPECT_EQ(prefill->metrics().kv_transfers.at("sent"), 1);
    EXPECT_EQ(decode->metrics().aborted_by_reason.at("client_disconnect"), 1);
}

// Kimi K3 (KDA + MLA layers, AttnRes): the request's KDA recurrent and conv state travels with its MLA pages (one
// per-slot buffer per KDA layer and kind), so the decode end continues the linear attention where the prefill end
// left it; the tokens equal one engine's.
TEST(EngineDisagg, KimiKdaStateTravelsWithThePages) {
    if (disagg::transfer_backends().empty()) GTEST_SKIP() << "this build has no transfer engine (libucx-dev)";
    const std::string k3 = std::string(PENSTOCK_TEST_DATA_DIR) + "/variants_k3/k3_tiny_block2";
    const auto engine_for = [&](EngineOptions o) {
        auto e = Engine::create(make_runner(64, k3), nullptr, std::move(o));
        EXPECT_TRUE(e.ok()) << e.status().to_string();
        return std::move(e).value();
    };
    const std::vector<int64_t> lengths = {70, 5, 129};
    const auto prompt = [](int64_t len, uint64_t seed) {
        std::vector<int32_t> p = seeded_prompt(len, seed);
        for (int32_t& t : p) t %= 250;  // the tiny K3's vocabulary is 256
        return p;
    };
    std::vector<std::vector<int32_t>> want;
    {
        auto one = engine_for({});
        one->start();
        for (size_t i = 0; i < lengths.size(); ++i) {
            auto h = one->submit(greedy(prompt(lengths[i], 40 + i), 6));
            ASSERT_TRUE(h.ok()) << h.status().to_string();
            want.push_back(collect(**h).ids);
        }
    }
    auto decode = engine_for(disagg_options(DisaggOptions::Mode::kDecode));
    EngineOptions po = disagg_options(DisaggOptions::Mode::kPrefill, decode.get());
    po.scheduler.chunked_prefill_size = 64;
    auto prefill = engine_for(std::move(po));
    decode->start();
    prefill->start();
    for (size_t i = 0; i < lengths.size(); ++i) {
        GenerateRequest r = greedy(prompt(lengths[i], 40 + i), 6);
        r.bootstrap_room = 500 + i;
        auto dh = decode->submit(r);
        auto ph = prefill->submit(r);
        ASSERT_TRUE(dh.ok() && ph.ok()) << dh.status().to_string() << " " << ph.status().to_string();
        EXPECT_EQ(collect(**ph).ids.size(), 1u);
        const Collected d = collect(**dh);
        EXPECT_TRUE(d.last.error.ok()) << d.last.error.to_string();
        EXPECT_EQ(d.ids, want[i]) << "prompt " << lengths[i];
    }
    wait_idle(*decode);
    for (int i = 0; i < 2000 && prefill->metrics().kv_pages_used > 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(decode->metrics().kv_pages_used, 0);
    EXPECT_EQ(prefill->metrics().kv_pages_used, 0);
    EXPECT_EQ(prefill->metrics().kv_transfers.at("sent"), 3);
}

// The prefill end bootstraps a room when its request arrives, not when its forward is done: with the prefill steps
// slowed down, the decode end's room is already waiting for its KV (WaitingForInput, destination fetched) before
// the prefill end has its first token.
TEST(EngineDisagg, TheBootstrapOverlapsThePrefillForward) {
    if (disagg::transfer_backends().empty()) GTEST_SKIP() << "this build has no transfer engine (libucx-dev)";
    auto decode = make_engine(disagg_options(DisaggOptions::Mode::kDecode));
    EngineOptions po = disagg_options(DisaggOptions::Mode::kPrefill, decode.get());
    po.step_fault = [](const scheduler::BatchPlan&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        return ok_status();
    };
    auto prefill = make_engine(std::move(po));
    decode->start();
    prefill->start();
    GenerateRequest r = greedy(seeded_prompt(40, 9), 3);
    r.bootstrap_room = 64;
    auto dh = decode->submit(r);
    ASSERT_TRUE(dh.ok());
    for (int i = 0; i < 1000 && decode->metrics().disagg_rooms["Bootstrapping"] != 1; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(decode->metrics().disagg_rooms["Bootstrapping"], 1) << "pages reserved, destination not fetched yet";
    auto ph = prefill->submit(r);
    ASSERT_TRUE(ph.ok());
    for (int i = 0; i < 300 && decode->metrics().disagg_rooms["WaitingForInput"] != 1; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(decode->metrics().disagg_rooms["WaitingForInput"], 1);
    EXPECT_TRUE((*ph)->wait(std::chrono::milliseconds(0)).empty()) << "the prefill forward (400 ms) is not done";
    const Collected p = collect(**ph);
    EXPECT_EQ(p.ids.size(), 1u);
    const Collected d = collect(**dh);
    EXPECT_TRUE(d.last.error.ok()) << d.last.error.to_string();
    EXPECT_EQ(d.ids.size(), 3u);
    EXPECT_EQ(d.ids[0], p.ids[0]);
}

// RELIABILITY T17 for disaggregation: 24 rooms, some aborted at the decode end, some at the prefill end, at random
// moments (queued, computing, KV on the way). Every request ends, the rooms that ran to completion give one engine's
// tokens, and both ends return to zero pages (held and quarantined pages included).
TEST(EngineDisagg, RandomAbortsOnBothEndsLeakNothing) {
    if (disagg::transfer_backends().empty()) GTEST_SKIP() << "this build has no transfer engine (libucx-dev)";
    std::vector<std::vector<int32_t>> prompts, want;
    {
        auto one = make_engine({});
        one->start();
        for (int i = 0; i < 24; ++i) {
            prompts.push_back(seeded_prompt(20 + 17 * (i % 7), 300 + i));
            want.push_back(collect(**one->submit(greedy(prompts.back(), 4))).ids);
        }
    }
    // A room whose prefill request was aborted waits out the decode end's waiting deadline (8 s here), then its pages
    // the transfer deadline's quarantine (300 ms); the prefill end's deadlines are long enough never to bite.
    EngineOptions dopt = disagg_options(DisaggOptions::Mode::kDecode);
    dopt.disagg.timeouts = {.bootstrap = std::chrono::milliseconds(30000),
                            .waiting = std::chrono::milliseconds(8000),
                            .transfer = std::chrono::milliseconds(300)};
    auto decode = make_engine(std::move(dopt));
    EngineOptions popt = disagg_options(DisaggOptions::Mode::kPrefill, decode.get());
    popt.disagg.timeouts = {.bootstrap = std::chrono::milliseconds(30000),
                            .waiting = std::chrono::milliseconds(60000),
                            .transfer = std::chrono::milliseconds(5000)};
    popt.scheduler.chunked_prefill_size = 64;
    auto prefill = make_engine(std::move(popt));
    decode->start();
    prefill->start();
    std::mt19937 rng(17);
    std::vector<std::shared_ptr<RequestHandle>> dh, ph;
    std::vector<int> fate(prompts.size());  // 0: runs, 1: aborted at decode, 2: aborted at prefill
    for (size_t i = 0; i < prompts.size(); ++i) {
        GenerateRequest r = greedy(prompts[i], 4);
        r.bootstrap_room = 9000 + i;
        dh.push_back(*decode->submit(r));
        ph.push_back(*prefill->submit(r));
        fate[i] = static_cast<int>(rng() % 3);
        if (fate[i] != 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
            if (fate[i] == 1) decode->abort(dh[i]->id(), AbortReason::kClientDisconnect);
            if (fate[i] == 2) prefill->abort(ph[i]->id(), AbortReason::kClientDisconnect);
        }
    }
    int completed = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const Collected d = collect(*dh[i]);
        const Collected p = collect(*ph[i]);
        if (fate[i] == 0) {
            EXPECT_EQ(d.ids, want[i]) << "room " << i << ": decode " << d.last.error.to_string() << ", prefill "
                                      << p.last.error.to_string();
            ++completed;
        } else if (d.last.error.ok() && p.last.error.ok()) {
            EXPECT_EQ(d.ids, want[i]) << "room " << i << ": the abort came after the work was done";
        }
    }
    EXPECT_GT(completed, 0);
    for (int i = 0; i < 3000 && (decode->metrics().kv_pages_used > 0 || prefill->metrics().kv_pages_used > 0 ||
                                 decode->n_live() > 0 || prefill->n_live() > 0);
         ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(decode->metrics().kv_pages_used, 0);
    EXPECT_EQ(prefill->metrics().kv_pages_used, 0);
    EXPECT_EQ(decode->n_live(), 0);
    EXPECT_EQ(prefill->n_live(), 0);
    EXPECT_EQ(decode->metrics().kv_transfers["record_dropped"], 0) << "every aux record found its room";
}

TEST(EngineDisagg, MissingPeersFailCleanlyAndFreeEveryPage) {
    if (disagg::transfer_backends().empty()) GTEST_SKIP() << "this build has no transfer engine (libucx-dev)";
    // A room outside a disaggregation mode is a bad request.
    auto plain = make_engine({});
    GenerateRequest r = greedy(seeded_prompt(20, 3), 4);
    r.bootstrap_room = 1;
    EXPECT_EQ(plain->submit(r).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(plain->destination(1).status().code(), StatusCode::kFailedPrecondition);

    // Decode end, no prefill end (RELIABILITY T11): the request fails at the waiting deadline; its pages wait out the
    // transfer deadline (a late writer) and are then freed. A second request for a room in use fails at once.
    EngineOptions o = disagg_options(DisaggOptions::Mode::kDecode);
    o.disagg.timeouts.waiting = std::chrono::milliseconds(200);
    o.disagg.timeouts.transfer = std::chrono::milliseconds(100);
    auto decode = make_engine(std::move(o));
    decode->start();
    auto h = decode->submit(r);
    ASSERT_TRUE(h.ok());
    for (int i = 0; i < 1000 && !decode->destination(1).ok(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(decode->destination(1).ok());
    auto dup = decode->submit(r);
    ASSERT_TRUE(dup.ok());
    const Collected d2 = collect(**dup);
    EXPECT_EQ(d2.last.finish_reason, "error");
    EXPECT_NE(d2.last.error.message().find("in use"), std::string::npos) << d2.last.error.to_string();
    const Collected d = collect(**h);
    EXPECT_EQ(d.last.finish_reason, "error");
    EXPECT_EQ(d.last.error.code(), StatusCode::kUnavailable);
    EXPECT_NE(d.last.error.message().find("deadline passed in WaitingForInput"), std::string::npos)
        << d.last.error.to_string();
    EXPECT_TRUE(d.ids.empty()) << "nothing is decoded from partial KV";
    wait_idle(*decode);
    EXPECT_EQ(decode->metrics().kv_pages_used, 0);
    EXPECT_EQ(decode->metrics().kv_transfers.at("receive_failed"), 1);
    EXPECT_EQ(decode->destination(1).status().code(), StatusCode::kNotFound);

    // Prefill end, no decode end (RELIABILITY T10): the client has its first token (early output), the transfer fails
    // at the bootstrap deadline, and the held pages are freed.
    EngineOptions po = disagg_options(DisaggOptions::Mode::kPrefill);
    po.disagg.timeouts.bootstrap = std::chrono::milliseconds(100);
    po.disagg.resolve_destination = [](uint64_t room, Clock::time_point deadline) -> Result<disagg::KvDestination> {
        std::this_thread::sleep_until(deadline);
        return Status(StatusCode::kDeadlineExceeded, "no decode end answered for room " + std::to_string(room));
    };
    auto prefill = make_engine(std::move(po));
    prefill->start();
    auto ph = prefill->submit(r);
    ASSERT_TRUE(ph.ok());
    const Collected p = collect(**ph);
    EXPECT_TRUE(p.last.error.ok());
    EXPECT_EQ(p.ids.size(), 1u);
    for (int i = 0; i < 2000 && prefill->metrics().kv_transfers["send_failed"] == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    wait_idle(*prefill);
    EXPECT_EQ(prefill->metrics().kv_pages_used, 0);
    EXPECT_EQ(prefill->metrics().kv_transfers["send_failed"], 1);
}

TEST(Sampling, ValidateRejectsBadValues) {
    EXPECT_FALSE(validate({.temperature = -1}).ok());
    EXPECT_FALSE(validate({.temperature = INFINITY}).ok());
    EXPECT_FALSE(validate({.top_p = 0}).ok());
    EXPECT_FALSE(validate({.top_p = 1.5f}).ok());
    EXPECT_FALSE(validate({.top_p = NAN}).ok());
    EXPECT_FALSE(validate({.top_k = -2}).ok());
    EXPECT_FALSE(validate({.min_p = 2}).ok());
    EXPECT_TRUE(validate({.temperature = 0, .top_p = 1, .top_k = 0}).ok());
}

}  // namespace
}  // namespace penstock::engine
