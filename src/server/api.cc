// API shapes: request parsing with field-by-field validation, and response / SSE rendering.
#include "server/api.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace penstock::server {

using json = nlohmann::json;

std::string error_body(const ApiError& e) {
    json err = {{"message", e.message}, {"type", e.type}, {"code", e.http_status}};
    err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
    return json{{"error", err}, {"object", "error"}, {"message", e.message}}.dump();
}

int64_t json_depth(std::string_view body, int64_t limit) {
    int64_t depth = 0, max_depth = 0;
    bool in_string = false, escaped = false;
    for (char c : body) {
        if (in_string) {
            if (escaped) {
                escaped = false;
            } else if (c == '\\') {
                escaped = true;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            max_depth = std::max(max_depth, ++depth);
            if (max_depth > limit) return max_depth;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return max_depth;
}

std::string render_chat(const std::vector<ChatMessage>& messages, const std::string& bos, const std::string& eos) {
    std::string out = bos;
    for (const auto& [role, content] : messages) {
        if (role == "user") {
            out += "<｜User｜>" + content;
        } else if (role == "assistant") {
            out += "<｜Assistant｜>" + content + eos;
        } else {
            out += content;
        }
    }
    return out + "<｜Assistant｜>";
}

namespace {

// Field access that records the first error (with its field name) instead of throwing.
class Fields final {
public:
    Fields(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}
    bool failed() const { return !error.message.empty(); }
    const json* find(const char* name) const {
        auto it = obj_.find(name);
        return it == obj_.end() || it->is_null() ? nullptr : &*it;
    }
    void fail(const char* name, std::string message) {
        if (failed()) return;
        error.param = prefix_ + name;
        error.message = error.param + ": " + message;
    }
    void number(const char* name, float* out) {
        const json* v = find(name);
        if (v == nullptr) return;
        if (!v->is_number()) return fail(name, "must be a number");
        const double d = v->get<double>();
        if (!std::isfinite(d)) return fail(name, "must be finite");
        *out = static_cast<float>(d);
    }
    void integer(const char* name, int64_t lo, int64_t hi, int64_t* out) {
        const json* v = find(name);
        if (v == nullptr) return;
        if (v->is_number_float()) {
            const double d = v->get<double>();
            if (d != std::floor(d) || !std::isfinite(d)) return fail(name, "must be an integer");
            if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) return range(name, lo, hi);
            *out = static_cast<int64_t>(d);
            return;
        }
        if (v->is_number_unsigned()) {
            const uint64_t u = v->get<uint64_t>();
            if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) return range(name, lo, hi);
            *out = static_cast<int64_t>(u);
            return;
        }
        if (!v->is_number_integer()) return fail(name, "must be an integer");
        const int64_t i = v->get<int64_t>();
        if (i < lo || i > hi) return range(name, lo, hi);
        *out = i;
    }
    void boolean(const char* name, bool* out) {
        const json* v = find(name);
        if (v == nullptr) return;
        if (!v->is_boolean()) return fail(name, "must be true or false");
        *out = v->get<bool>();
    }
    void string(const char* name, std::string* out, size_t max_bytes) {
        const json* v = find(name);
        if (v == nullptr) return;
        if (!v->is_string()) return fail(name, "must be a string");
        if (v->get_ref<const std::string&>().size() > max_bytes) return fail(name, "is too long");
        *out = v->get<std::string>();
    }

    ApiError error;

private:
    void range(const char* name, int64_t lo, int64_t hi) {
        fail(name, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    const json& obj_;
    std::string prefix_;
};

void parse_stop(Fields* f, const ServerConfig& c, std::vector<std::string>* out) {
    const json* v = f->find("stop");
    if (v == nullptr) return;
    if (v->is_string()) {
        *out = {v->get<std::string>()};
    } else if (v->is_array()) {
        if (static_cast<int64_t>(v->size()) > c.max_stop_strings) {
            return f->fail("stop", "at most " + std::to_string(c.max_stop_strings) + " stop strings");
        }
        for (const json& s : *v) {
            if (!s.is_string()) return f->fail("stop", "must be a string or an array of strings");
            out->push_back(s.get<std::string>());
        }
    } else {
        return f->fail("stop", "must be a string or an array of strings");
    }
    for (const std::string& s : *out) {
        if (s.empty()) return f->fail("stop", "stop strings must not be empty");
        if (static_cast<int64_t>(s.size()) > c.max_stop_string_bytes) {
            return f->fail("stop",
                           "a stop string is longer than " + std::to_string(c.max_stop_string_bytes) + " bytes");
        }
    }
}

void parse_token_list(Fields* f, const json& v, const char* name, int64_t max_len, int64_t vocab,
                      std::vector<int32_t>* out) {
    if (!v.is_array()) return f->fail(name, "must be an array of token ids");
    if (static_cast<int64_t>(v.size()) > max_len) {
        return f->fail(name, "has more than " + std::to_string(max_len) + " entries");
    }
    out->reserve(v.size());
    for (const json& t : v) {
        if (!t.is_number_integer() && !t.is_number_unsigned()) return f->fail(name, "must hold integer token ids");
        const int64_t id = t.is_number_unsigned()
                               ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), 1ULL << 40))
                               : t.get<int64_t>();
        if (id < 0 || id >= vocab) {
            return f->fail(name, "token id " + std::to_string(id) + " is outside [0, " + std::to_string(vocab) + ")");
        }
        out->push_back(static_cast<int32_t>(id));
    }
}

// Sampling fields shared by every route (names as SGLang's sampling_params / OpenAI's top level).
void parse_sampling(Fields* f, const ParseContext& ctx, int64_t max_new_limit, engine::GenerateParams* p, bool openai,
                    bool zero_tokens_ok = false) {
    const ServerConfig& c = *ctx.config;
    if (openai) {
        f->integer("max_tokens", zero_tokens_ok ? 0 : 1, max_new_limit, &p->max_new_tokens);
        f->integer("max_completion_tokens", 1, max_new_limit, &p->max_new_tokens);
    } else {
        f->integer("max_new_tokens", 1, max_new_limit, &p->max_new_tokens);
    }
    f->number("temperature", &p->sampling.temperature);
    f->number("top_p", &p->sampling.top_p);
    f->number("min_p", &p->sampling.min_p);
    for (auto [name, v] : {std::pair{"presence_penalty", &p->sampling.presence_penalty},
                           {"frequency_penalty", &p->sampling.frequency_penalty}}) {
        f->number(name, v);
        if (*v < -2.0f || *v > 2.0f) f->fail(name, "must be in [-2, 2]");
    }
    f->integer(openai ? "min_tokens" : "min_new_tokens", 0, max_new_limit, &p->min_new_tokens);
    if (const json* b = f->find("logit_bias")) {
        // {"token id": bias in [-100, 100]} (OpenAI; SGLang's sampling_params the same).
        if (!b->is_object()) return f->fail("logit_bias", "must be an object of token id -> bias");
        if (static_cast<int64_t>(b->size()) > std::min<int64_t>(ctx.vocab_size, 4096)) {
            return f->fail("logit_bias", "too many entries");
        }
        for (const auto& [key, v] : b->items()) {
            int64_t id = -1;
            const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
            if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id >= ctx.vocab_size) {
                return f->fail("logit_bias", "'" + key.substr(0, 32) + "' is not a token id");
            }
            if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < -100 || v.get<double>() > 100) {
                return f->fail("logit_bias", "biases are numbers in [-100, 100]");
            }
            p->sampling.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
        }
    }
    f->number("repetition_penalty", &p->sampling.repetition_penalty);
    if (p->sampling.repetition_penalty <= 0.0f || p->sampling.repetition_penalty > 10.0f) {
        f->fail("repetition_penalty", "must be in (0, 10]");
    }
    int64_t top_k = p->sampling.top_k;
    f->integer("top_k", -1, std::numeric_limits<int32_t>::max(), &top_k);
    p->sampling.top_k = static_cast<int32_t>(top_k);
    const char* seed_name = openai ? "seed" : (f->find("sampling_seed") != nullptr ? "sampling_seed" : "seed");
    if (f->find(seed_name) != nullptr) {
        int64_t seed = 0;
        f->integer(seed_name, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed);
        p->sampling.seed = static_cast<uint64_t>(seed);
    }
    parse_stop(f, c, &p->stop);
    if (const json* ids = f->find("stop_token_ids")) {
        parse_token_list(f, *ids, "stop_token_ids", c.max_stop_token_ids, ctx.vocab_size, &p->stop_token_ids);
    }
    f->boolean("ignore_eos", &p->ignore_eos);
    f->boolean("skip_special_tokens", &p->skip_special_tokens);
    if (f->failed()) return;
    if (Status s = engine::validate(p->sampling); !s.ok()) f->fail("", s.message());
    if (!p->stop.empty() && ctx.tokenizer == nullptr) {
        f->fail("stop", "stop strings need a tokenizer (this server runs with --skip-tokenizer-init)");
    }
}

