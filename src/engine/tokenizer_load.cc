// Tokenizer loading: tokenizer.json (model, normalizer, pre_tokenizer, post_processor, decoder, added_tokens) and
// tokenizer_config.json. Every error names the file and the field; nlohmann exceptions are caught here.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "engine/tokenizer_impl.h"

namespace penstock::engine {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 8;
constexpr size_t kMaxFileBytes = size_t{1} << 30;

Result<json> parse_json(std::string_view text, const std::string& source) {
    try {
        return json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
        return invalid_argument(source + ": not valid JSON: " + e.what());
    }
}

Status parse_added_tokens(const json& root, const JsonPath& path, std::vector<AddedToken>* out) {
    PENSTOCK_ASSIGN_OR_RETURN(const json* list, json_field(root, "added_tokens", path, /*required=*/false));
    if (list == nullptr) return ok_status();
    const JsonPath lp = path.key("added_tokens");
    if (!list->is_array()) return lp.type_error("an array", *list);
    for (size_t i = 0; i < list->size(); ++i) {
        const json& t = (*list)[i];
        const JsonPath tp = lp.index(i);
        AddedToken tok;
        PENSTOCK_ASSIGN_OR_RETURN(const json* id, json_field(t, "id", tp, /*required=*/true));
        PENSTOCK_RETURN_IF_ERROR(json_id(*id, tp.key("id"), &tok.id));
        PENSTOCK_RETURN_IF_ERROR(json_string(t, "content", tp, /*required=*/true, &tok.content));
        if (tok.content.empty()) return tp.key("content").error("empty added token");
        PENSTOCK_RETURN_IF_ERROR(json_bool(t, "single_word", tp, &tok.single_word));
        PENSTOCK_RETURN_IF_ERROR(json_bool(t, "lstrip", tp, &tok.lstrip));
        PENSTOCK_RETURN_IF_ERROR(json_bool(t, "rstrip", tp, &tok.rstrip));
        PENSTOCK_RETURN_IF_ERROR(json_bool(t, "normalized", tp, &tok.normalized));
        PENSTOCK_RETURN_IF_ERROR(json_bool(t, "special", tp, &tok.special));
        out->push_back(std::move(tok));
    }
    return ok_status();
}

// TemplateProcessing's "single": [{"SpecialToken": {"id": name}} | {"Sequence": {"id": "A"}}], with the ids of
// each name in "special_tokens": {name: {"ids": [...]}}.
Status parse_template(const json& v, const JsonPath& path, PostProcessStep* step) {
    PENSTOCK_ASSIGN_OR_RETURN(const json* single, json_field(v, "single", path, /*required=*/true));
    PENSTOCK_ASSIGN_OR_RETURN(const json* specials, json_field(v, "special_tokens", path, /*required=*/false));
    const JsonPath sp = path.key("single");
    if (!single->is_array()) return sp.type_error("an array", *single);
    for (size_t i = 0; i < single->size(); ++i) {
        const json& piece = (*single)[i];
        const JsonPath pp = sp.index(i);
        PostProcessStep::Item item;
        if (piece.is_object() && piece.contains("Sequence")) {
            item.is_sequence = true;
        } else if (piece.is_object() && piece.contains("SpecialToken")) {
            std::string name;
            PENSTOCK_RETURN_IF_ERROR(json_string(piece["SpecialToken"], "id", pp.key("SpecialToken"), true, &name));
            const JsonPath np = path.key("special_tokens").key(name);
            if (specials == nullptr || !specials->is_object() || !specials->contains(name)) {
                return np.error("template token '" + name + "' is not defined");
            }
            PENSTOCK_ASSIGN_OR_RETURN(const json* ids, json_field((*specials)[name], "ids", np, /*required=*/true));
            if (!ids->is_array()) return np.key("ids").type_error("an array of ids", *ids);
            for (size_t k = 0; k < ids->size(); ++k) {
                int32_t id = 0;
                PENSTOCK_RETURN_IF_ERROR(json_id((*ids)[k], np.key("ids").index(k), &id));
                item.ids.push_back(id);
            }
        } else {
            return pp.type_error("{\"Sequence\": ...} or {\"SpecialToken\": ...}", piece);
        }
        step->single.push_back(std::move(item));
    }
    return ok_status();
}

// BertProcessing / RobertaProcessing: "cls": [token, id], "sep": [token, id] -> CLS $A SEP.
Status parse_cls_sep(const json& v, const JsonPath& path, PostProcessStep* step) {
    int32_t ids[2] = {0, 0};
    const char* keys[2] = {"cls", "sep"};
    for (int k = 0; k < 2; ++k) {
        PENSTOCK_ASSIGN_OR_RETURN(const json* f, json_field(v, keys[k], path, /*required=*/true));
        if (!f->is_array() || f->size() != 2) return path.key(keys[k]).type_error("[token, id]", *f);
        PENSTOCK_RETURN_IF_ERROR(json_id((*f)[1], path.key(keys[k]).index(1), &ids[k]));
    }
    step->single = {{false, {ids[0]}}, {true, {}}, {false, {ids[1]}}};
    return ok_status();
}

Status parse_post_processor(const json& v, const JsonPath& path, int depth, std::vector<PostProcessStep>* steps) {
    if (v.is_null()) return ok_status();
    if (depth > kMaxDepth) return path.error("post-processor Sequence nested deeper than 8");
    std::string type;
    PENSTOCK_RETURN_IF_ERROR(json_string(v, "type", path, /*required=*/true, &type));
    if (type == "Sequence") {
        PENSTOCK_ASSIGN_OR_RETURN(const json* list, json_field(v, "processors", path, /*required=*/true));
        if (!list->is_array()) return path.key("processors").type_error("an array", *list);
        for (size_t i = 0; i < list->size(); ++i) {
            PENSTOCK_RETURN_IF_ERROR(
                parse_post_processor((*list)[i], path.key("processors").index(i), depth + 1, steps));
        }
        return ok_status();
    }
    if (type == "ByteLevel") return ok_status();  // offsets only
    PostProcessStep step;
    if (type == "TemplateProcessing") {
        PENSTOCK_RETURN_IF_ERROR(parse_template(v, path, &step));
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
        PENSTOCK_RETURN_IF_ERROR(parse_cls_sep(v, path, &step));
    } else {
        return unimplemented(path.source + ": field '" + path.key("type").field + "': post-processor '" + type +
                             "' is not supported");
    }
    steps->push_back(std::move(step));
    return ok_status();
}

// bos_token and friends: a string, an AddedToken object {"content": ...}, or null.
Status config_token(const json& root, const char* key, const JsonPath& path, std::string* out) {
    PENSTOCK_ASSIGN_OR_RETURN(const json* v, json_field(root, key, path, /*required=*/false));
    if (v == nullptr) return ok_status();
    if (v->is_string()) {
        *out = v->get<std::string>();
        return ok_status();
    }
    if (v->is_object()) return json_string(*v, "content", path.key(key), /*required=*/true, out);
    return path.key(key).type_error("a string or {\"content\": ...}", *v);
}

}  // namespace

