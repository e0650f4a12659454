// big_modeling/offload_folder: Accelerate's offload folder (index.json + <name>.dat) written and read back, index
// merging, and damaged folders refused by name. Interchange with the real Accelerate: python.offload_interchange.
#include "big_modeling/offload_folder.hpp"
#include "catch_error.hpp"
#include "common/files.hpp"

#include <ATen/ATen.h>

#include <fstream>
#include <unistd.h>

#include <gtest/gtest.h>

using namespace accel::big_modeling;

namespace {

std::string fresh_dir(const std::string &name)
{
    const std::string dir = ::testing::TempDir() + "/accel_offload_" + name + "_" + std::to_string(getpid());
    accel::remove_all(dir);
    return dir;
}

void write_text(const std::string &path, const std::string &text) { std::ofstream(path) << text; }

#define EXPECT_CODE(stmt, code_, part_)                                                                                \
    do {                                                                                                               \
        accel::Error e_ = catch_error([&] { stmt; });                                                                  \
        EXPECT_EQ(e_.code(), code_) << e_.what();                                                                      \
        EXPECT_NE(std::string(e_.what()).find(part_), std::string::npos) << e_.what();                                \
    } while (0)

} // namespace

TEST(OffloadFolder, RoundTripsEveryDtypeBitForBit)
{
    const std::string dir = fresh_dir("roundtrip");
    at::manual_seed(3);
    std::vector<std::pair<std::string, at::Tensor>> tensors{
        {"a.weight", at::randn({4, 3})},
        {"a.bias", at::randn({3}).to(at::kBFloat16)},
        {"b.half", at::randn({2, 2}).to(at::kHalf)},
        {"b.ids", at::arange(5, at::kLong)},
        {"b.mask", at::rand({6}) > 0.5},
        {"b.scalar", at::scalar_tensor(2.5, at::kDouble)},
        {"b.empty", at::empty({0, 4})},
        {"b.strided", at::randn({3, 4}).t()}, // written in C order, as numpy does
    };
    offload_state_dict(dir, tensors);
    OffloadFolder f(dir);
    ASSERT_EQ(f.entries().size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        EXPECT_EQ(f.entries()[i].name, tensors[i].first);
        at::Tensor got = f.load(tensors[i].first);
        EXPECT_EQ(got.scalar_type(), tensors[i].second.scalar_type()) << tensors[i].first;
        EXPECT_TRUE(got.equal(tensors[i].second)) << tensors[i].first;
    }
    EXPECT_EQ(f.find("b.scalar")->shape.size(), 0u);
    // load_into converts the dtype and fills a strided destination.
    at::Tensor dst = at::zeros({3, 4}, at::kDouble).t();
    f.load_into("a.weight", dst);
    EXPECT_TRUE(dst.equal(tensors[0].second.to(at::kDouble)));
    EXPECT_CODE(f.load_into("a.weight", at::zeros({3, 4})), ACCEL_ERR_INVALID_ARGUMENT, "a.weight");
    EXPECT_CODE(f.load("nope"), ACCEL_ERR_NOT_FOUND, "nope");
    accel::remove_all(dir);
}

TEST(OffloadFolder, MergesIntoAnExistingIndexAsSaveOffloadIndexDoes)
{
    const std::string dir = fresh_dir("merge");
    offload_state_dict(dir, {{"x", at::ones({2})}, {"y", at::ones({1})}});
    offload_state_dict(dir, {{"y", at::zeros({3}, at::kInt)}, {"z", at::ones({1})}});
    OffloadFolder f(dir);
    ASSERT_EQ(f.entries().size(), 3u);
    EXPECT_EQ(f.entries()[0].name, "x");
    EXPECT_EQ(f.entries()[1].name, "y");
    EXPECT_EQ(f.entries()[2].name, "z");
    EXPECT_TRUE(f.load("y").equal(at::zeros({3}, at::kInt)));
    accel::remove_all(dir);
}

TEST(OffloadFolder, WritesIndexJsonAsJsonDumpIndent2)
{
    std::vector<OffloadEntry> e{{"a", at::kBFloat16, {2, 3}}, {"b", at::kBool, {}}};
    EXPECT_EQ(offload_index_json(e), "{\n  \"a\": {\n    \"dtype\": \"bfloat16\",\n    \"shape\": [\n      2,\n      3\n"
                                     "    ]\n  },\n  \"b\": {\n    \"dtype\": \"bool\",\n    \"shape\": []\n  }\n}");
    EXPECT_EQ(offload_index_json({}), "{}");
}

TEST(OffloadFolder, RefusesDamagedFoldersNamingTheFile)
{
    const std::string dir = fresh_dir("damaged");
    offload_state_dict(dir, {{"w", at::ones({4})}});
    const std::string dat = dir + "/w.dat", index = dir + "/index.json";
    // Truncated .dat
    ASSERT_EQ(::truncate(dat.c_str(), 7), 0);
    EXPECT_CODE(OffloadFolder{dir}, ACCEL_ERR_DATA_LOSS, dat);
    // Missing .dat
    ::unlink(dat.c_str());
    EXPECT_CODE(OffloadFolder{dir}, ACCEL_ERR_DATA_LOSS, dat);
    // Broken or wrong index.json
    for (const char *text : {"{", "[]", R"({"w": {"dtype": "float8", "shape": [4]}})",
                             R"({"w": {"dtype": "float32", "shape": [-4]}})", R"({"w": {"dtype": "float32"}})",
                             R"({"../w": {"dtype": "float32", "shape": [4]}})",
                             R"({"w": {"dtype": "float32", "shape": [4], "extra": 1}})",
                             R"({"w": {"dtype": "float32", "shape": [4294967296, 4294967296]}})"}) {
        write_text(index, text);
        EXPECT_CODE(OffloadFolder{dir}, ACCEL_ERR_DATA_LOSS, index);
    }
    write_text(index, R"({"w": {"safetensors_file": "m.safetensors", "weight_name": "w"}})");
    EXPECT_CODE(OffloadFolder{dir}, ACCEL_ERR_UNIMPLEMENTED, "safetensors_file");
    ::unlink(index.c_str());
    EXPECT_CODE(OffloadFolder{dir}, ACCEL_ERR_NOT_FOUND, index);
    EXPECT_CODE(OffloadFolder{dir + "/none"}, ACCEL_ERR_NOT_FOUND, "none");
    EXPECT_CODE(offload_state_dict(dir, {{"a/b", at::ones({1})}}), ACCEL_ERR_INVALID_ARGUMENT, "a/b");
    EXPECT_CODE(offload_dtype_name(at::kQInt8, "q"), ACCEL_ERR_INVALID_ARGUMENT, "q");
    accel::remove_all(dir);
}