// Sampling fields accepted only at their neutral value, on every route (OpenAI top level, SGLang sampling_params): a
// request that asks for a penalty, a minimum length, a logit bias or constrained decoding is refused, never served
// as if it had not asked.
void refuse_unsupported_sampling(Fields* f) {
    for (const char* name : {"regex", "json_schema", "ebnf", "structural_tag"}) {
        if (f->find(name) != nullptr) f->fail(name, "is not supported (no constrained decoding)");
    }
}

// OpenAI fields we accept only at their default value.
void refuse_unsupported(Fields* f) {
    for (const char* name : {"functions", "function_call"}) {
        if (f->find(name) != nullptr) f->fail(name, "is not supported");
    }
    if (const json* r = f->find("response_format"); r != nullptr) {
        const json* type = r->is_object() && r->contains("type") ? &(*r)["type"] : nullptr;
        if (type == nullptr || !type->is_string() || *type != "text") {
            f->fail("response_format", "only {\"type\": \"text\"} is supported (no structured output)");
        }
    }
    if (const json* x = f->find("suffix");
        x != nullptr && !(x->is_string() && x->get_ref<const std::string&>().empty())) {
        f->fail("suffix", "is not supported");
    }
    refuse_unsupported_sampling(f);
}

// Log-probability fields. SGLang /generate: return_logprob, top_logprobs_num, return_text_in_logprobs, and
// logprob_start_len only at -1 (no prompt positions). OpenAI completions: logprobs = the number of alternatives
// (null: none returned). Chat: logprobs true/false, top_logprobs alternatives (needs logprobs true).
void parse_logprobs(Fields* f, ApiKind kind, engine::GenerateParams* p, bool* text_in_logprobs, const bool* echo) {
    int64_t top = 0;
    const int64_t max_top = runtime::kMaxTopLogprobs;
    switch (kind) {
        case ApiKind::kGenerate: {
            f->boolean("return_logprob", &p->return_logprob);
            f->integer("top_logprobs_num", 0, max_top, &top);
            f->boolean("return_text_in_logprobs", text_in_logprobs);
            int64_t start = -1;
            f->integer("logprob_start_len", -1, std::numeric_limits<int64_t>::max(), &start);
            if (p->return_logprob) p->logprob_start_len = start;  // the engine checks it against the prompt
            if (f->find("token_ids_logprob") != nullptr) f->fail("token_ids_logprob", "is not supported");
            break;
        }
        case ApiKind::kCompletions:
            if (const json* lp = f->find("logprobs"); lp != nullptr && !(lp->is_boolean() && !lp->get<bool>())) {
                // An integer (alternatives per token); `true` is taken as 0 and `false` as off (lenient clients).
                if (!lp->is_boolean()) f->integer("logprobs", 0, max_top, &top);
                p->return_logprob = true;
                if (*echo) p->logprob_start_len = 0;  // the echoed prompt's tokens are scored too
            }
            break;
        case ApiKind::kChat:
            f->boolean("logprobs", &p->return_logprob);
            f->integer("top_logprobs", 0, max_top, &top);
            if (top > 0 && !p->return_logprob) f->fail("top_logprobs", "needs logprobs: true");
            break;
    }
    p->top_logprobs = static_cast<int32_t>(top);
}

