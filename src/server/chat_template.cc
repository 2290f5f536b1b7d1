// ChatTemplate: parse and render entry points over the Jinja interpreter; converts its errors to Status.
#include "server/chat_template.h"

#include "server/jinja_interp.h"

namespace penstock::server {
namespace {

// Whether `e` reads something called `content`: the name, an attribute, a literal subscript or `.get('content')`.
bool mentions_content(const jinja::Expr* e) {
    if (e == nullptr) return false;
    using Op = jinja::Expr::Op;
    if ((e->op == Op::kName || e->op == Op::kAttr) && e->name == "content") return true;
    if (e->op == Op::kLiteral && e->literal.is_str() && e->literal.s == "content") return true;
    for (const jinja::ExprPtr& a : e->args) {
        if (mentions_content(a.get())) return true;
    }
    return false;
}

bool loops_over_content(const jinja::Body& body) {
    for (const jinja::NodePtr& n : body) {
        if (n->type == jinja::Node::Type::kFor) {
            if (mentions_content(n->expr.get())) return true;
            for (const std::string& t : n->targets) {
                if (t == "content") return true;
            }
        }
        for (const jinja::Body& b : n->bodies) {
            if (loops_over_content(b)) return true;
        }
    }
    return false;
}

}  // namespace

ChatTemplate::ChatTemplate() = default;
ChatTemplate::~ChatTemplate() = default;

Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::parse(std::string_view source) {
    std::shared_ptr<ChatTemplate> t(new ChatTemplate());
    try {
        t->program_ = jinja::parse_program(source);
        t->takes_content_parts_ = loops_over_content(t->program_->body);
    } catch (const jinja::Error& e) {
        return Status(StatusCode::kInvalidArgument, std::string("chat template: ") + e.what());
    }
    return std::shared_ptr<const ChatTemplate>(std::move(t));
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages, const RenderOptions& o) const {
    auto globals = std::make_shared<jinja::Dict>();
    jinja::add_builtin_globals(globals.get());
    globals->set("messages", jinja::from_json(messages));
    globals->set("tools", jinja::from_json(o.tools));
    globals->set("documents", jinja::Value::none());
    globals->set("add_generation_prompt", jinja::Value::boolean(o.add_generation_prompt));
    globals->set("bos_token", jinja::Value::str(o.bos_token));
    globals->set("eos_token", jinja::Value::str(o.eos_token));
    if (o.kwargs.is_object()) {
        for (const auto& [k, v] : o.kwargs.items()) globals->set(k, jinja::from_json(v));
    }
    try {
        jinja::Interp interp(globals);
        return interp.render(*program_);
    } catch (const jinja::Error& e) {
        return Status(StatusCode::kInvalidArgument, std::string("chat template: ") + e.what());
    }
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, const std::string& bos,
                                         const std::string& eos) const {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
    RenderOptions o;
    o.bos_token = bos;
    o.eos_token = eos;
    return render(msgs, o);
}

}  // namespace penstock::server
