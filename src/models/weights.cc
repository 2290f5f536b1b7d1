// WeightReader.
#include "models/weights.h"

#include <sstream>

namespace penstock::models {

namespace {
std::string shape_str(const Shape& s) {
    std::ostringstream o;
    o << "[";
    for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
    o << "]";
    return o.str();
}
}  // namespace

Result<Tensor> WeightReader::take(const std::string& name, const Shape& shape) {
    auto it = weights_->find(name);
    if (it == weights_->end()) return not_found("checkpoint has no tensor '" + name + "'");
    Tensor t = std::move(it->second);
    weights_->erase(it);
    if (t.view().shape_vec() != shape) {
        return invalid_argument("tensor '" + name + "' has shape " + t.view().shape_string() + ", expected " +
                                shape_str(shape));
    }
    return t;
}

Result<Tensor> WeightReader::take_optional(const std::string& name, const Shape& shape) {
    if (!contains(name)) return Tensor();
    return take(name, shape);
}

}  // namespace penstock::models
