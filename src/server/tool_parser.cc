#include "server/tool_parser.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

#include "core/text.h"

namespace penstock::server {
namespace {

using ojson = nlohmann::ordered_json;

// DeepSeek's markers spell their bars and spaces with U+FF5C and U+2581, as its tokenizer's added tokens do.
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kKimiSectionBegin = "<|tool_calls_section_begin|>";
constexpr std::string_view kKimiSectionEnd = "<|tool_calls_section_end|>";
constexpr std::string_view kKimiCallBegin = "<|tool_call_begin|>";
constexpr std::string_view kKimiArgBegin = "<|tool_call_argument_begin|>";
constexpr std::string_view kKimiCallEnd = "<|tool_call_end|>";
constexpr std::string_view kToolCall = "<tool_call>";
constexpr std::string_view kToolCallEnd = "</tool_call>";
constexpr std::string_view kArgKey = "<arg_key>";
constexpr std::string_view kArgKeyEnd = "</arg_key>";
constexpr std::string_view kArgValue = "<arg_value>";
constexpr std::string_view kArgValueEnd = "</arg_value>";

constexpr std::array<std::string_view, 2> kDsOpen = {kDsCallsBegin, kDsCallBegin};
constexpr std::array<std::string_view, 2> kKimiOpen = {kKimiSectionBegin, kKimiCallBegin};
constexpr std::array<std::string_view, 1> kTagOpen = {kToolCall};

std::span<const std::string_view> opening_markers(ToolCallFormat f) {
    switch (f) {
        case ToolCallFormat::kDeepSeekV3:
        case ToolCallFormat::kDeepSeekV31:
            return kDsOpen;
        case ToolCallFormat::kKimiK2:
            return kKimiOpen;
        case ToolCallFormat::kGlm45:
        case ToolCallFormat::kHermes:
            return kTagOpen;
        case ToolCallFormat::kNone:
            break;
    }
    return {};
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
    return s;
}

// A cursor over the markup: every step either consumes what it expects or fails (the caller keeps the text).
struct Cursor {
    std::string_view text;
    size_t pos = 0;