bool encode_text(Fields* f, const ParseContext& ctx, const char* name, const std::string& text, bool special,
                 std::vector<int32_t>* out) {
    if (ctx.tokenizer == nullptr) {
        f->fail(name, "this server runs without a tokenizer (--skip-tokenizer-init): send token ids");
        return false;
    }
    Result<std::vector<int32_t>> ids = ctx.tokenizer->encode(text, special);
    if (!ids.ok()) {
        f->fail(name, ids.status().message());
        return false;
    }
    *out = std::move(ids).value();
    return true;
}

}  // namespace

Result<std::string> render_openai_chat(const ChatTemplate& t, const nlohmann::ordered_json& msgs,
                                       const RenderOptions& o) {
    // Templates disagree on a few shapes OpenAI clients send, so the messages are tried in up to four forms
    // (the first that renders wins; the error is the first form's):
    // - tool-call arguments as objects (transformers' convention, which Kimi / GLM / Qwen templates iterate or
    //   tojson), else as the JSON strings OpenAI sends (DeepSeek's template concatenates them);
    // - null content as is, else as "" (templates written for string content, `'...' + message['content']`);
    // - content-part lists as lists where the template loops over them, else joined into one string (as the
    //   builtin template joins them: no separator), since string-only templates fail on or print a list.
    nlohmann::ordered_json as_objects = msgs;
    if (!t.takes_content_parts()) {
        for (size_t k = 0; k < as_objects.size(); ++k) {
            if (auto c = as_objects[k].find("content"); c != as_objects[k].end() && c->is_array()) {
                std::string text;
                for (const auto& part : *c) {
                    if (part.is_object() && part.contains("text") && part["text"].is_string()) {
                        text += part["text"].get<std::string>();
                    }
                }
                *c = std::move(text);
            }
        }
    }
    bool parsed_args = false;
    for (auto& m : as_objects) {
        auto calls = m.find("tool_calls");
        if (calls == m.end() || !calls->is_array()) continue;
        for (auto& call : *calls) {
            auto* fn = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
            if (fn == nullptr || !fn->is_object() || !fn->contains("arguments") || !(*fn)["arguments"].is_string()) {
                continue;
            }
            auto args = nlohmann::ordered_json::parse((*fn)["arguments"].get<std::string>(), nullptr, false);
            if (args.is_discarded() || !args.is_object()) continue;
            (*fn)["arguments"] = std::move(args);
            parsed_args = true;
        }
    }
    const auto null_as_empty = [](nlohmann::ordered_json m) {
        bool changed = false;
        for (auto& one : m) {
            if (auto c = one.find("content"); c != one.end() && c->is_null()) {
                *c = "";
                changed = true;
            }
        }
        return changed ? std::optional(std::move(m)) : std::nullopt;
    };
    std::vector<nlohmann::ordered_json> forms = {as_objects};
    if (parsed_args) {  // the same, arguments as sent
        nlohmann::ordered_json as_sent = as_objects;
        for (size_t k = 0; k < as_sent.size(); ++k) {
            if (auto calls = msgs[k].find("tool_calls"); calls != msgs[k].end()) as_sent[k]["tool_calls"] = *calls;
        }
        forms.push_back(std::move(as_sent));
    }
    for (size_t i = 0, n = forms.size(); i < n; ++i) {
        if (auto e = null_as_empty(forms[i])) forms.push_back(std::move(*e));
    }
    Result<std::string> r = t.render(forms[0], o);
    for (size_t i = 1; i < forms.size() && !r.ok(); ++i) {
        Result<std::string> again = t.render(forms[i], o);
        if (again.ok()) r = std::move(again);
    }
    return r;
}

namespace {

// Chat messages (`msgs`, the request's own key order, which templates' tojson shows) to prompt ids: the chat template
// gets them as they are (tool_calls, tool_call_id, content-part lists included) plus the job's tools and the
// request's chat_template_kwargs; the builtin fallback gets role + flattened text content.
void parse_messages(Fields* f, const ParseContext& ctx, const nlohmann::ordered_json& msgs,
                    const nlohmann::ordered_json& tools, std::vector<int32_t>* out) {
    if (!msgs.is_array() || msgs.empty()) return f->fail("messages", "must be a non-empty array");
    if (static_cast<int64_t>(msgs.size()) > ctx.config->max_messages) {
        return f->fail("messages", "more than " + std::to_string(ctx.config->max_messages) + " messages");
    }
    std::vector<ChatMessage> flat;
    for (const nlohmann::ordered_json& m : msgs) {
        if (!m.is_object()) return f->fail("messages", "each message must be an object");
        auto role = m.find("role");
        auto content = m.find("content");
        if (role == m.end() || !role->is_string()) return f->fail("messages", "each message needs a string role");
        std::string text;
        if (content == m.end() || content->is_null()) {
            text = "";
        } else if (content->is_string()) {
            text = content->get<std::string>();
        } else if (content->is_array()) {
            for (const nlohmann::ordered_json& part : *content) {
                auto t = part.is_object() ? part.find("text") : part.end();
                if (!part.is_object() || part.value("type", "") != "text" || t == part.end() || !t->is_string()) {
                    return f->fail("messages", "only text content parts are supported");
                }
                text += t->get<std::string>();
            }
        } else {
            return f->fail("messages", "content must be a string or an array of text parts");
        }
        if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null() && !calls->is_array()) {
            return f->fail("messages", "tool_calls must be an array");
        }
        flat.push_back({.role = role->get<std::string>(), .content = std::move(text)});
    }
    RenderOptions opts;
    if (const json* kw = f->find("chat_template_kwargs"); kw != nullptr && !kw->is_null()) {
        if (!kw->is_object()) return f->fail("chat_template_kwargs", "must be an object");
        opts.kwargs = nlohmann::ordered_json::parse(kw->dump());
    }
    if (ctx.tokenizer == nullptr) {
        return f->fail("messages", "chat needs a tokenizer (this server runs with --skip-tokenizer-init)");
    }
    const engine::TokenizerConfig& tc = ctx.tokenizer->config();
    std::string prompt;
    if (ctx.chat_template != nullptr) {
        opts.bos_token = tc.bos_token;
        opts.eos_token = tc.eos_token;
        opts.tools = tools;
        Result<std::string> r = render_openai_chat(*ctx.chat_template, msgs, opts);
        if (!r.ok()) return f->fail("messages", r.status().message());
        prompt = std::move(r).value();
    } else {
        prompt = render_chat(flat, tc.bos_token, tc.eos_token);
    }
    encode_text(f, ctx, "messages", prompt, /*special=*/false, out);
}

