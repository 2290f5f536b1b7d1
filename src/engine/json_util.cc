// JSON access helpers; see json_util.h.
#include "engine/json_util.h"

namespace penstock::engine {

namespace {

std::string render(const nlohmann::json& v) {
    std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}

const char* kind_name(const nlohmann::json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

}  // namespace

Status JsonPath::type_error(const char* expected, const nlohmann::json& got) const {
    return error(std::string("expected ") + expected + ", got " + kind_name(got) + " " + render(got));
}

Result<const nlohmann::json*> json_field(const nlohmann::json& obj, std::string_view key, const JsonPath& path,
                                         bool required) {
    if (!obj.is_object()) return path.type_error("an object", obj);
    auto it = obj.find(std::string(key));
    if (it == obj.end() || it->is_null()) {
        if (required) return path.key(key).error("missing");
        return static_cast<const nlohmann::json*>(nullptr);
    }
    return &*it;
}

Status json_string(const nlohmann::json& obj, std::string_view key, const JsonPath& path, bool required,
                   std::string* out) {
    PENSTOCK_ASSIGN_OR_RETURN(const nlohmann::json* v, json_field(obj, key, path, required));
    if (v == nullptr) return ok_status();
    if (!v->is_string()) return path.key(key).type_error("a string", *v);
    *out = v->get<std::string>();
    return ok_status();
}

Status json_bool(const nlohmann::json& obj, std::string_view key, const JsonPath& path, bool* out) {
    PENSTOCK_ASSIGN_OR_RETURN(const nlohmann::json* v, json_field(obj, key, path, /*required=*/false));
    if (v == nullptr) return ok_status();
    if (!v->is_boolean()) return path.key(key).type_error("a boolean", *v);
    *out = v->get<bool>();
    return ok_status();
}

Status json_id(const nlohmann::json& v, const JsonPath& path, int32_t* out) {
    constexpr int64_t kMaxId = int64_t{1} << 24;
    if (!v.is_number_integer()) return path.type_error("a token id (integer)", v);
    if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(kMaxId)
                               : (v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxId)) {
        return path.error("token id " + render(v) + " out of range [0, 2^24)");
    }
    *out = static_cast<int32_t>(v.get<int64_t>());
    return ok_status();
}

}  // namespace penstock::engine
