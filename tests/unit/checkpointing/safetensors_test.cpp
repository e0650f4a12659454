// safetensors: the spec's byte examples (checkpoint-format.md §9), writer bytes, and malformed files.
#include "checkpointing/safetensors.hpp"
#include "common/error.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

using namespace accel;
using namespace accel::ckpt;

namespace {

std::string le64(uint64_t n)
{
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
    return s;
}

std::string file_of(const std::string &header, const std::string &data) { return le64(header.size()) + header + data; }

// Expects DATA_LOSS whose message contains every fragment.
void expect_data_loss(const std::string &bytes, std::initializer_list<const char *> fragments)
{
    try {
        parse_safetensors(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(), "f.safetensors");
        ADD_FAILURE() << "no error";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_DATA_LOSS) << e.what();
        for (const char *f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
    }
}

const char kF32Data[] = "\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40";

} // namespace

TEST(Safetensors, SpecVectorParses)
{
    std::string header = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}";
    ASSERT_EQ(header.size(), 65u);
    std::string file = file_of(header + std::string(7, ' '), std::string(kF32Data, 24));
    ASSERT_EQ(file.size(), 104u);
    ASSERT_EQ(file.substr(0, 8), std::string("\x48\0\0\0\0\0\0\0", 8));
    auto loaded = parse_safetensors(reinterpret_cast<const uint8_t *>(file.data()), file.size(), "vector");
    ASSERT_EQ(loaded.tensors.size(), 1u);
    EXPECT_EQ(loaded.tensors[0].first, "attn0");
    const at::Tensor &t = loaded.tensors[0].second;
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{1, 1, 2, 3}));
    EXPECT_TRUE(t.equal(at::arange(6, at::kFloat).reshape({1, 1, 2, 3})));
    EXPECT_FALSE(loaded.has_metadata);
}

TEST(Safetensors, WriterBytesEqualSpecVector)
{
    TensorList tensors{{"attn0", at::arange(6, at::kFloat).reshape({1, 1, 2, 3})}};
    std::string expected = file_of("{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}" +
                                       std::string(7, ' '),
                                   std::string(kF32Data, 24));
    EXPECT_EQ(safetensors_bytes(tensors, nullptr), expected);
}

TEST(Safetensors, WriterMetadataVector)
{
    TensorList tensors{{"a", at::zeros({2}, at::kFloat)}};
    StringMap meta{{"format", "pt"}};
    std::string header = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    ASSERT_EQ(header.size(), 85u);
    EXPECT_EQ(safetensors_bytes(tensors, &meta), file_of(header + "   ", std::string(8, '\0')));
}

TEST(Safetensors, UnpaddedI32VectorParsesAndTrailingByteIsRejected)
{
    std::string header = "{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    ASSERT_EQ(header.size(), 0x3Cu);
    std::string file = file_of(header, std::string(16, '\0'));
    auto loaded = parse_safetensors(reinterpret_cast<const uint8_t *>(file.data()), file.size(), "v2");
    EXPECT_TRUE(loaded.tensors[0].second.equal(at::zeros({2, 2}, at::kInt)));
    expect_data_loss(file + "x", {"trailing"});
}

TEST(Safetensors, WriterOrdersByDtypeDescendingThenName)
{
    TensorList tensors{{"b_f32", at::ones({1}, at::kFloat)}, {"z_i64", at::ones({1}, at::kLong)},
                       {"a_f32", at::ones({1}, at::kFloat)}, {"flag", at::ones({3}, at::kBool)},
                       {"h", at::ones({1}, at::kBFloat16)}};
    std::string bytes = safetensors_bytes(tensors, nullptr);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u);
    std::string header = bytes.substr(8, n);
    EXPECT_EQ(header.rfind("{\"z_i64\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                           "\"a_f32\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                           "\"b_f32\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]},"
                           "\"h\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[16,18]},"
                           "\"flag\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[18,21]}}",
                           0),
              0u)
        << header;
}