// Chat's tools and tool_choice: function tools go to the chat template, and their calls are parsed out of the output
// in the model's format; tool_choice "required" or a named function would need constrained decoding (refused).
void parse_tools(Fields* f, const ParseContext& ctx, Job* job) {
    const json* tools = f->find("tools");
    const json* choice = f->find("tool_choice");
    if (tools != nullptr && !tools->is_null() && !tools->is_array()) return f->fail("tools", "must be an array");
    const bool any = tools != nullptr && tools->is_array() && !tools->empty();
    if (choice != nullptr && !choice->is_null()) {
        if (choice->is_object() || (choice->is_string() && *choice == "required")) {
            return f->fail("tool_choice", "only \"auto\" and \"none\" are supported (no constrained decoding)");
        }
        if (!choice->is_string() || (*choice != "auto" && *choice != "none")) {
            return f->fail("tool_choice", "must be \"auto\" or \"none\"");
        }
    }
    if (!any) return;
    if (ctx.tool_format == ToolCallFormat::kNone) {
        return f->fail("tools",
                       "are not supported by this server: the model's chat template writes no tool-call format "
                       "it knows (--tool-call-parser names one)");
    }
    if (static_cast<int64_t>(tools->size()) > ctx.config->max_tools) {
        return f->fail("tools", "more than " + std::to_string(ctx.config->max_tools) + " tools (--max-tools)");
    }
    for (const json& t : *tools) {
        const json* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
        if (!t.is_object() || t.value("type", "") != "function" || fn == nullptr || !fn->is_object()) {
            return f->fail("tools", "each tool must be {\"type\": \"function\", \"function\": {...}}");
        }
        const auto name = fn->find("name");
        if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
            return f->fail("tools", "each function needs a non-empty string name");
        }
        if (const auto params = fn->find("parameters"); params != fn->end() && !params->is_object()) {
            return f->fail("tools", "a function's parameters must be a JSON Schema object");
        }
        if (const auto d = fn->find("description"); d != fn->end() && !d->is_string() && !d->is_null()) {
            return f->fail("tools", "a function's description must be a string");
        }
    }
    if (choice != nullptr && choice->is_string() && *choice == "none") return;  // the model is not shown the tools
    job->tools = *tools;
    job->tool_format = ctx.tool_format;
}

// One prompt: a string or an array of token ids; its echo text is the string, or the ids decoded.
void parse_one_prompt(Fields* f, const ParseContext& ctx, const json& p, JobPrompt* out) {
    if (p.is_string()) {
        encode_text(f, ctx, "prompt", p.get<std::string>(), /*special=*/true, &out->ids);
        out->echo_text = p.get<std::string>();
    } else if (p.is_array()) {
        parse_token_list(f, p, "prompt", ctx.max_context_len, ctx.vocab_size, &out->ids);
        if (ctx.tokenizer != nullptr && !f->failed()) out->echo_text = ctx.tokenizer->decode(out->ids, false);
    } else {
        f->fail("prompt", "must be a string, an array of token ids, or an array of either");
    }
}

// OpenAI completions' prompt: one prompt, or an array of strings or of token-id arrays (a batch, one choice each).
void parse_prompts(Fields* f, const ParseContext& ctx, const json& p, std::vector<JobPrompt>* out) {
    const bool batch = p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array());
    if (!batch) {
        parse_one_prompt(f, ctx, p, &out->emplace_back());
        return;
    }
    if (static_cast<int64_t>(p.size()) > ctx.config->max_choices) {
        return f->fail("prompt", "more than " + std::to_string(ctx.config->max_choices) + " prompts (--max-choices)");
    }
    for (const json& one : p) {
        if (!one.is_string() && !one.is_array()) {
            return f->fail("prompt", "a batch holds strings or arrays of token ids, not a mix with numbers");
        }
        parse_one_prompt(f, ctx, one, &out->emplace_back());
        if (f->failed()) return;
        if (out->back().ids.empty()) return f->fail("prompt", "holds an empty prompt");
    }
}

}  // namespace

