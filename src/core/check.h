// Invariant checks: PENSTOCK_CHECK(cond) << "context"; PENSTOCK_CHECK_EQ/NE/LT/LE/GT/GE(a, b) print both operands,
// the expression and file:line, then abort. For programmer errors only; expected failures return Status.
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

namespace penstock::detail {

class CheckFailure final {
public:
    CheckFailure(const char* file, int line, const std::string& what);
    [[noreturn]] ~CheckFailure();
    template <class T>
    CheckFailure& operator<<(const T& v) {
        stream_ << v;
        return *this;
    }

private:
    std::ostringstream stream_;
};

// Streams a value; 8-bit integers print as numbers, not characters.
template <class T>
void print_operand(std::ostream& s, const T& v) {
    if constexpr (std::is_integral_v<T> && sizeof(T) == 1) {
        s << static_cast<int>(v);
    } else {
        s << v;
    }
}

template <class A, class B, class Op>
std::optional<std::string> check_op(const A& a, const B& b, Op op, const char* expr) {
    if (op(a, b)) return std::nullopt;
    std::ostringstream s;
    s << "Check failed: " << expr << " (";
    print_operand(s, a);
    s << " vs. ";
    print_operand(s, b);
    s << ")";
    return s.str();
}

}  // namespace penstock::detail

#define PENSTOCK_CHECK(cond) \
    while (!(cond)) ::penstock::detail::CheckFailure(__FILE__, __LINE__, "Check failed: " #cond)

#define PENSTOCK_CHECK_OP(a, b, op, opstr)                                                                \
    while (auto penstock_check_msg_ = ::penstock::detail::check_op((a), (b), op, #a " " opstr " " #b)) \
    ::penstock::detail::CheckFailure(__FILE__, __LINE__, *penstock_check_msg_)

#define PENSTOCK_CHECK_EQ(a, b) PENSTOCK_CHECK_OP(a, b, [](const auto& x, const auto& y) { return x == y; }, "==")
#define PENSTOCK_CHECK_NE(a, b) PENSTOCK_CHECK_OP(a, b, [](const auto& x, const auto& y) { return x != y; }, "!=")
#define PENSTOCK_CHECK_LT(a, b) PENSTOCK_CHECK_OP(a, b, [](const auto& x, const auto& y) { return x < y; }, "<")
#define PENSTOCK_CHECK_LE(a, b) PENSTOCK_CHECK_OP(a, b, [](const auto& x, const auto& y) { return x <= y; }, "<=")
#define PENSTOCK_CHECK_GT(a, b) PENSTOCK_CHECK_OP(a, b, [](const auto& x, const auto& y) { return x > y; }, ">")
#define PENSTOCK_CHECK_GE(a, b) PENSTOCK_CHECK_OP(a, b, [](const auto& x, const auto& y) { return x >= y; }, ">=")

#ifdef NDEBUG
#define PENSTOCK_DCHECK(cond) \
    while (false && !(cond)) ::penstock::detail::CheckFailure(__FILE__, __LINE__, "")
#else
#define PENSTOCK_DCHECK(cond) PENSTOCK_CHECK(cond)
#endif
