// SafetensorsFile: round trips of every dtype through the writer, and one malformed header per validation rule,
// each of which must be a Status naming the file (and the tensor where there is one), never a crash.
#include "loader/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "loader/safetensors_writer.h"
#include "test_util.h"

namespace penstock::loader {
namespace {

using testing::contains;
using testing::raw_safetensors;
using testing::TempDir;

constexpr char kName[] = "bad.safetensors";

// Opens a buffer that must fail; returns the message after checking it names the file (and `tensor` if given).
std::string expect_error(const std::vector<uint8_t>& bytes, std::string_view tensor = {}) {
    Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open_buffer(kName, bytes);
    EXPECT_FALSE(f.ok());
    if (f.ok()) return "";
    const std::string msg = f.status().message();
    EXPECT_TRUE(contains(msg, kName)) << msg;
    if (!tensor.empty()) {
        std::string quoted = "'";
        quoted.append(tensor).append("'");
        EXPECT_TRUE(contains(msg, quoted)) << msg;
    }
    return msg;
}

std::string entry(std::string_view name, std::string_view body) {
    return "{\"" + std::string(name) + "\":" + std::string(body) + "}";
}

// "t<100 - i>": names in the reverse order of the cases (the reader sorts them).
std::string case_name(size_t i) { return std::string("t").append(std::to_string(100 - i)); }

struct Case {
    DType dtype;
    Shape shape;
};

TEST(SafetensorsTest, RoundTripsEveryDtype) {
    const std::vector<Case> cases = {
        {DType::kF32, {3, 5}},  {DType::kBF16, {2, 3, 4}}, {DType::kF16, {7}},        {DType::kF8E4M3, {4, 4}},
        {DType::kE8M0, {5, 1}}, {DType::kFP4E2M1, {3, 5}}, {DType::kI8, {9}},         {DType::kU8, {2, 2}},
        {DType::kI32, {3}},     {DType::kI64, {2, 2}},     {DType::kBool, {1, 1, 3}}, {DType::kF32, {}},
        {DType::kBF16, {0, 4}},
    };
    std::vector<std::vector<uint8_t>> storage;
    NamedViews views;
    for (size_t i = 0; i < cases.size(); ++i) {
        TensorView probe = TensorView::contiguous(nullptr, cases[i].dtype, cases[i].shape);
        std::vector<uint8_t> bytes(probe.nbytes());
        for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<uint8_t>(31 * i + 7 * b + 1);
        storage.push_back(std::move(bytes));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
        views.emplace_back(case_name(i), TensorView::contiguous(storage[i].data(), cases[i].dtype, cases[i].shape));
    }
    TempDir dir;
    const auto path = dir.path() / "all.safetensors";
    ASSERT_TRUE(write_safetensors(path, views, {{"format", "pt"}}).ok());

    Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    const SafetensorsFile& file = **f;
    EXPECT_EQ(file.path(), path);
    EXPECT_EQ(file.header_bytes() % 8, 0u);
    EXPECT_EQ(file.metadata_json(), "{\"format\":\"pt\"}");
    ASSERT_EQ(file.tensors().size(), cases.size());
    EXPECT_TRUE(std::is_sorted(file.tensors().begin(), file.tensors().end(),
                               [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; }));
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string name = case_name(i);
        const TensorInfo* info = file.find(name);
        ASSERT_NE(info, nullptr) << name;
        EXPECT_EQ(info->dtype, cases[i].dtype) << name;
        EXPECT_EQ(info->shape, cases[i].shape) << name;
        const TensorView v = file.view(*info);
        EXPECT_EQ(v.dtype, cases[i].dtype);
        EXPECT_EQ(v.shape_vec(), cases[i].shape);
        ASSERT_EQ(v.nbytes(), storage[i].size()) << name;
        if (!storage[i].empty()) {
            EXPECT_EQ(std::memcmp(v.data, storage[i].data(), storage[i].size()), 0) << name;
        }
    }
    EXPECT_EQ(file.find("missing"), nullptr);