ParseResult parse_job(ApiKind kind, std::string_view body, const ParseContext& ctx) {
    const ServerConfig& c = *ctx.config;
    ParseResult res;
    if (json_depth(body, c.max_json_depth) > c.max_json_depth) {
        res.error.message = "JSON nesting deeper than " + std::to_string(c.max_json_depth);
        return res;
    }
    const json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        res.error.message = "the body is not valid JSON";
        return res;
    }
    if (!j.is_object()) {
        res.error.message = "the body must be a JSON object";
        return res;
    }
    Job job;
    job.kind = kind;
    job.return_text = ctx.tokenizer != nullptr;
    job.model = ctx.model_name;
    const int64_t max_new_limit = c.max_new_tokens_limit > 0 ? c.max_new_tokens_limit : ctx.max_context_len;
    Fields f(j, "");
    f.boolean("stream", &job.stream);
    engine::GenerateParams& p = job.request.params;
    // Disaggregation (every route, as a router adds them): the room, and on a prefill server its decode server.
    if (f.find("bootstrap_room") != nullptr) {
        int64_t room = 0;
        f.integer("bootstrap_room", 0, std::numeric_limits<int64_t>::max(), &room);
        job.request.bootstrap_room = static_cast<uint64_t>(room);
    }
    f.string("bootstrap_host", &job.bootstrap_host, 255);
    f.integer("bootstrap_port", 1, 65535, &job.bootstrap_port);
    if (kind == ApiKind::kGenerate) {
        p.max_new_tokens = std::min(c.default_max_new_tokens, max_new_limit);
        f.string("rid", &job.request.rid, 256);
        const json* text = f.find("text");
        const json* ids = f.find("input_ids");
        // One prompt, or a batch (SGLang: a list of texts, or a list of token-id lists): one output per prompt.
        const bool batch = (text != nullptr && text->is_array()) ||
                           (ids != nullptr && ids->is_array() && !ids->empty() && ids->front().is_array());
        const json* items = text != nullptr ? text : ids;
        if ((text == nullptr) == (ids == nullptr)) {
            f.fail("text", "give exactly one of text and input_ids");
        } else if (batch && (items->empty() || static_cast<int64_t>(items->size()) > c.max_choices)) {
            f.fail(text != nullptr ? "text" : "input_ids",
                   "a batch holds 1 to " + std::to_string(c.max_choices) + " prompts (--max-choices)");
        } else {
            for (size_t i = 0; i < (batch ? items->size() : 1) && !f.failed(); ++i) {
                const json& one = batch ? (*items)[i] : *items;
                std::vector<int32_t>& out = job.prompts.emplace_back().ids;
                if (ids != nullptr) {
                    parse_token_list(&f, one, "input_ids", ctx.max_context_len, ctx.vocab_size, &out);
                } else if (!one.is_string()) {
                    f.fail("text", "must be a string or a list of strings");
                } else {
                    encode_text(&f, ctx, "text", one.get<std::string>(), /*special=*/true, &out);
                }
                if (!f.failed() && out.empty()) f.fail(ids != nullptr ? "input_ids" : "text", "holds an empty prompt");
            }
            job.batch = batch;
        }
        if (!job.prompts.empty()) job.request.prompt = job.prompts.front().ids;
        parse_logprobs(&f, kind, &p, &job.text_in_logprobs, &job.echo);
        if (const json* sp = f.find("sampling_params")) {
            if (!sp->is_object()) {
                f.fail("sampling_params", "must be an object");
            } else if (!f.failed()) {
                Fields sf(*sp, "sampling_params.");
                parse_sampling(&sf, ctx, max_new_limit, &p, /*openai=*/false);
                sf.integer("n", 1, c.max_choices, &job.n);
                refuse_unsupported_sampling(&sf);
                if (sf.failed()) f.error = sf.error;
            }
        }
    } else {
        p.max_new_tokens = std::min<int64_t>(16, max_new_limit);
        if (const json* m = f.find("model"); m != nullptr && !m->is_string()) f.fail("model", "must be a string");
        if (kind == ApiKind::kCompletions) {
            const json* prompt = f.find("prompt");
            if (prompt == nullptr) {
                f.fail("prompt", "is required");
            } else {
                parse_prompts(&f, ctx, *prompt, &job.prompts);
            }
        } else {
            parse_tools(&f, ctx, &job);
            bool separate = true;  // SGLang's separate_reasoning
            f.boolean("separate_reasoning", &separate);
            if (separate) job.reasoning = ctx.reasoning;
            const json* msgs = f.find("messages");
            if (msgs == nullptr) {
                f.fail("messages", "is required");
            } else if (!f.failed()) {
                // The body again in its own key order, so templates' tojson prints messages and tools as sent.
                const auto ordered = nlohmann::ordered_json::parse(body.begin(), body.end(), nullptr, false);
                const nlohmann::ordered_json tools =
                    job.tools.is_null() || !ordered.contains("tools") ? nlohmann::ordered_json() : ordered["tools"];
                parse_messages(&f, ctx, ordered["messages"], tools, &job.prompts.emplace_back().ids);
            }
        }
        if (!job.prompts.empty()) job.request.prompt = job.prompts.front().ids;
        // n choices per prompt (each its own engine request); best_of only as n (nothing is ranked).
        f.integer("n", 1, c.max_choices, &job.n);
        int64_t best_of = job.n;
        f.integer("best_of", 1, c.max_choices, &best_of);
        if (best_of != job.n) f.fail("best_of", "only best_of = n is supported (choices are not ranked)");
        if (kind == ApiKind::kCompletions) {
            f.boolean("echo", &job.echo);
        } else if (const json* e = f.find("echo"); e != nullptr && !(e->is_boolean() && !e->get<bool>())) {
            f.fail("echo", "is not supported on chat completions");
        }
        // echo with max_tokens 0 scores the prompt alone: the engine still computes one token, which is not returned.
        if (!f.failed()) parse_sampling(&f, ctx, max_new_limit, &p, /*openai=*/true, /*zero_tokens_ok=*/job.echo);
        // Tool markup may be spelled with special tokens (DeepSeek's, Kimi's): kept in the text unless asked.
        if (job.tool_format != ToolCallFormat::kNone && f.find("skip_special_tokens") == nullptr) {
            p.skip_special_tokens = false;
        }
        if (!f.failed() && p.max_new_tokens == 0) {
            job.score_only = true;
            p.max_new_tokens = 1;
        }
        if (!f.failed()) refuse_unsupported(&f);
        if (!f.failed()) parse_logprobs(&f, kind, &p, &job.text_in_logprobs, &job.echo);
        if (const json* so = f.find("stream_options"); so != nullptr && so->is_object()) {
            job.include_usage = so->value("include_usage", false);
        }
    }
    if (!f.failed() && job.request.prompt.empty()) f.fail(kind == ApiKind::kChat ? "messages" : "prompt", "is empty");
    if (!f.failed() && job.n_choices() > c.max_choices) {
        f.fail("n", std::to_string(job.prompts.size()) + " prompts x n = " + std::to_string(job.n_choices()) +
                        " choices, more than " + std::to_string(c.max_choices) + " (--max-choices)");
    }
    if (!f.failed() && (job.n_choices() > 1 || job.batch) && job.request.bootstrap_room) {
        f.fail("bootstrap_room", "one room holds one request: n and prompt batches are not disaggregated");
    }
    if (f.failed()) {
        res.error = f.error;
        return res;
    }
    res.job = std::move(job);
    return res;
}