Result<std::string> read_tokenizer_file(const std::filesystem::path& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) return not_found(path.string() + ": cannot read: " + ec.message());
    if (size > kMaxFileBytes) return invalid_argument(path.string() + ": file is larger than 1 GiB");
    std::ifstream in(path, std::ios::binary);
    if (!in) return not_found(path.string() + ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view text, std::string_view source_view) {
    const std::string source(source_view);
    try {
        PENSTOCK_ASSIGN_OR_RETURN(const json root, parse_json(text, source));
        const JsonPath path{source, ""};
        if (!root.is_object()) return invalid_argument(source + ": expected a JSON object at the top level");
        std::unique_ptr<Tokenizer> tok(new Tokenizer());
        Impl& impl = *tok->impl_;
        PENSTOCK_ASSIGN_OR_RETURN(const json* model, json_field(root, "model", path, /*required=*/true));
        PENSTOCK_ASSIGN_OR_RETURN(impl.model, BpeModel::from_json(*model, path.key("model")));
        const json kNull;
        auto field = [&](const char* k) -> const json& { return root.contains(k) ? root[k] : kNull; };
        PENSTOCK_ASSIGN_OR_RETURN(impl.normalizer, Normalizer::from_json(field("normalizer"), path.key("normalizer")));
        PENSTOCK_ASSIGN_OR_RETURN(impl.pre_tokenizer,
                                  PreTokenizer::from_json(field("pre_tokenizer"), path.key("pre_tokenizer")));
        PENSTOCK_ASSIGN_OR_RETURN(impl.decoder, Decoder::from_json(field("decoder"), path.key("decoder")));
        PENSTOCK_RETURN_IF_ERROR(
            parse_post_processor(field("post_processor"), path.key("post_processor"), 0, &impl.post));
        std::vector<AddedToken> added;
        PENSTOCK_RETURN_IF_ERROR(parse_added_tokens(root, path, &added));
        impl.vocab_size = impl.model.max_id() + 1;
        for (size_t i = 0; i < added.size(); ++i) {
            impl.added_by_content[added[i].content] = added[i].id;
            impl.added_by_id[added[i].id] = i;
            impl.vocab_size = std::max(impl.vocab_size, added[i].id + 1);
        }
        impl.added = AddedVocab(std::move(added), impl.normalizer);
        return tok;
    } catch (const std::exception& e) {  // defensive: the accessors above check types before reading
        return internal_error(source + ": unexpected error while parsing: " + e.what());
    }
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::filesystem::path& path) {
    PENSTOCK_ASSIGN_OR_RETURN(const std::string text, read_tokenizer_file(path));
    return from_json(text, path.string());
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_dir(const std::filesystem::path& dir) {
    const auto json_file = dir / "tokenizer.json";
    const auto tiktoken_file = dir / "tiktoken.model";
    const auto config = dir / "tokenizer_config.json";
    std::error_code ec;
    const bool has_config = std::filesystem::exists(config, ec);
    if (std::filesystem::exists(json_file, ec)) {
        PENSTOCK_ASSIGN_OR_RETURN(auto tok, from_file(json_file));
        if (has_config) PENSTOCK_RETURN_IF_ERROR(tok->load_config_file(config));
        return tok;
    }
    if (!std::filesystem::exists(tiktoken_file, ec)) {
        return not_found(dir.string() + ": neither tokenizer.json nor tiktoken.model");
    }
    // Kimi checkpoints: tiktoken.model and no tokenizer.json.
    PENSTOCK_ASSIGN_OR_RETURN(const std::string model_text, read_tokenizer_file(tiktoken_file));
    std::string config_text;
    if (has_config) {
        PENSTOCK_ASSIGN_OR_RETURN(config_text, read_tokenizer_file(config));
    }
    PENSTOCK_ASSIGN_OR_RETURN(auto tok,
                              from_tiktoken(model_text, config_text, tiktoken_file.string(), config.string()));
    if (has_config) PENSTOCK_RETURN_IF_ERROR(tok->load_chat_template_jinja(dir));
    return tok;
}

Status Tokenizer::load_config_file(const std::filesystem::path& path) {
    PENSTOCK_ASSIGN_OR_RETURN(const std::string text, read_tokenizer_file(path));
    PENSTOCK_RETURN_IF_ERROR(load_config_json(text, path.string()));
    return load_chat_template_jinja(path.parent_path());
}

Status Tokenizer::load_chat_template_jinja(const std::filesystem::path& dir) {
    // transformers 5 layout: chat_template.jinja next to tokenizer_config.json wins over its chat_template field.
    const std::filesystem::path jinja = dir / "chat_template.jinja";
    if (std::error_code ec; std::filesystem::is_regular_file(jinja, ec)) {
        PENSTOCK_ASSIGN_OR_RETURN(std::string tmpl, read_tokenizer_file(jinja));
        config_.chat_template = std::move(tmpl);
        config_.chat_template_source = "chat_template.jinja";
    }
    return ok_status();
}

Status Tokenizer::load_config_json(std::string_view text, std::string_view source_view) {
    const std::string source(source_view);
    try {
        PENSTOCK_ASSIGN_OR_RETURN(const json root, parse_json(text, source));
        const JsonPath path{source, ""};
        if (!root.is_object()) return invalid_argument(source + ": expected a JSON object at the top level");
        TokenizerConfig c;
        PENSTOCK_RETURN_IF_ERROR(config_token(root, "bos_token", path, &c.bos_token));
        PENSTOCK_RETURN_IF_ERROR(config_token(root, "eos_token", path, &c.eos_token));
        PENSTOCK_RETURN_IF_ERROR(config_token(root, "pad_token", path, &c.pad_token));
        if (!c.bos_token.empty()) c.bos_id = token_to_id(c.bos_token);
        if (!c.eos_token.empty()) c.eos_id = token_to_id(c.eos_token);
        if (!c.pad_token.empty()) c.pad_id = token_to_id(c.pad_token);
        PENSTOCK_ASSIGN_OR_RETURN(const json* tmpl, json_field(root, "chat_template", path, /*required=*/false));
        if (tmpl != nullptr && tmpl->is_string()) {
            c.chat_template = tmpl->get<std::string>();
        } else if (tmpl != nullptr && tmpl->is_array()) {  // [{"name": ..., "template": ...}]: keep "default"
            for (size_t i = 0; i < tmpl->size(); ++i) {
                std::string name, body;
                PENSTOCK_RETURN_IF_ERROR(
                    json_string((*tmpl)[i], "name", path.key("chat_template").index(i), true, &name));
                PENSTOCK_RETURN_IF_ERROR(
                    json_string((*tmpl)[i], "template", path.key("chat_template").index(i), true, &body));
                if (name == "default" || c.chat_template.empty()) c.chat_template = body;
            }
        } else if (tmpl != nullptr) {
            return path.key("chat_template").type_error("a string or a list of named templates", *tmpl);
        }
        config_ = std::move(c);
        return ok_status();
    } catch (const std::exception& e) {
        return internal_error(source + ": unexpected error while parsing: " + e.what());
    }
}

}  // namespace penstock::engine
