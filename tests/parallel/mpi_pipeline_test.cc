// Micro-batched pipeline prefill under `mpirun -np N`: C concurrent prompts in micro-batches with up to
// pp + async-depth in flight give the single-process logits (within 1e-4: GEMM shapes differ, so rounding may),
// for the DeepSeek-V3 and Kimi Linear fixtures (a 4-stage GLM fixture split would start a stage at a shared indexer
// layer; its pipeline runs are in tests/apps/pp_cli_test.sh); the last stage samples each prompt's next token
// (greedy: the single process's argmax; seeded temperature/top-p: the same token the sampler draws from the single
// process's logits); every stage does work and reports its counters; pages return to baseline.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/model.h"
#include "parallel/mpi_communicator.h"
#include "parallel/partition.h"
#include "parallel/pipeline.h"
#include "runtime/model_runner.h"

namespace penstock::parallel {
namespace {

MpiSession* g_session = nullptr;

std::unique_ptr<runtime::ModelRunner> load(const std::string& dir, const loader::LayerRange& range, int64_t n_pages) {
    auto config = loader::load_model_config(dir);
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    auto ckpt = loader::Checkpoint::open(dir);
    EXPECT_TRUE(ckpt.ok());
    auto model = models::load_model(*config, *ckpt, range, models::ModelOptions{}, nullptr);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    return std::make_unique<runtime::ModelRunner>(std::move(model).value(),
                                                  runtime::RunnerOptions{.n_pages = n_pages, .n_threads = 1});
}

struct Case {
    const char* model;
    const char* partition;  // for 4 stages
    int64_t chunk, micro_batch, depth;
};

TEST(MpiPipeline, MicroBatchedPrefillMatchesSingleProcess) {
    const int pp = g_session->world_size();
    ASSERT_EQ(pp, 4) << "run under mpirun -np 4";
    auto groups = make_mpi_groups(*g_session, ParallelSizes{.pp = pp, .tp = 1, .ep = 1, .cp = 1});
    ASSERT_TRUE(groups.ok());
    const int stage = groups->coords.pp_rank;
    const std::string fixtures = PENSTOCK_FIXTURES_DIR;
    for (const Case& c :
         {Case{"deepseek_v3_tiny", "1,1,1,1", 32, 2, 0}, Case{"deepseek_v3_tiny", "1,1,1,1", 17, 1, 2},
          Case{"kimi_linear_tiny", "2,2,2,2", 32, 2, 0}, Case{"kimi_linear_tiny", "1,3,2,2", 7, 3, 1}}) {
        SCOPED_TRACE(std::string(c.model) + " chunk " + std::to_string(c.chunk) + " micro-batch " +
                     std::to_string(c.micro_batch));
        const std::string dir = fixtures + "/" + c.model;
        auto config = loader::load_model_config(dir);
        ASSERT_TRUE(config.ok());
        auto counts = parse_partition(c.partition, pp, config->num_hidden_layers);
        ASSERT_TRUE(counts.ok()) << counts.status().to_string();
        const loader::LayerRange range = partition_ranges(*counts)[static_cast<size_t>(stage)];
        // Six prompts of different lengths (some shorter than a chunk).
        std::vector<std::vector<int32_t>> prompts;
        for (int p = 0; p < 6; ++p) {
            std::vector<int32_t> ids;
            for (int i = 0; i < 20 + 23 * p; ++i) ids.push_back((i * 37 + 11 * p + 5) % 512);
            prompts.push_back(ids);
        }
        auto runner = load(dir, range, 64);
        PipelineStage pipe(runner.get(), groups->pp.get());
        if (stage > 0) {
            const Status served = pipe.serve();
            ASSERT_TRUE(served.ok()) << "stage " << stage << ": " << served.to_string();
            EXPECT_EQ(runner->page_pool().n_used(), 0);
            auto stats = pipe.gather_stats();
            ASSERT_TRUE(stats.ok());
            continue;
        }
        const MicroBatchOptions greedy{.chunk_size = c.chunk, .micro_batch_size = c.micro_batch, .slots = pp + c.depth};
        auto out = pipeline_prefill_sampled(runner.get(), &pipe, prompts, greedy);
        // The same prompts again, sampled at temperature 0.9 / top-p 0.95 with a seed, no logits coming back.
        MicroBatchOptions seeded = greedy;
        seeded.sampling = runtime::SeqSampling{.sample = true, .temperature = 0.9f, .top_p = 0.95f, .seed = 4242};
        seeded.return_logits = false;
        auto sampled = pipeline_prefill_sampled(runner.get(), &pipe, prompts, seeded);
        ASSERT_TRUE(pipe.stop().ok());
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        ASSERT_TRUE(sampled.ok()) << sampled.status().to_string();
        EXPECT_TRUE(sampled->logits.empty());
        const std::vector<Tensor>* got = &out->logits;
        auto stats = pipe.gather_stats();
        ASSERT_TRUE(stats.ok());
        for (size_t s = 0; s < stats->size(); ++s) EXPECT_GT((*stats)[s].steps, 0) << "stage " << s << " idle";
        EXPECT_EQ(runner->page_pool().n_used(), 0);
        auto whole = load(dir, {0, config->num_hidden_layers}, 64);
        auto want = whole->prefill_all_logits(prompts, c.chunk);
        ASSERT_TRUE(want.ok());
        for (size_t p = 0; p < prompts.size(); ++p) {
            double worst = 0;
            const float* a = (*got)[p].ptr<const float>();
            const float* b = (*want)[p].ptr<const float>();
            for (int64_t i = 0; i < (*want)[p].numel(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
            EXPECT_LE(worst, 1e-4) << "prompt " << p;
            // The last stage sampled the next token: greedy = the single process's argmax; seeded = the sampler run
            // here on the single process's last row (same seed, token index 0), and on the pipeline's own row.
            const int64_t vocab = (*want)[p].size(1);
            const int64_t last = (*want)[p].size(0) - 1;
            const std::span<const float> want_row(b + last * vocab, static_cast<size_t>(vocab));
            const std::span<const float> got_row(a + last * vocab, static_cast<size_t>(vocab));
            EXPECT_EQ(out->next[p].token, runtime::sample_token(want_row, greedy.sampling).token) << "prompt " << p;
            EXPECT_EQ(sampled->next[p].token, runtime::sample_token(got_row, seeded.sampling).token) << "prompt " << p;
            EXPECT_EQ(sampled->next[p].token, runtime::sample_token(want_row, seeded.sampling).token) << "prompt " << p;
            EXPECT_NEAR(sampled->next[p].logprob, runtime::sample_token(want_row, seeded.sampling).logprob, 1e-4);
        }
    }
}

}  // namespace
}  // namespace penstock::parallel

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    auto session = penstock::parallel::MpiSession::init(&argc, &argv);
    if (!session.ok()) return 1;
    penstock::parallel::g_session = session->get();
    // Every rank prints: a failure on a serving stage must be visible.
    return RUN_ALL_TESTS();
}
