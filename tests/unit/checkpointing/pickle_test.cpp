// torch.save archives written and read by accel (pickle structure + storage records).
#include "checkpointing/checkpointing.hpp"
#include "common/files.hpp"
#include "checkpointing/torch_archive.hpp"
#include "common/error.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>

using namespace accel;
using namespace accel::ckpt;

TEST(TorchArchive, RoundTripsNestedStructures)
{
    const std::string path = ::testing::TempDir() + "/accel_pickle_test.bin";
    at::Tensor big = at::randn({5, 7});
    auto root = py_dict();
    py_set(*root, "int", py_int(-123456789012345LL));
    py_set(*root, "small", py_int(7));
    py_set(*root, "neg", py_int(-1));
    py_set(*root, "f", py_float(0.1));
    py_set(*root, "s", py_str("héllo"));
    py_set(*root, "b", py_bytes(std::string("\0\1\2\xff", 4)));
    py_set(*root, "none", py_none());
    py_set(*root, "t", py_bool(true));
    py_set(*root, "tuple", py_tuple({py_float(0.9), py_float(0.999)}));
    py_set(*root, "list", py_list({py_int(0), py_int(1), py_int(70000)}));
    py_set(*root, "view", py_tensor(big.t()));  // non-contiguous view of the same storage
    py_set(*root, "same", py_tensor(big));
    py_set(*root, "od", py_ordered_dict({{py_str("x"), py_tensor(at::arange(3, at::kLong))}}));
    auto intkeys = py_dict();
    intkeys->map.emplace_back(py_int(0), py_tensor(at::scalar_tensor(2.0)));
    py_set(*root, "state", intkeys);
    save_torch_file(path, *root);

    PyRef back = load_torch_file(path);
    ASSERT_TRUE(back->is_dict());
    EXPECT_EQ(back->get("int")->i, -123456789012345LL);
    EXPECT_EQ(back->get("small")->i, 7);
    EXPECT_EQ(back->get("neg")->i, -1);
    EXPECT_EQ(back->get("f")->f, 0.1);
    EXPECT_EQ(back->get("s")->s, "héllo");
    EXPECT_EQ(back->get("b")->s, std::string("\0\1\2\xff", 4));
    EXPECT_EQ(back->get("none")->kind, PyObj::Kind::None);
    EXPECT_TRUE(back->get("t")->b);
    EXPECT_EQ(back->get("tuple")->items.size(), 2u);
    EXPECT_EQ(back->get("list")->items[2]->i, 70000);
    EXPECT_TRUE(back->get("view")->tensor.equal(big.t()));
    EXPECT_TRUE(back->get("same")->tensor.equal(big));
    EXPECT_EQ(back->get("od")->kind, PyObj::Kind::OrderedDict);
    EXPECT_TRUE(back->get("od")->get("x")->tensor.equal(at::arange(3, at::kLong)));
    EXPECT_EQ(back->get("state")->get_int_key(0)->tensor.item<double>(), 2.0);
}

TEST(TorchArchive, CorruptFilesAreDataLoss)
{
    const std::string path = ::testing::TempDir() + "/accel_pickle_bad.bin";
    auto root = py_dict();
    py_set(*root, "w", py_tensor(at::randn({100})));
    save_torch_file(path, *root);
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t cut : {size_t(10), bytes.size() / 2, bytes.size() - 10}) {
        std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(cut));
        try {
            load_torch_file(path);
            ADD_FAILURE() << "truncated at " << cut << " loaded";
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_DATA_LOSS) << e.what();
        }
    }
    // A list that holds itself (BINPUT 0, BINGET 0, APPEND; found by fuzzing as a leak) is refused.
    static const char kCycle[] = "\x80\x02]q\0h\0a.";
    const std::string cycle(kCycle, sizeof kCycle - 1);
    try {
        pickle_loads(reinterpret_cast<const uint8_t *>(cycle.data()), cycle.size(),
                     [](const std::string &, at::ScalarType, int64_t) -> at::Tensor { return {}; }, "cycle");
        ADD_FAILURE();
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_DATA_LOSS);
        EXPECT_NE(std::string(e.what()).find("holds itself"), std::string::npos) << e.what();
    }
    // Garbage pickle bytes must not crash: unsupported globals are rejected.
    static const char kEvil[] = "\x80\x02" "cos\nsystem\n(X\x02\0\0\0lst" "R.";
    const std::string evil(kEvil, sizeof kEvil - 1); // holds NUL bytes
    try {
        pickle_loads(reinterpret_cast<const uint8_t *>(evil.data()), evil.size(),
                     [](const std::string &, at::ScalarType, int64_t) -> at::Tensor { return {}; }, "evil");
        ADD_FAILURE();
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_DATA_LOSS);
        EXPECT_NE(std::string(e.what()).find("unsupported global \"os.system\""), std::string::npos) << e.what();
    }
}

TEST(Checkpointing, FirstNumberAndRotationOrder)
{
    EXPECT_EQ(first_number("checkpoint_10"), 10);
    EXPECT_EQ(first_number("ckpt3_v7"), 3);
    EXPECT_FALSE(first_number("latest").has_value());
    const std::string base = ::testing::TempDir() + "/accel_rotation";
    remove_all(base);
    for (const char *n : {"checkpoint_10", "checkpoint_9", "checkpoint_2", ".checkpoint_11.accel-tmp", "notes"})
        make_dirs(base + "/" + n);
    EXPECT_EQ(sorted_checkpoints(base), (std::vector<std::string>{"checkpoint_2", "checkpoint_9", "checkpoint_10"}));
}

TEST(Checkpointing, ShardPlanFollowsHuggingFaceRules)
{
    // Limit 10 "GB" scaled to bytes: sizes [6,6,2,6,2,2] -> [6], [6+2], [6+2+2].
    TensorList t;
    for (int64_t n : {6, 6, 2, 6, 2, 2}) t.emplace_back("t" + std::to_string(t.size()), at::zeros({n}, at::kByte));
    ShardPlan p = plan_shards(t, 10);
    ASSERT_EQ(p.shards.size(), 3u);
    EXPECT_EQ(p.shards[0], (std::vector<size_t>{0}));
    EXPECT_EQ(p.shards[1], (std::vector<size_t>{1, 2}));
    EXPECT_EQ(p.shards[2], (std::vector<size_t>{3, 4, 5}));
    EXPECT_EQ(p.total_size, 24u);
    // A tensor above the limit gets its own shard; tied tensors are counted once and follow their storage.
    at::Tensor shared = at::zeros({4}, at::kByte);
    TensorList u{{"a", at::zeros({3}, at::kByte)}, {"huge", at::zeros({20}, at::kByte)}, {"s1", shared}, {"s2", shared}};
    ShardPlan q = plan_shards(u, 8);
    ASSERT_EQ(q.shards.size(), 2u);
    EXPECT_EQ(q.shards[0], (std::vector<size_t>{1}));
    EXPECT_EQ(q.shards[1], (std::vector<size_t>{0, 2, 3}));
    EXPECT_EQ(q.total_size, 27u);
}

TEST(Checkpointing, IndexJsonFormat)
{
    EXPECT_EQ(index_json(123, {{"layer.1.w", "model-00002-of-00002.safetensors"}, {"layer.0.w", "model-00001-of-00002.safetensors"}}),
              "{\n  \"metadata\": {\n    \"total_size\": 123\n  },\n  \"weight_map\": {\n"
              "    \"layer.0.w\": \"model-00001-of-00002.safetensors\",\n"
              "    \"layer.1.w\": \"model-00002-of-00002.safetensors\"\n  }\n}\n");
}