    // The in-memory serialisation reads back identically through open_buffer.
    Result<std::vector<uint8_t>> bytes = serialize_safetensors(views);
    ASSERT_TRUE(bytes.ok());
    Result<std::unique_ptr<SafetensorsFile>> b = SafetensorsFile::open_buffer("mem", *bytes);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ((*b)->tensors().size(), cases.size());
    EXPECT_EQ((*b)->metadata_json(), "{}");
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
    float x[4] = {1, 2, 3, 4};
    const Shape s = {4};
    const TensorView v = TensorView::contiguous(x, DType::kF32, s);
    EXPECT_FALSE(serialize_safetensors({{"a", v}, {"a", v}}).ok());
    EXPECT_FALSE(serialize_safetensors({{"__metadata__", v}}).ok());
    EXPECT_FALSE(serialize_safetensors({{"", v}}).ok());
    EXPECT_FALSE(serialize_safetensors({{"strided", v.reshape({2, 2}).slice(1, 0, 1)}}).ok());
    TempDir dir;
    EXPECT_FALSE(write_safetensors(dir.path() / "no_such_dir" / "x.safetensors", {{"a", v}}).ok());
}

TEST(SafetensorsTest, OpensTheFixture) {
    Result<std::unique_ptr<SafetensorsFile>> f =
        SafetensorsFile::open(std::filesystem::path(PENSTOCK_FIXTURES_DIR) / "deepseek_v3_tiny/model.safetensors");
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ((*f)->tensors().size(), 129u);
    const TensorInfo* embed = (*f)->find("model.embed_tokens.weight");
    ASSERT_NE(embed, nullptr);
    EXPECT_EQ(embed->dtype, DType::kBF16);
    EXPECT_EQ(embed->shape, (Shape{512, 128}));
    EXPECT_EQ(embed->nbytes(), 512u * 128u * 2u);
}

TEST(SafetensorsTest, FileLevelErrors) {
    // Shorter than the 8-byte length prefix.
    EXPECT_TRUE(contains(expect_error({1, 2, 3}), "too short"));
    // Header length past the end of the file.
    EXPECT_TRUE(contains(expect_error(raw_safetensors("{}", 0, 1000)), "exceeds the file size"));
    // Header length over the 100 MB cap (the check does not need a 100 MB buffer).
    EXPECT_TRUE(contains(expect_error(raw_safetensors("{}", 0, 200'000'000)), "100 MB"));
    // Not JSON: the message gives the byte position.
    EXPECT_TRUE(contains(expect_error(raw_safetensors("{\"a\": [1, 2", 0)), "byte"));
    EXPECT_TRUE(contains(expect_error(raw_safetensors("", 0)), "not valid JSON"));
    // JSON but not an object.
    EXPECT_TRUE(contains(expect_error(raw_safetensors("[1, 2]", 0)), "object"));
    // Bad __metadata__.
    EXPECT_TRUE(contains(expect_error(raw_safetensors(R"({"__metadata__": 5})", 0)), "__metadata__"));
    EXPECT_TRUE(contains(expect_error(raw_safetensors(R"({"__metadata__": {"k": 1}})", 0)), "'k'"));

    // The same through open(): an empty and a truncated file on disk.
    TempDir dir;
    testing::write_file(dir.path() / "empty.safetensors", {});
    Result<std::unique_ptr<SafetensorsFile>> e = SafetensorsFile::open(dir.path() / "empty.safetensors");
    ASSERT_FALSE(e.ok());
    EXPECT_TRUE(contains(e.status().message(), "empty.safetensors")) << e.status().message();
    Result<std::unique_ptr<SafetensorsFile>> m = SafetensorsFile::open(dir.path() / "missing.safetensors");
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(contains(m.status().message(), "missing.safetensors"));
}

TEST(SafetensorsTest, EntryErrorsNameTheTensor) {
    const std::string t = "w.x";
    auto bad = [&](std::string_view body, size_t data = 64) {
        return expect_error(raw_safetensors(entry(t, body), data), t);
    };
    EXPECT_TRUE(contains(bad("[1]"), "must be an object"));
    EXPECT_TRUE(contains(bad(R"({"shape": [1], "data_offsets": [0, 4]})"), "missing 'dtype'"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "data_offsets": [0, 4]})"), "missing 'shape'"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1]})"), "missing 'data_offsets'"));
    EXPECT_TRUE(contains(bad(R"({"dtype": 7, "shape": [1], "data_offsets": [0, 4]})"), "'dtype' must be a string"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "Q4_K", "shape": [1], "data_offsets": [0, 4]})"), "unsupported dtype"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": 1, "data_offsets": [0, 4]})"), "'shape' must be"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})"), "non-negative"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"), "non-negative"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]})"), "non-negative"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1,1,1,1,1,1,1], "data_offsets": [0, 4]})"), "dims"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [2199023255553], "data_offsets": [0, 4]})"), "too large"));
    // Each dim is allowed but the element count overflows (checked multiplication).
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 4]})"),
                         "overflows"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})"), "two non-negative"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]})"), "two non-negative"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})"), "two non-negative"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1], "data_offsets": "0,4"})"), "two non-negative"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})"), "begin > end"));
    // End beyond the data section, i.e. a truncated file.
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [16], "data_offsets": [0, 64]})", 60), "beyond the data"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 18446744073709551615]})"),
                         "beyond the data"));
    // Byte count disagrees with dtype x shape.
    EXPECT_TRUE(contains(bad(R"({"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]})"), "needs 16"));
    EXPECT_TRUE(contains(bad(R"({"dtype": "F4", "shape": [3], "data_offsets": [0, 1]})"), "needs 2"));
}