TEST(Safetensors, EveryLibTorchDtypeRoundTrips)
{
    TensorList tensors;
    for (auto st : {at::kBool, at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kHalf, at::kBFloat16,
                    at::kFloat, at::kDouble, at::kComplexFloat}) {
        at::Tensor t = (at::arange(12, at::kDouble).reshape({3, 4}) - 5).to(st);
        tensors.emplace_back(std::string("t_") + c10::toString(st), t);
    }
    tensors.emplace_back("scalar", at::scalar_tensor(3.5, at::kFloat));
    tensors.emplace_back("empty", at::zeros({0, 7}, at::kFloat));
    tensors.emplace_back("strided", at::arange(16, at::kFloat).reshape({4, 4}).t());
    std::string bytes = safetensors_bytes(tensors, nullptr);
    auto loaded = parse_safetensors(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(), "all");
    ASSERT_EQ(loaded.tensors.size(), tensors.size());
    for (const auto &[name, t] : tensors) {
        bool found = false;
        for (const auto &[n2, t2] : loaded.tensors)
            if (n2 == name) {
                found = true;
                EXPECT_EQ(t2.scalar_type(), t.scalar_type()) << name;
                EXPECT_TRUE(t2.equal(t)) << name;
            }
        EXPECT_TRUE(found) << name;
    }
    EXPECT_THROW(safetensors_bytes({{"c128", at::zeros({1}, at::kComplexDouble)}}, nullptr), accel::Error);
}

TEST(Safetensors, MalformedFilesAreDataLoss)
{
    const std::string good_header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    std::string good = file_of(good_header, std::string(8, '\0'));
    // Truncated: shorter than the length field, the header, or the data.
    expect_data_loss(good.substr(0, 5), {"shorter than the 8-byte header length"});
    expect_data_loss(good.substr(0, 20), {"truncated"});
    expect_data_loss(good.substr(0, good.size() - 1), {"tensor \"a\"", "out of range"});
    // Header too large.
    expect_data_loss(le64(100000001) + "{}", {"exceeds the limit"});
    // Not JSON / duplicate keys.
    expect_data_loss(file_of("{\"a\":", ""), {"invalid JSON"});
    expect_data_loss(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                             std::string(8, '\0')),
                     {"duplicate key \"a\""});
    // Overlapping offsets.
    expect_data_loss(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                             std::string(8, '\0')),
                     {"tensor \"b\"", "overlap tensor \"a\""});
    // Out of range.
    expect_data_loss(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", std::string(8, '\0')),
                     {"tensor \"a\"", "out of range"});
    // A hole.
    expect_data_loss(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", std::string(8, '\0')),
                     {"tensor \"a\"", "hole"});
    // Unknown dtype.
    expect_data_loss(file_of("{\"a\":{\"dtype\":\"F128\",\"shape\":[2],\"data_offsets\":[0,8]}}", std::string(8, '\0')),
                     {"tensor \"a\"", "unknown dtype \"F128\""});
    // Shape x dtype size != byte length.
    expect_data_loss(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", std::string(8, '\0')),
                     {"tensor \"a\"", "shape [3] x F32 is 12 bytes"});
    expect_data_loss(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,8]}}",
                             std::string(8, '\0')),
                     {"tensor \"a\"", "shape"});
    // Offsets reversed, negative shape, bad metadata.
    expect_data_loss(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", std::string(8, '\0')),
                     {"end before they begin"});
    expect_data_loss(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", std::string(8, '\0')),
                     {"not an unsigned integer"});
    expect_data_loss(file_of("{\"__metadata__\":{\"format\":1}}", ""), {"__metadata__"});
    EXPECT_NO_THROW(parse_safetensors(reinterpret_cast<const uint8_t *>(good.data()), good.size(), "good"));
}

TEST(Safetensors, SaveAndMapLoadFromFile)
{
    const std::string path = ::testing::TempDir() + "/accel_st_test.safetensors";
    TensorList tensors{{"w", at::randn({64, 32})}, {"b", at::randn({32}).to(at::kDouble)}};
    StringMap meta{{"format", "pt"}};
    save_safetensors(path, tensors, &meta);
    auto loaded = load_safetensors(path);
    ASSERT_TRUE(loaded.has_metadata);
    EXPECT_EQ(loaded.metadata, meta);
    ASSERT_EQ(loaded.tensors.size(), 2u);
    // b (F64) sorts before w (F32).
    EXPECT_EQ(loaded.tensors[0].first, "b");
    EXPECT_TRUE(loaded.tensors[0].second.equal(tensors[1].second));
    EXPECT_TRUE(loaded.tensors[1].second.equal(tensors[0].second));
    // Mapped copy-on-write: writing to a loaded tensor does not change the file.
    loaded.tensors[1].second.zero_();
    EXPECT_TRUE(load_safetensors(path).tensors[1].second.equal(tensors[0].second));
}
