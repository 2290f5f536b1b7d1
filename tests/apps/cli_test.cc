// The `penstock forward` command-line contract: logits file of every position for fixtures and variant checkpoints
// (other head counts, YaRN/mscale, groups, sharded files, FP8) in both MLA forms and several chunk sizes; bad
// arguments, missing files and unsupported model types give one error line and exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/reference.h"

namespace penstock {
namespace {

namespace fs = std::filesystem;

struct RunResult {
    int exit_code = -1;
    std::string out;
    std::string err;
};

fs::path temp_dir() {
    static const fs::path dir = [] {
        fs::path d = fs::temp_directory_path() / ("penstock_cli_test_" + std::to_string(::getpid()));
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

std::string slurp(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

RunResult run(const std::string& args) {
    const fs::path out = temp_dir() / "stdout.txt";
    const fs::path err = temp_dir() / "stderr.txt";
    const std::string cmd = std::string(PENSTOCK_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string();
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

std::string join_ids(const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) s.push_back(',');
        s.append(std::to_string(ids[i]));
    }
    return s;
}

int count_lines(const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
}

void expect_matches_reference(const fs::path& model_dir, const std::string& extra) {
    const auto ref = testing::load_reference(model_dir);
    for (size_t k = 0; k < ref.size(); ++k) {
        const fs::path out = temp_dir() / ("logits_" + std::to_string(k) + ".safetensors");
        const RunResult r = run("forward --model " + model_dir.string() + " --input-ids " + join_ids(ref[k].ids) +
                                " --out " + out.string() + " " + extra);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const Tensor got = testing::read_f32_tensor(out, "logits");
        const auto cmp = testing::compare_logits(got, ref[k].logits, 2e-3);
        EXPECT_LE(cmp.max_abs_diff, 2e-3) << model_dir << " prompt " << k << " " << extra << ": " << cmp.describe();
        EXPECT_EQ(cmp.argmax_mismatches, 0) << model_dir << " prompt " << k << " " << extra << ": " << cmp.describe();
    }
}

TEST(Cli, ForwardWritesEveryPositionsLogits) {
    expect_matches_reference(fs::path(PENSTOCK_FIXTURES_DIR) / "deepseek_v3_tiny", "--chunk-size 5 --mla-form absorbed");
}

TEST(Cli, OtherFamiliesFixtures) {
    for (const char* name : {"glm_moe_dsa_tiny", "kimi_linear_tiny"}) {
        expect_matches_reference(fs::path(PENSTOCK_FIXTURES_DIR) / name, "--chunk-size 17");
    }
}

// Every variant checkpoint under tests/data/variants*/ (all families) through the CLI, in two chunkings/forms.
TEST(Cli, VariantCheckpointsMatchTheirReferences) {
    int n = 0;
    for (const auto& root : fs::directory_iterator(PENSTOCK_TEST_DATA_DIR)) {
        if (!root.is_directory() || root.path().filename().string().rfind("variants", 0) != 0) continue;
        for (const auto& e : fs::directory_iterator(root.path())) {
            if (!fs::exists(e.path() / "reference.safetensors")) continue;
            expect_matches_reference(e.path(), "--mla-form mha");
            expect_matches_reference(e.path(), "--chunk-size 64 --mla-form absorbed");
            ++n;
        }
    }
    EXPECT_GE(n, 5);
}

TEST(Cli, BadInputsGiveOneLineAndExitCode2) {
    const std::string model = std::string(PENSTOCK_FIXTURES_DIR) + "/deepseek_v3_tiny";
    const fs::path other = temp_dir() / "llama_model";
    fs::create_directories(other);
    std::ofstream(other / "config.json") << R"({"model_type": "llama", "hidden_size": 64})";
    const std::vector<std::string> cases = {
        "forward --model " + model,                                               // missing --input-ids
        "forward --model " + model + " --input-ids 1,2 --no-such-flag",           // unknown flag
        "forward --model /nonexistent/dir --input-ids 1,2",                       // missing model dir
        "forward --model " + model + " --input-ids 1,x",                          // not an integer
        "forward --model " + model + " --input-ids 1,,2",                         // empty entry
        "forward --model " + model + " --input-ids 1,999999",                     // outside the vocabulary
        "forward --model " + model + " --input-ids 1 --chunk-size -3",            // negative chunk
        "forward --model " + model + " --input-ids 1 --mla-form sparse",          // unknown form
        "forward --model " + other.string() + " --input-ids 1",                   // unsupported model_type
        "forward --model " + model + " --input-ids 1 --out /nonexistent/dir/x.safetensors",  // unwritable output
        "frobnicate",                                                             // unknown subcommand
    };
    for (const std::string& args : cases) {
        const RunResult r = run(args);
        EXPECT_EQ(r.exit_code, 2) << args << "\nstderr: " << r.err;
        EXPECT_EQ(count_lines(r.err), 1) << args << "\nstderr: " << r.err;
        EXPECT_NE(r.err.find("error"), std::string::npos) << args << "\nstderr: " << r.err;
    }
}

// `penstock plan` through the binary: the table on stdout and exit 0; bad inputs give one line and exit code 2.
TEST(Cli, PlanPrintsLayoutsAndRefusesBadInputs) {
    const std::string config = std::string(PENSTOCK_FIXTURES_DIR) + "/../configs/deepseek-v3.json";
    const RunResult ok = run("plan --model " + config + " --cluster rtx6000d-4x8 --fp8-weights --concurrency 16");
    EXPECT_EQ(ok.exit_code, 0) << ok.err;
    EXPECT_NE(ok.out.find("| pp32 tp1 ep1 cp1 | yes |"), std::string::npos) << ok.out;
    EXPECT_NE(ok.out.find("(35% less)"), std::string::npos) << ok.out;
    const std::string k3 = std::string(PENSTOCK_FIXTURES_DIR) + "/../configs/kimi-k3.json";
    const RunResult cut = run("plan --model " + k3 + " --num-layers 3 --gpus 2 --layout 2,1 --layout 1,2");
    EXPECT_EQ(cut.exit_code, 0) << cut.err;
    EXPECT_NE(cut.out.find("kimi_linear (3 layers"), std::string::npos) << cut.out;
    EXPECT_NE(cut.out.find("| pp2 tp1 ep1 cp1 |"), std::string::npos) << cut.out;
    EXPECT_NE(cut.out.find("| pp1 tp2 ep2 cp1 |"), std::string::npos) << cut.out;
    const std::vector<std::string> cases = {
        "plan --model " + config + " --cluster no-such-profile",
        "plan --model " + config + " --cluster /nonexistent/cluster.toml",
        "plan --model /nonexistent/config.json",
        "plan --model " + config + " --layout 2,x",
        "plan --model " + config + " --layout 4,4",  // 16 GPUs on an 8-GPU cluster
        "plan --model " + config + " --gpus 64",
        "plan --model " + config + " --ep two",
        "plan --model " + config + " --num-layers 62",
    };
    for (const std::string& args : cases) {
        const RunResult r = run(args);
        EXPECT_EQ(r.exit_code, 2) << args << "\nstderr: " << r.err;
        EXPECT_EQ(count_lines(r.err), 1) << args << "\nstderr: " << r.err;
    }
}

// `penstock serve --backend / --dtype` (and --dsa-fp8-accumulate without --dsa-fp8-indexer): refused combinations give
// one line and exit code 2 before anything loads
// (the GPU path itself: tools/gpu_serve_check.py on a GPU machine).
TEST(Cli, ServeBackendAndDtypeRefusals) {
    const std::string model = std::string(PENSTOCK_FIXTURES_DIR) + "/deepseek_v3_tiny";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"serve --model " + model + " --backend tpu", "--backend must be cpu or cuda"},
        {"serve --model " + model + " --dtype float16", "--dtype must be float32 or bfloat16"},
        {"serve --model " + model + " --dtype bfloat16", "--dtype bfloat16 needs --backend cuda"},
        {"serve --model " + model + " --backend cuda --device-links shm", "--device-links must be nccl or host"},
        {"serve --model " + model + " --backend cuda --ranks-per-gpu 0", "--ranks-per-gpu must be >= 1"},
        {"serve --model " + model + " --backend cuda --pp 2 --ranks-per-gpu 2", "needs --device-links host"},
        {"serve --model " + model + " --dsa-fp8-accumulate", "--dsa-fp8-accumulate needs --dsa-fp8-indexer"},
    };
    for (const auto& [args, message] : cases) {
        const RunResult r = run(args);
        EXPECT_EQ(r.exit_code, 2) << args << "\nstderr: " << r.err;
        EXPECT_EQ(count_lines(r.err), 1) << args << "\nstderr: " << r.err;
        EXPECT_NE(r.err.find(message), std::string::npos) << args << "\nstderr: " << r.err;
    }
}

}  // namespace
}  // namespace penstock