TEST(SafetensorsTest, TruncatedRealFileNamesTheTensor) {
    float x[8] = {};
    const Shape s = {8};
    Result<std::vector<uint8_t>> bytes = serialize_safetensors(
        {{"a", TensorView::contiguous(x, DType::kF32, s)}, {"b", TensorView::contiguous(x, DType::kF32, s)}});
    ASSERT_TRUE(bytes.ok());
    ASSERT_GT(bytes->size(), 4u);
    const std::vector<uint8_t> cut(bytes->begin(), bytes->end() - 4);  // tensor "b" is last in the data section
    TempDir dir;
    testing::write_file(dir.path() / "cut.safetensors", cut);
    Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open(dir.path() / "cut.safetensors");
    ASSERT_FALSE(f.ok());
    EXPECT_TRUE(contains(f.status().message(), "cut.safetensors")) << f.status().message();
    EXPECT_TRUE(contains(f.status().message(), "'b'")) << f.status().message();
}

TEST(SafetensorsTest, AcceptsOverlapsMetadataAndEmptyTensors) {
    const std::string header = R"({"__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
        "c": {"dtype": "BF16", "shape": [0, 3], "data_offsets": [8, 8]},
        "d": {"dtype": "I64", "shape": [], "data_offsets": [8, 16], "extra": true}})";
    const std::vector<uint8_t> bytes = raw_safetensors(header, 16);
    Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::open_buffer("ok", bytes);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_EQ((*f)->tensors().size(), 4u);
    const TensorInfo* c = (*f)->find("c");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->nbytes(), 0u);
    EXPECT_EQ((*f)->view(*c).numel(), 0);
    const TensorInfo* d = (*f)->find("d");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ((*f)->view(*d).ndim, 0);
    EXPECT_EQ(d->offset_begin, 8 + header.size() + 8);
    EXPECT_EQ((*f)->bytes(*d)[0], 8);
}

}  // namespace
}  // namespace penstock::loader
