// The penstock CLI: one binary, subcommands. `forward` runs a prompt through a model on the CPU reference path and
// writes the logits of every position. Every expected failure (bad arguments, missing files, unsupported model type,
// malformed checkpoint) prints one line "penstock: error: ..." and exits with code 2.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/logging.h"
#include "core/status.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "loader/safetensors_writer.h"
#include "models/model.h"
#include "runtime/model_runner.h"

#ifndef PENSTOCK_DEFAULT_MODEL_DIR
#define PENSTOCK_DEFAULT_MODEL_DIR "assets/tiny-deepseek-v3"
#endif

namespace penstock {
namespace {

constexpr int kExitError = 2;

struct ForwardArgs {
    std::string model = PENSTOCK_DEFAULT_MODEL_DIR;
    std::string input_ids;
    int64_t chunk_size = 0;
    std::string mla_form = "mha";
    std::string backend = "cpu";
    int64_t max_kv_chunk_capacity = 128 * 1024;
    int threads = 0;
    int64_t n_pages = 0;
    std::string out;
};

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
    std::vector<int32_t> ids;
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = text.find(',', pos);
        const std::string tok = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        if (tok.empty()) return invalid_argument("--input-ids: empty entry in '" + text + "'");
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(tok, &used);
        } catch (const std::exception&) {
            return invalid_argument("--input-ids: '" + tok + "' is not an integer");
        }
        if (used != tok.size() || v < 0 || v > INT32_MAX) {
            return invalid_argument("--input-ids: '" + tok + "' is not a token id");
        }
        ids.push_back(static_cast<int32_t>(v));
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return ids;
}

Status run_forward(const ForwardArgs& args) {
    if (args.backend != "cpu") {
        return unimplemented("--backend " + args.backend + ": only the cpu backend runs a forward in this build");
    }
    models::ModelOptions options;
    if (args.mla_form == "mha") {
        options.mla_form = models::MlaForm::kMha;
    } else if (args.mla_form == "absorbed") {
        options.mla_form = models::MlaForm::kAbsorbed;
    } else {
        return invalid_argument("--mla-form must be mha or absorbed, got '" + args.mla_form + "'");
    }
    if (args.chunk_size < 0) return invalid_argument("--chunk-size must be >= 0");
    if (args.max_kv_chunk_capacity <= 0) return invalid_argument("--max-kv-chunk-capacity must be > 0");
    options.max_kv_chunk_capacity = args.max_kv_chunk_capacity;
    PENSTOCK_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parse_ids(args.input_ids));

    const std::filesystem::path dir(args.model);
    PENSTOCK_ASSIGN_OR_RETURN(loader::ModelConfig config, loader::load_model_config(dir));
    if (!models::is_supported_model_type(config.model_type)) {
        return unimplemented("model_type '" + config.model_type + "' is not supported yet");
    }
    PENSTOCK_ASSIGN_OR_RETURN(loader::Checkpoint checkpoint, loader::Checkpoint::open(dir));
    const auto t0 = std::chrono::steady_clock::now();
    loader::LoadStats stats;
    PENSTOCK_ASSIGN_OR_RETURN(
        std::unique_ptr<models::Model> model,
        models::load_model(config, checkpoint, loader::LayerRange{0, config.num_hidden_layers}, options, &stats));
    const auto t1 = std::chrono::steady_clock::now();

    runtime::RunnerOptions ropts;
    ropts.n_threads = args.threads;
    ropts.n_pages = args.n_pages > 0 ? args.n_pages : kv_cache::pages_for_tokens(static_cast<int64_t>(ids.size()));
    runtime::ModelRunner runner(std::move(model), ropts);
    std::vector<std::vector<int32_t>> prompts{ids};
    PENSTOCK_ASSIGN_OR_RETURN(std::vector<Tensor> logits, runner.prefill_all_logits(prompts, args.chunk_size));
    const auto t2 = std::chrono::steady_clock::now();

    if (!args.out.empty()) {
        PENSTOCK_RETURN_IF_ERROR(loader::write_safetensors(args.out, {{"logits", logits[0].view()}}));
    }
    const Tensor& l = logits[0];
    const int64_t n = l.size(0);
    const int64_t vocab = l.size(1);
    const float* last = l.ptr<const float>() + (n - 1) * vocab;
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v) {
        if (last[v] > last[best]) best = v;
    }
    const double load_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    const double run_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    std::printf("model %s (%s, %lld layers), %lld tokens, chunk %lld, mla %s\n", args.model.c_str(),
                config.model_type.c_str(), static_cast<long long>(config.num_hidden_layers),
                static_cast<long long>(n), static_cast<long long>(args.chunk_size), args.mla_form.c_str());
    std::printf("loaded %lld tensors (%.1f MB read from %zu file(s)) in %.1f ms; forward %.1f ms (%.1f tok/s)\n",
                static_cast<long long>(stats.n_tensors), static_cast<double>(stats.bytes_read) / 1e6,
                stats.files_opened.size(), load_ms, run_ms, static_cast<double>(n) / (run_ms / 1e3));
    std::printf("last position: argmax %lld (logit %.4f)\n", static_cast<long long>(best), last[best]);
    if (!args.out.empty()) std::printf("wrote logits [%lld, %lld] f32 to %s\n", static_cast<long long>(n),
                                       static_cast<long long>(vocab), args.out.c_str());
    return ok_status();
}

int fail(const std::string& message) {
    std::fprintf(stderr, "penstock: error: %s\n", message.c_str());
    return kExitError;
}

}  // namespace
}  // namespace penstock

int main(int argc, char** argv) {
    using namespace penstock;
    set_log_level("warn");
    CLI::App app{"Penstock: a prefill-first engine for giant mixture-of-experts LLMs"};
    app.require_subcommand(1);
    std::string log_level = "warn";
    app.add_option("--log-level", log_level, "debug, info, warn, error or off");

    ForwardArgs fwd;
    CLI::App* forward = app.add_subcommand("forward", "run a prompt through a model and write every position's logits");
    forward->add_option("--model", fwd.model, "Hugging Face checkpoint directory (default: the bundled tiny model)");
    forward->add_option("--input-ids", fwd.input_ids, "comma-separated token ids, e.g. 1,2,3")->required();
    forward->add_option("--chunk-size", fwd.chunk_size, "run the prompt as chunks of N tokens through the KV cache (0: one chunk)");
    forward->add_option("--mla-form", fwd.mla_form, "MLA prefill form: mha or absorbed");
    forward->add_option("--backend", fwd.backend, "cpu or cuda");
    forward->add_option("--max-kv-chunk-capacity", fwd.max_kv_chunk_capacity,
                        "MHA form: most prefix tokens expanded at once, across the batch");
    forward->add_option("--threads", fwd.threads, "CPU threads (0: all cores)");
    forward->add_option("--kv-pages", fwd.n_pages, "KV pages of 64 tokens (0: just enough for the prompt)");
    forward->add_option("--out", fwd.out, "write logits [n_tokens, vocab] f32 to this .safetensors file");

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        return fail(e.what());
    }
    set_log_level(log_level);
    if (forward->parsed()) {
        const Status st = run_forward(fwd);
        if (!st.ok()) return fail(st.to_string());
    }
    return 0;
}