    void skip_space() {
        while (pos < text.size() && is_ascii_space(text[pos])) ++pos;
    }
    bool eat(std::string_view s) {
        if (text.substr(pos, s.size()) != s) return false;
        pos += s.size();
        return true;
    }
    bool eat_spaced(std::string_view s) {
        const size_t save = pos;
        skip_space();
        if (eat(s)) return true;
        pos = save;
        return false;
    }
    // The text up to the next `s` (consumed with it); nullopt when `s` never comes.
    std::optional<std::string_view> until(std::string_view s) {
        const size_t at = text.find(s, pos);
        if (at == std::string_view::npos) return std::nullopt;
        std::string_view out = text.substr(pos, at - pos);
        pos = at + s.size();
        return out;
    }
};

// A JSON object's text (what OpenAI's function.arguments carries): the model's own spelling, trimmed.
std::optional<std::string> json_object_text(std::string_view s) {
    s = trim(s);
    if (s.empty()) return std::string("{}");
    ojson j = ojson::parse(s, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    return std::string(s);
}

bool valid_name(std::string_view name) {
    return !name.empty() &&
           std::none_of(name.begin(), name.end(), [](char c) { return is_ascii_space(c) || c == '<'; });
}

// The declared JSON type of a tool's parameter ("" when the request did not say).
std::string declared_type(const nlohmann::json* tools, std::string_view fn, std::string_view key) {
    if (tools == nullptr || !tools->is_array()) return "";
    for (const auto& t : *tools) {
        const auto* f = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
        if (f == nullptr || !f->is_object() || f->value("name", "") != fn) continue;
        const auto p = f->find("parameters");
        if (p == f->end() || !p->is_object()) return "";
        const auto props = p->find("properties");
        if (props == p->end() || !props->is_object()) return "";
        const auto prop = props->find(std::string(key));
        if (prop == props->end() || !prop->is_object()) return "";
        const auto type = prop->find("type");
        return type != prop->end() && type->is_string() ? type->get<std::string>() : "";
    }
    return "";
}

// One call's body in each format; false leaves the section to the content.
bool parse_deepseek_call(Cursor* c, bool v31, ToolCall* out) {
    if (!c->eat_spaced(kDsCallBegin)) return false;
    std::optional<std::string_view> body = c->until(kDsCallEnd);
    if (!body) return false;
    Cursor b{*body};
    std::optional<std::string_view> head = b.until(kDsSep);
    if (!head) return false;
    std::string_view rest = body->substr(b.pos);
    std::string_view name;
    std::string_view args;
    if (v31) {
        name = trim(*head);
        args = rest;
    } else {
        // head is the call's type ("function"); then NAME, a newline, and the arguments in a ```json fence.
        const size_t nl = rest.find('\n');
        name = trim(rest.substr(0, nl));
        args = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
        args = trim(args);
        if (args.starts_with("```json"))
            args.remove_prefix(7);
        else if (args.starts_with("```"))
            args.remove_prefix(3);
        if (args.ends_with("```")) args.remove_suffix(3);
    }
    std::optional<std::string> json = json_object_text(args);
    if (!valid_name(name) || !json) return false;
    *out = ToolCall{.id = "", .name = std::string(name), .arguments = std::move(*json)};
    return true;
}

bool parse_kimi_call(Cursor* c, ToolCall* out) {
    if (!c->eat_spaced(kKimiCallBegin)) return false;
    std::optional<std::string_view> id = c->until(kKimiArgBegin);
    std::optional<std::string_view> args = id ? c->until(kKimiCallEnd) : std::nullopt;
    if (!args) return false;
    const std::string_view full = trim(*id);
    std::string_view name = full;
    if (name.starts_with("functions.")) name.remove_prefix(10);
    if (const size_t colon = name.rfind(':'); colon != std::string_view::npos) name = name.substr(0, colon);
    std::optional<std::string> json = json_object_text(*args);
    if (!valid_name(name) || !json) return false;
    *out = ToolCall{.id = std::string(full), .name = std::string(name), .arguments = std::move(*json)};
    return true;
}

bool parse_glm_call(Cursor* c, const nlohmann::json* tools, ToolCall* out) {
    if (!c->eat_spaced(kToolCall)) return false;
    std::optional<std::string_view> body = c->until(kToolCallEnd);
    if (!body) return false;
    const size_t first_key = body->find(kArgKey);
    const std::string_view name = trim(body->substr(0, first_key));
    if (!valid_name(name)) return false;
    ojson args = ojson::object();
    Cursor b{*body, first_key == std::string_view::npos ? body->size() : first_key};
    while (b.eat_spaced(kArgKey)) {
        std::optional<std::string_view> key = b.until(kArgKeyEnd);
        if (!key || !b.eat_spaced(kArgValue)) return false;
        std::optional<std::string_view> value = b.until(kArgValueEnd);
        if (!value) return false;
        const std::string k(trim(*key));
        // A value is a JSON literal unless the tool declares the parameter a string (then it is the text as is).
        ojson v = declared_type(tools, name, k) == "string" ? ojson(ojson::value_t::discarded)
                                                            : ojson::parse(*value, nullptr, /*allow_exceptions=*/false);
        args[k] = v.is_discarded() ? ojson(std::string(*value)) : std::move(v);
    }
    b.skip_space();
    if (b.pos != body->size()) return false;
    *out = ToolCall{.id = "", .name = std::string(name), .arguments = args.dump()};
    return true;
}

bool parse_hermes_call(Cursor* c, ToolCall* out) {
    if (!c->eat_spaced(kToolCall)) return false;
    std::optional<std::string_view> body = c->until(kToolCallEnd);
    if (!body) return false;
    ojson j = ojson::parse(trim(*body), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    const ojson* args = j.contains("arguments")    ? &j["arguments"]
                        : j.contains("parameters") ? &j["parameters"]
                                                   : nullptr;
    std::string text = "{}";
    if (args != nullptr && args->is_string()) {
        std::optional<std::string> inner = json_object_text(args->get<std::string>());
        if (!inner) return false;
        text = std::move(*inner);
    } else if (args != nullptr) {
        if (!args->is_object()) return false;
        text = args->dump();
    }
    const std::string name = j["name"].get<std::string>();
    if (!valid_name(name)) return false;
    *out = ToolCall{.id = "", .name = name, .arguments = std::move(text)};
    return true;
}

// A section from an opening marker at c->pos: every call in it, or false (then the caller keeps it as content).
bool parse_section(ToolCallFormat f, const nlohmann::json* tools, Cursor* c, std::vector<ToolCall>* calls) {
    ToolCall call;
    switch (f) {
        case ToolCallFormat::kDeepSeekV3:
        case ToolCallFormat::kDeepSeekV31: {
            const bool section = c->eat(kDsCallsBegin);
            const bool v31 = f == ToolCallFormat::kDeepSeekV31;
            if (!parse_deepseek_call(c, v31, &call)) return false;
            calls->push_back(std::move(call));
            while (parse_deepseek_call(c, v31, &call)) calls->push_back(std::move(call));
            if (section && !c->eat_spaced(kDsCallsEnd)) return false;
            return true;
        }
        case ToolCallFormat::kKimiK2: {
            const bool section = c->eat(kKimiSectionBegin);
            if (!parse_kimi_call(c, &call)) return false;
            calls->push_back(std::move(call));
            while (parse_kimi_call(c, &call)) calls->push_back(std::move(call));
            if (section && !c->eat_spaced(kKimiSectionEnd)) return false;
            return true;
        }
        case ToolCallFormat::kGlm45:
            if (!parse_glm_call(c, tools, &call)) return false;
            calls->push_back(std::move(call));
            return true;
        case ToolCallFormat::kHermes:
            if (!parse_hermes_call(c, &call)) return false;
            calls->push_back(std::move(call));
            return true;
        case ToolCallFormat::kNone:
            break;
    }
    return false;
}

// The first opening marker at or after `from` (npos when none).
size_t find_open(ToolCallFormat f, std::string_view text, size_t from) {
    size_t best = std::string_view::npos;
    for (std::string_view m : opening_markers(f)) best = std::min(best, text.find(m, from));
    return best;
}

}  // namespace

Result<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
    if (name == "none" || name.empty()) return ToolCallFormat::kNone;
    if (name == "deepseekv3") return ToolCallFormat::kDeepSeekV3;
    if (name == "deepseekv31" || name == "deepseekv32") return ToolCallFormat::kDeepSeekV31;
    if (name == "kimi_k2") return ToolCallFormat::kKimiK2;
    if (name == "glm45" || name == "glm47" || name == "glm") return ToolCallFormat::kGlm45;
    if (name == "qwen25" || name == "qwen" || name == "hermes") return ToolCallFormat::kHermes;
    return invalid_argument("unknown tool-call parser '" + std::string(name) +
                            "' (known: deepseekv3, deepseekv31, kimi_k2, glm45, qwen25, none)");
}

std::string_view tool_call_format_name(ToolCallFormat f) {
    switch (f) {
        case ToolCallFormat::kDeepSeekV3:
            return "deepseekv3";
        case ToolCallFormat::kDeepSeekV31:
            return "deepseekv31";
        case ToolCallFormat::kKimiK2:
            return "kimi_k2";
        case ToolCallFormat::kGlm45:
            return "glm45";
        case ToolCallFormat::kHermes:
            return "qwen25";
        case ToolCallFormat::kNone:
            break;
    }
    return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view tmpl) {
    if (tmpl.find(kKimiSectionBegin) != std::string_view::npos) return ToolCallFormat::kKimiK2;
    if (tmpl.find(kDsCallBegin) != std::string_view::npos || tmpl.find(kDsCallsBegin) != std::string_view::npos) {
        return tmpl.find("```json") != std::string_view::npos ? ToolCallFormat::kDeepSeekV3
                                                              : ToolCallFormat::kDeepSeekV31;
    }
    if (tmpl.find(kArgKey) != std::string_view::npos) return ToolCallFormat::kGlm45;
    if (tmpl.find(kToolCall) != std::string_view::npos) return ToolCallFormat::kHermes;
    return ToolCallFormat::kNone;
}

ToolCallParse parse_tool_calls(ToolCallFormat format, std::string_view text, const nlohmann::json* tools) {
    ToolCallParse out;
    size_t pos = 0;
    while (true) {
        const size_t open = find_open(format, text, pos);
        if (open == std::string_view::npos) break;
        out.content.append(text.substr(pos, open - pos));
        Cursor c{text, open};
        std::vector<ToolCall> calls;
        if (!parse_section(format, tools, &c, &calls)) {
            pos = open;  // malformed or cut off: the rest is content
            break;
        }
        for (ToolCall& call : calls) out.calls.push_back(std::move(call));
        pos = c.pos;
    }
    out.content.append(text.substr(pos));
    // Whitespace the model put between its text and the calls is not content of its own.
    if (!out.calls.empty() && trim(out.content).empty()) out.content.clear();
    return out;
}

std::string ToolCallStream::feed(std::string_view delta) {
    pending_.append(delta);
    if (in_markup_) return {};
    if (format_ == ToolCallFormat::kNone) return std::exchange(pending_, {});
    const size_t open = find_open(format_, pending_, 0);
    if (open != std::string::npos) {
        std::string out = pending_.substr(0, open);
        pending_.erase(0, open);
        in_markup_ = true;
        return out;
    }
    // Hold back the longest tail that a marker could still grow from.
    const size_t keep = held_prefix_tail(pending_, opening_markers(format_));
    std::string out = pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return out;
}

ToolCallParse ToolCallStream::finish(const nlohmann::json* tools) {
    ToolCallParse p = parse_tool_calls(format_, pending_, tools);
    pending_.clear();
    in_markup_ = false;
    return p;
}

}  // namespace penstock::server