engine::GenerateRequest Job::choice_request(int64_t i) const {
    engine::GenerateRequest r = request;
    if (!prompts.empty()) r.prompt = prompts[static_cast<size_t>(i / n)].ids;
    if (i > 0 && r.params.sampling.seed) *r.params.sampling.seed += static_cast<uint64_t>(i);
    if (i > 0 && !r.rid.empty()) r.rid += "-" + std::to_string(i);
    return r;
}

namespace {
const std::string kNoEcho;
}  // namespace

ResponseWriter::ResponseWriter(const Job& job, std::string id, int64_t created, int64_t index)
    : job_(job),
      id_(std::move(id)),
      created_(created),
      index_(index),
      echo_text_(job.echo && !job.prompts.empty() ? job.prompts[static_cast<size_t>(index / job.n)].echo_text
                                                  : kNoEcho) {}

void ResponseWriter::add(const engine::RequestOutput& ev) {
    if (!ev.prompt_logprobs.empty()) prompt_logprobs_ = ev.prompt_logprobs;
    if (!job_.score_only) {
        ids_.insert(ids_.end(), ev.token_ids.begin(), ev.token_ids.end());
        text_ += ev.text;
        logprobs_.insert(logprobs_.end(), ev.logprobs.begin(), ev.logprobs.end());
    }
    last_ = ev;
}

