// The stage plan's wire codec (format in pipeline.h). Decoding trusts nothing: every count is bounded, every field
// range-checked and the byte count must match exactly, else DataLoss.
#include <cmath>
#include <cstring>
#include <string>

#include "core/byte_io.h"
#include "parallel/pipeline.h"

namespace penstock::parallel {

namespace {

constexpr uint32_t kMaxTopkCols = 1u << 20;
constexpr uint32_t kMaxBankRows = 4096;
constexpr uint32_t kMaxSeqs = 1u << 20;
constexpr uint32_t kMaxCounters = 1u << 12;  // stages
constexpr uint32_t kMaxCommands = 1u << 16;
constexpr uint32_t kMaxCommandBytes = 1u << 26;
constexpr uint32_t kKnownFlags = 7;  // stop | eager bank | return logits

int64_t to_us(double ms) { return static_cast<int64_t>(std::llround(ms * 1000.0)); }

}  // namespace

namespace {

// A sampled sequence with a penalty carries its output so far; with a repetition penalty also its prompt's ids.
bool carries_history(const runtime::SeqSampling& s) {
    return s.sample && (s.presence_penalty != 0.0f || s.frequency_penalty != 0.0f || s.repetition_penalty != 1.0f);
}
bool carries_prompt(const runtime::SeqSampling& s) { return s.sample && s.repetition_penalty != 1.0f; }

}  // namespace

std::vector<uint8_t> encode_plan(const StagePlan& plan) {
    std::vector<uint8_t> out;
    put_le<uint32_t>(&out, (plan.stop ? 1u : 0u) | (plan.eager_bank ? 2u : 0u) | (plan.return_logits ? 4u : 0u));
    put_le<uint32_t>(&out, static_cast<uint32_t>(plan.batch.seqs.size()));
    put_le<uint32_t>(&out, plan.bank_total);
    put_le<uint32_t>(&out, plan.bank_inherited);
    put_le<uint32_t>(&out, plan.bank_valid);
    put_le<uint32_t>(&out, plan.topk_cols);
    put_le<uint32_t>(&out, static_cast<uint32_t>(plan.free_ids.size()));
    put_le<uint32_t>(&out, static_cast<uint32_t>(plan.counters.size()));
    put_le<uint32_t>(&out, static_cast<uint32_t>(plan.commands.size()));
    for (size_t i = 0; i < plan.batch.seqs.size(); ++i) {
        const models::SeqChunk& c = plan.batch.seqs[i];
        const runtime::SeqSampling s = i < plan.sampling.size() ? plan.sampling[i] : runtime::SeqSampling{};
        put_le<int64_t>(&out, c.request_id);
        put_le<int64_t>(&out, c.prefix_len);
        put_le<int64_t>(&out, c.prompt_len);
        put_le<uint32_t>(&out, static_cast<uint32_t>(c.token_ids.size()));
        put_le<uint8_t>(&out, static_cast<uint8_t>(c.logits));
        put_le<uint8_t>(&out, i < plan.release.size() ? plan.release[i] : 0);
        put_le<uint8_t>(&out, static_cast<uint8_t>((s.sample ? 1 : 0) | (s.prompt_logprobs ? 2 : 0)));
        put_le<uint8_t>(&out, static_cast<uint8_t>(s.sample || s.prompt_logprobs ? s.top_logprobs : 0));
        put_le<float>(&out, s.temperature);
        put_le<float>(&out, s.top_p);
        put_le<int32_t>(&out, s.top_k);
        put_le<float>(&out, s.min_p);
        put_le<uint64_t>(&out, s.seed);
        put_le<int64_t>(&out, s.token_index);
        put_le<int32_t>(&out, s.prompt_logprobs ? s.next_token : -1);
        put_le<float>(&out, s.sample ? s.presence_penalty : 0.0f);
        put_le<float>(&out, s.sample ? s.frequency_penalty : 0.0f);
        put_le<float>(&out, s.sample ? s.repetition_penalty : 1.0f);
        put_le<uint32_t>(&out, carries_history(s) ? static_cast<uint32_t>(s.history.size()) : 0u);
        put_le<uint32_t>(&out, carries_prompt(s) ? static_cast<uint32_t>(s.prompt_tokens.size()) : 0u);
        put_le<uint32_t>(&out, s.sample ? static_cast<uint32_t>(s.banned.size()) : 0u);
        put_le<uint32_t>(&out, s.sample ? static_cast<uint32_t>(s.logit_bias.size()) : 0u);
    }
    for (const models::SeqChunk& c : plan.batch.seqs) {
        for (int32_t t : c.token_ids) put_le<int32_t>(&out, t);
    }
    for (size_t i = 0; i < plan.batch.seqs.size() && i < plan.sampling.size(); ++i) {
        const runtime::SeqSampling& s = plan.sampling[i];
        if (carries_history(s)) {
            for (int32_t t : s.history) put_le<int32_t>(&out, t);
        }
        if (carries_prompt(s)) {
            for (int32_t t : s.prompt_tokens) put_le<int32_t>(&out, t);
        }
        if (s.sample) {
            for (int32_t t : s.banned) put_le<int32_t>(&out, t);
            for (const auto& [t, b] : s.logit_bias) {
                put_le<int32_t>(&out, t);
                put_le<float>(&out, b);
            }
        }
    }
    for (int64_t id : plan.free_ids) put_le<int64_t>(&out, id);
    for (const StageStats& st : plan.counters) {
        put_le<int64_t>(&out, st.steps);
        put_le<int64_t>(&out, to_us(st.busy_ms));
        put_le<int64_t>(&out, to_us(st.stall_ms));
        put_le<int64_t>(&out, st.bytes_sent);
        put_le<int64_t>(&out, st.bank_bytes_sent);
    }
    for (const StageCommand& c : plan.commands) {
        put_le<int64_t>(&out, c.request_id);
        put_le<uint64_t>(&out, c.room);
        put_le<int64_t>(&out, c.timeout_ms);
        put_bytes(&out, c.payload);
    }
    return out;
}

Result<StagePlan> decode_plan(std::span<const uint8_t> bytes) {
    ByteReader r(bytes);
    StagePlan plan;
    uint32_t flags = 0, n_seqs = 0, n_free = 0, n_counters = 0, n_commands = 0;
    if (!r.get(&flags) || !r.get(&n_seqs) || !r.get(&plan.bank_total) || !r.get(&plan.bank_inherited) ||
        !r.get(&plan.bank_valid) || !r.get(&plan.topk_cols) || !r.get(&n_free) || !r.get(&n_counters) ||
        !r.get(&n_commands)) {
        return data_loss("stage plan: truncated header");
    }
    if ((flags & ~kKnownFlags) != 0) return data_loss("stage plan: unknown flags " + std::to_string(flags));
    if (plan.topk_cols > kMaxTopkCols)
        return data_loss("stage plan: " + std::to_string(plan.topk_cols) + " top-k columns");
    if (n_seqs > kMaxSeqs) return data_loss("stage plan: " + std::to_string(n_seqs) + " sequences");
    if (n_free > kMaxSeqs) return data_loss("stage plan: " + std::to_string(n_free) + " requests to free");
    if (n_counters > kMaxCounters)
        return data_loss("stage plan: counters of " + std::to_string(n_counters) + " stages");
    if (n_commands > kMaxCommands) return data_loss("stage plan: " + std::to_string(n_commands) + " commands");
    if (plan.bank_total > kMaxBankRows || plan.bank_inherited > plan.bank_valid || plan.bank_valid > plan.bank_total) {
        return data_loss("stage plan: bank rows inherited " + std::to_string(plan.bank_inherited) + ", valid " +
                         std::to_string(plan.bank_valid) + ", total " + std::to_string(plan.bank_total));
    }
    plan.stop = flags & 1u;
    plan.eager_bank = flags & 2u;
    plan.return_logits = flags & 4u;
    std::vector<uint32_t> lens, history_lens, prompt_lens, banned_lens, bias_lens;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_seqs; ++i) {
        models::SeqChunk c;
        runtime::SeqSampling s;
        uint32_t n = 0;
        uint8_t mode = 0, release = 0, sample = 0, top = 0;
        uint32_t n_history = 0, n_prompt = 0, n_banned = 0, n_bias = 0;
        if (!r.get(&c.request_id) || !r.get(&c.prefix_len) || !r.get(&c.prompt_len) || !r.get(&n) || !r.get(&mode) ||
            !r.get(&release) || !r.get(&sample) || !r.get(&top) || !r.get(&s.temperature) || !r.get(&s.top_p) ||
            !r.get(&s.top_k) || !r.get(&s.min_p) || !r.get(&s.seed) || !r.get(&s.token_index) ||
            !r.get(&s.next_token) || !r.get(&s.presence_penalty) || !r.get(&s.frequency_penalty) ||
            !r.get(&s.repetition_penalty) || !r.get(&n_history) || !r.get(&n_prompt) || !r.get(&n_banned) ||
            !r.get(&n_bias)) {
            return data_loss("stage plan: truncated sequence " + std::to_string(i));
        }
        if (mode > static_cast<uint8_t>(models::LogitsMode::kAll) || release > 1 || sample > 3 ||
            (sample == 0 && top != 0) || ((sample & 2) == 0 && s.next_token != -1) || c.prefix_len < 0 ||
            c.prompt_len < 0 ||
            ((sample & 1) == 0 &&
             (s.presence_penalty != 0.0f || s.frequency_penalty != 0.0f || s.repetition_penalty != 1.0f)) ||
            n_history > (1u << 24) || n_prompt > (1u << 24) || n_banned > (1u << 16) ||
            ((sample & 1) == 0 && (n_banned != 0 || n_bias != 0)) || n_bias > (1u << 20)) {
            return data_loss("stage plan: invalid fields in sequence " + std::to_string(i));
        }
        c.logits = static_cast<models::LogitsMode>(mode);
        s.sample = (sample & 1) != 0;
        s.prompt_logprobs = (sample & 2) != 0;
        s.top_logprobs = top;
        if (s.prompt_logprobs && c.logits != models::LogitsMode::kAll) {
            return data_loss("stage plan: sequence " + std::to_string(i) +
                             " scores its prompt without a row per token");
        }
        if (s.sample && (c.logits == models::LogitsMode::kNone || n == 0)) {
            return data_loss("stage plan: sequence " + std::to_string(i) + " is sampled but produces no logits");
        }
        total += n + uint64_t{n_history} + uint64_t{n_prompt} + uint64_t{n_banned} + 2 * uint64_t{n_bias};
        lens.push_back(n);
        history_lens.push_back(n_history);
        prompt_lens.push_back(n_prompt);
        banned_lens.push_back(n_banned);
        bias_lens.push_back(n_bias);
        plan.batch.seqs.push_back(std::move(c));
        plan.release.push_back(release);
        plan.sampling.push_back(s);
    }
    const uint64_t counter_bytes = uint64_t{n_counters} * 5 * sizeof(int64_t);
    // Commands (variable length) come last: at least their fixed part must be there, and nothing after them.
    const uint64_t command_bytes = uint64_t{n_commands} * (3 * sizeof(int64_t) + sizeof(uint32_t));
    const uint64_t fixed = total * sizeof(int32_t) + uint64_t{n_free} * sizeof(int64_t) + counter_bytes;
    if (n_commands == 0 ? r.left() != fixed : r.left() < fixed + command_bytes) {
        return data_loss("stage plan: " + std::to_string(r.left()) + " bytes for " + std::to_string(total) +
                         " tokens, " + std::to_string(n_free) + " requests to free and " + std::to_string(n_counters) +
                         " stage counters");
    }
    for (uint32_t i = 0; i < n_seqs; ++i) {
        auto& ids = plan.batch.seqs[i].token_ids;
        ids.resize(lens[i]);
        for (uint32_t k = 0; k < lens[i]; ++k) r.get(&ids[k]);
    }
    for (uint32_t i = 0; i < n_seqs; ++i) {
        auto& history = plan.sampling[i].history;
        history.resize(history_lens[i]);
        for (uint32_t k = 0; k < history_lens[i]; ++k) r.get(&history[k]);
        auto& prompt = plan.sampling[i].prompt_tokens;
        prompt.resize(prompt_lens[i]);
        for (uint32_t k = 0; k < prompt_lens[i]; ++k) r.get(&prompt[k]);
        auto& banned = plan.sampling[i].banned;
        banned.resize(banned_lens[i]);
        for (uint32_t k = 0; k < banned_lens[i]; ++k) r.get(&banned[k]);
        auto& bias = plan.sampling[i].logit_bias;
        bias.resize(bias_lens[i]);
        for (uint32_t k = 0; k < bias_lens[i]; ++k) {
            r.get(&bias[k].first);
            r.get(&bias[k].second);
        }
        // Every parameter, the variable-length ones included (the byte count above bounded them).
        if (const Status v = runtime::validate(plan.sampling[i]); !v.ok()) {
            return data_loss("stage plan: sequence " + std::to_string(i) + ": " + v.message());
        }
    }
    plan.free_ids.resize(n_free);
    for (uint32_t k = 0; k < n_free; ++k) r.get(&plan.free_ids[k]);
    for (uint32_t k = 0; k < n_counters; ++k) {
        int64_t v[5] = {0, 0, 0, 0, 0};
        for (int64_t& x : v) r.get(&x);
        if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0 || v[4] < 0) {
            return data_loss("stage plan: negative counters of stage " + std::to_string(k + 1));
        }
        plan.counters.push_back(StageStats{.steps = v[0],
                                           .busy_ms = static_cast<double>(v[1]) / 1000.0,
                                           .stall_ms = static_cast<double>(v[2]) / 1000.0,
                                           .bytes_sent = v[3],
                                           .bank_bytes_sent = v[4]});
    }
    for (uint32_t k = 0; k < n_commands; ++k) {
        StageCommand c;
        if (!r.get(&c.request_id) || !r.get(&c.room) || !r.get(&c.timeout_ms) ||
            !r.bytes(&c.payload, kMaxCommandBytes) || c.timeout_ms < 0) {
            return data_loss("stage plan: command " + std::to_string(k) + " truncated or invalid");
        }
        plan.commands.push_back(std::move(c));
    }
    if (!r.done()) return data_loss("stage plan: " + std::to_string(r.left()) + " bytes after the commands");
    return plan;
}

}  // namespace penstock::parallel