json ResponseWriter::tool_calls_json(const std::vector<ToolCall>& calls) const {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        // OpenAI's ids are opaque and unique per call: the response id, the choice and the call's position.
        std::string id = calls[i].id;
        if (id.empty()) id = "call_" + id_ + "_" + std::to_string(index_) + "_" + std::to_string(i);
        out.push_back({{"index", i},
                       {"id", std::move(id)},
                       {"type", "function"},
                       {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
    }
    return out;
}

std::string ResponseWriter::finish_reason_openai() const {
    if (!last_.finished) return "";
    if (job_.score_only && last_.error.ok()) return "length";
    if (last_.finish_reason == "length" || last_.finish_reason == "stop") return last_.finish_reason;
    return "abort";
}

namespace {

json sglang_meta(const std::string& id, const engine::RequestOutput& last, int64_t n_out) {
    json meta = {{"id", id},
                 {"prompt_tokens", last.prompt_tokens},
                 {"completion_tokens", n_out},
                 {"cached_tokens", 0},
                 {"ttft", last.ttft_s},
                 {"e2e_latency", last.e2e_s}};
    if (!last.finished) {
        meta["finish_reason"] = nullptr;
    } else if (last.finish_reason == "length") {
        meta["finish_reason"] = {{"type", "length"}, {"length", n_out}};
    } else if (last.finish_reason == "stop") {
        json matched = nullptr;
        if (!last.matched_stop.empty()) matched = last.matched_stop;
        if (last.matched_stop_token) matched = *last.matched_stop_token;
        meta["finish_reason"] = {{"type", "stop"}, {"matched", matched}};
    } else {
        meta["finish_reason"] = {{"type", last.finish_reason}, {"message", last.error.message()}};
    }
    return meta;
}

json usage(const engine::RequestOutput& last, int64_t n_out) {
    return {{"prompt_tokens", last.prompt_tokens},
            {"completion_tokens", n_out},
            {"total_tokens", last.prompt_tokens + n_out}};
}

std::string frame(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

// OpenAI's value for a log-probability the server does not know (a decode end's first token): its documented
// "very unlikely" sentinel, since clients parse the field as a number.
constexpr double kUnknownLogprob = -9999.0;

double openai_logprob(const std::optional<float>& lp) { return lp ? static_cast<double>(*lp) : kUnknownLogprob; }

// SGLang: [logprob (null when unknown), token id, text (null unless asked)].
json sglang_entry(const engine::TokenLogprob& t, bool with_text) {
    return json::array(
        {t.logprob ? json(*t.logprob) : json(nullptr), t.token, with_text ? json(t.text) : json(nullptr)});
}

json bytes_of(const std::string& text) {
    json b = json::array();
    for (unsigned char c : text) b.push_back(static_cast<int>(c));
    return b;
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": null}.
json chat_logprobs(std::span<const engine::OutputLogprob> lps) {
    json content = json::array();
    for (const engine::OutputLogprob& o : lps) {
        json top = json::array();
        for (const engine::TokenLogprob& t : o.top) {
            top.push_back({{"token", t.text}, {"logprob", openai_logprob(t.logprob)}, {"bytes", bytes_of(t.text)}});
        }
        content.push_back({{"token", o.chosen.text},
                           {"logprob", openai_logprob(o.chosen.logprob)},
                           {"bytes", bytes_of(o.chosen.text)},
                           {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
}

// Completions: {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset}; offsets count bytes of the
// tokens' own texts from `offset` on.
json completion_logprobs(std::span<const engine::OutputLogprob> lps, int64_t offset) {
    json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
    for (const engine::OutputLogprob& o : lps) {
        tokens.push_back(o.chosen.text);
        values.push_back(o.chosen.logprob ? json(*o.chosen.logprob) : json(nullptr));
        json top = json::object();
        for (const engine::TokenLogprob& t : o.top) {
            if (!top.contains(t.text)) top[t.text] = openai_logprob(t.logprob);
        }
        tops.push_back(o.chosen.logprob ? std::move(top) : json(nullptr));  // the prompt's first token: nothing
        offsets.push_back(offset);
        offset += static_cast<int64_t>(o.chosen.text.size());
    }
    return {{"tokens", std::move(tokens)},
            {"token_logprobs", std::move(values)},
            {"top_logprobs", std::move(tops)},
            {"text_offset", std::move(offsets)}};
}

int64_t text_bytes(std::span<const engine::OutputLogprob> lps) {
    int64_t n = 0;
    for (const engine::OutputLogprob& o : lps) n += static_cast<int64_t>(o.chosen.text.size());
    return n;
}

// meta_info's output_token_logprobs (and output_top_logprobs with top_logprobs_num > 0) for `lps`.
void add_sglang_logprobs(json* meta, const Job& job, std::span<const engine::OutputLogprob> lps,
                         std::span<const engine::OutputLogprob> prompt) {
    const engine::GenerateParams& p = job.request.params;
    if (!p.return_logprob) return;
    json chosen = json::array(), top = json::array();
    for (const engine::OutputLogprob& o : lps) {
        chosen.push_back(sglang_entry(o.chosen, job.text_in_logprobs));
        json alt = json::array();
        for (const engine::TokenLogprob& t : o.top) alt.push_back(sglang_entry(t, job.text_in_logprobs));
        top.push_back(std::move(alt));
    }
    (*meta)["output_token_logprobs"] = std::move(chosen);
    if (p.top_logprobs > 0) (*meta)["output_top_logprobs"] = std::move(top);
    if (p.logprob_start_len < 0) return;
    json in = json::array(), in_top = json::array();
    for (const engine::OutputLogprob& o : prompt) {
        in.push_back(sglang_entry(o.chosen, job.text_in_logprobs));
        json alt = json::array();
        for (const engine::TokenLogprob& t : o.top) alt.push_back(sglang_entry(t, job.text_in_logprobs));
        in_top.push_back(o.chosen.logprob ? std::move(alt) : json(nullptr));
    }
    (*meta)["input_token_logprobs"] = std::move(in);
    if (p.top_logprobs > 0) (*meta)["input_top_logprobs"] = std::move(in_top);
}

}  // namespace

std::vector<engine::OutputLogprob> ResponseWriter::echoed(const std::vector<engine::OutputLogprob>& lps) const {
    if (!job_.echo) return lps;
    std::vector<engine::OutputLogprob> all = prompt_logprobs_;
    all.insert(all.end(), lps.begin(), lps.end());
    return all;
}

std::string ResponseWriter::final_body() const {
    const auto n_out = static_cast<int64_t>(ids_.size());
    json j;
    switch (job_.kind) {
        case ApiKind::kGenerate:
            j = {{"output_ids", ids_}, {"meta_info", sglang_meta(id_, last_, n_out)}};
            add_sglang_logprobs(&j["meta_info"], job_, logprobs_, prompt_logprobs_);
            if (job_.return_text) j["text"] = text_;
            break;
        case ApiKind::kCompletions:
            j = {{"id", id_},
                 {"object", "text_completion"},
                 {"created", created_},
                 {"model", job_.model},
                 {"choices",
                  {{{"index", index_},
                    {"text", (job_.echo ? echo_text_ : std::string()) + text_},
                    {"logprobs", logprobs_on() ? completion_logprobs(echoed(logprobs_), 0) : json(nullptr)},
                    {"finish_reason", finish_reason_openai()}}}},
                 {"usage", usage(last_, n_out)}};
            break;
        case ApiKind::kChat: {
            json message = {{"role", "assistant"}, {"content", text_}};
            std::string finish = finish_reason_openai();
            // The reasoning first (its text is never a tool call), then tool calls in what follows it.
            std::string content = text_;
            if (job_.reasoning.on()) {
                ReasoningParse r = parse_reasoning(job_.reasoning, text_);
                message["reasoning_content"] = r.reasoning.empty() ? json(nullptr) : json(r.reasoning);
                message["content"] = content = std::move(r.content);
            }
            if (job_.tool_format != ToolCallFormat::kNone) {
                ToolCallParse parsed = parse_tool_calls(job_.tool_format, content, &job_.tools);
                if (!parsed.calls.empty()) {
                    message["content"] = parsed.content.empty() ? json(nullptr) : json(parsed.content);
                    message["tool_calls"] = tool_calls_json(parsed.calls);
                    if (finish == "stop") finish = "tool_calls";
                }
            }
            j = {{"id", id_},
                 {"object", "chat.completion"},
                 {"created", created_},
                 {"model", job_.model},
                 {"choices",
                  {{{"index", index_},
                    {"message", std::move(message)},
                    {"logprobs", logprobs_on() ? chat_logprobs(logprobs_) : json(nullptr)},
                    {"finish_reason", finish}}}},
                 {"usage", usage(last_, n_out)}};
            break;
        }
    }
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ResponseWriter::sse_frames(const engine::RequestOutput& ev) {
    const auto n_out = static_cast<int64_t>(ids_.size());
    std::string out;
    const json finish = last_.finished ? json(finish_reason_openai()) : json(nullptr);
    switch (job_.kind) {
        case ApiKind::kGenerate: {
            // Cumulative, as the output_ids and the text of SGLang's frames.
            json j = {{"output_ids", ids_}, {"meta_info", sglang_meta(id_, last_, n_out)}};
            add_sglang_logprobs(&j["meta_info"], job_, logprobs_, prompt_logprobs_);
            if (job_.return_text) j["text"] = text_;
            if (job_.multi()) j["index"] = index_;  // SGLang: which output of a list input this frame is
            out += frame(j);
            break;
        }
        case ApiKind::kCompletions: {
            // The first frame leads with the echoed prompt (text and scored tokens); score_only drops the token.
            std::string text = job_.score_only ? std::string() : ev.text;
            std::vector<engine::OutputLogprob> lps =
                job_.score_only ? std::vector<engine::OutputLogprob>{} : ev.logprobs;
            if (job_.echo && !echo_sent_) {
                text = echo_text_ + text;
                lps = echoed(lps);
                echo_sent_ = true;
            }
            json j = {{"id", id_},
                      {"object", "text_completion"},
                      {"created", created_},
                      {"model", job_.model},
                      {"choices",
                       {{{"index", index_},
                         {"text", text},
                         {"logprobs", logprobs_on() && !lps.empty() ? completion_logprobs(lps, streamed_text_bytes_)
                                                                    : json(nullptr)},
                         {"finish_reason", finish}}}}};
            streamed_text_bytes_ += text_bytes(lps);
            out += frame(j);
            break;
        }
        case ApiKind::kChat: {
            const auto chunk = [&](json delta, json fin, json logprobs) {
                return json{{"id", id_},
                            {"object", "chat.completion.chunk"},
                            {"created", created_},
                            {"model", job_.model},
                            {"choices",
                             {{{"index", index_},
                               {"delta", delta},
                               {"logprobs", std::move(logprobs)},
                               {"finish_reason", fin}}}}};
            };
            if (!sent_role_) {
                out += frame(chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
                sent_role_ = true;
            }
            const json lps = logprobs_on() && !ev.logprobs.empty() ? chat_logprobs(ev.logprobs) : json(nullptr);
            if (job_.tool_format == ToolCallFormat::kNone && !job_.reasoning.on()) {
                if (!ev.text.empty() || !ev.token_ids.empty())
                    out += frame(chunk({{"content", ev.text}}, nullptr, lps));
                if (ev.finished) out += frame(chunk(json::object(), finish, nullptr));
                break;
            }
            // Reasoning streams as it comes (a possible tag prefix waits); content goes out as soon as it cannot be
            // tool markup; tool calls come whole at the end. The event's logprobs ride on its first chunk.
            ReasoningParse parts{.reasoning = {}, .content = ev.text};
            if (job_.reasoning.on()) {
                if (!reasoning_stream_) reasoning_stream_.emplace(job_.reasoning);
                parts = reasoning_stream_->feed(ev.text);
                if (ev.finished) {
                    ReasoningParse end = reasoning_stream_->finish();
                    parts.reasoning += end.reasoning;
                    parts.content += end.content;
                }
            }
            std::vector<ToolCall> calls;
            if (job_.tool_format != ToolCallFormat::kNone) {
                if (!tool_stream_) tool_stream_.emplace(job_.tool_format);
                parts.content = tool_stream_->feed(parts.content);
                if (ev.finished) {
                    ToolCallParse end = tool_stream_->finish(&job_.tools);
                    parts.content += end.content;
                    calls = std::move(end.calls);
                }
            }
            json pending_lps = lps;
            if (!parts.reasoning.empty()) {
                out += frame(chunk({{"reasoning_content", parts.reasoning}}, nullptr, std::exchange(pending_lps, {})));
            }
            if (!parts.content.empty() || !pending_lps.is_null()) {
                out += frame(chunk({{"content", parts.content}}, nullptr, std::move(pending_lps)));
            }
            if (ev.finished) {
                json fin = finish;
                if (!calls.empty()) {
                    out += frame(chunk({{"tool_calls", tool_calls_json(calls)}}, nullptr, nullptr));
                    if (fin == "stop") fin = "tool_calls";
                }
                out += frame(chunk(json::object(), fin, nullptr));
            }
            break;
        }
    }
    if (job_.multi()) return out;  // the server ends the stream once every choice has (multi_choice_stream_end)
    if (ev.finished && job_.kind != ApiKind::kGenerate && job_.include_usage) {
        out += frame({{"id", id_},
                      {"object", job_.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion"},
                      {"created", created_},
                      {"model", job_.model},
                      {"choices", json::array()},
                      {"usage", usage(last_, n_out)}});
    }
    if (ev.finished) out += "data: [DONE]\n\n";
    return out;
}

namespace {

// Usage over choices: each prompt's tokens once (choices i * n .. i * n + n - 1 share prompt i), every choice's
// completion tokens.
json multi_usage(const std::vector<ResponseWriter>& writers, int64_t n) {
    int64_t prompt = 0, completion = 0;
    for (size_t i = 0; i < writers.size(); ++i) {
        if (static_cast<int64_t>(i) % n == 0) prompt += writers[i].last().prompt_tokens;
        completion += writers[i].n_out();
    }
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

}  // namespace

std::string multi_choice_body(const std::vector<ResponseWriter>& writers, const Job& job) {
    if (job.kind == ApiKind::kGenerate) {  // SGLang: a list of outputs, prompt by prompt, n each
        json all = json::array();
        for (const ResponseWriter& w : writers) all.push_back(json::parse(w.final_body()));
        return all.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    json body = json::parse(writers.front().final_body());
    json choices = json::array();
    for (const ResponseWriter& w : writers) choices.push_back(json::parse(w.final_body())["choices"][0]);
    body["choices"] = std::move(choices);
    body["usage"] = multi_usage(writers, job.n);
    return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string multi_choice_stream_end(const std::vector<ResponseWriter>& writers, const Job& job) {
    std::string out;
    if (job.include_usage && job.kind != ApiKind::kGenerate) {
        out += frame({{"id", writers.front().id()},
                      {"object", job.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion"},
                      {"created", writers.front().created()},
                      {"model", job.model},
                      {"choices", json::array()},
                      {"usage", multi_usage(writers, job.n)}});
    }
    return out + "data: [DONE]\n\n";
}

}  // namespace penstock::server
