// checkpointing/sharded_folder: a SHARDED_STATE_DICT folder written through add_sharded_files' formats reads
// back whole (pieces from several ranks assembled), and every way its metadata or rank files can be wrong is
// DATA_LOSS naming the file.
#include "checkpointing/checkpointing.hpp"
#include "checkpointing/sharded_folder.hpp"
#include "common/error.hpp"
#include "common/files.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fresh_dir.hpp"
#include "sharded_data_loss.hpp"

#include <unistd.h>

#include <string>

using namespace accel;
using namespace accel::ckpt;

namespace {

// A 3 x 4 tensor "w" cut at element 5 between two ranks, and "b" (3 elements) whole on rank 1.
void write_folder(const std::string &dir, const std::string &metadata)
{
    const at::Tensor w = at::arange(12, at::kFloat), b = at::arange(100, 103, at::kFloat);
    StringMap meta{{"format", "pt"}};
    save_safetensors(join(dir, sharded_rank_file(0)), {{"w", w.narrow(0, 0, 5)}}, &meta);
    save_safetensors(join(dir, sharded_rank_file(1)), {{"w", w.narrow(0, 5, 7)}, {"b", b}}, &meta);
    write_file_durably(join(dir, kShardedMetadata), metadata.data(), metadata.size());
}

std::string metadata(const std::string &w_pieces, const std::string &format = kShardedFormat)
{
    return "{\"format\": \"" + format + "\", \"version\": 1, \"world_size\": 2, \"tensors\": ["
           "{\"name\": \"w\", \"dtype\": \"F32\", \"shape\": [3, 4], \"pieces\": " + w_pieces + "},"
           "{\"name\": \"b\", \"dtype\": \"F32\", \"shape\": [3], \"pieces\": [[1, 0, 3]]}]}";
}

} // namespace

TEST(ShardedFolder, AssemblesPiecesFromEveryRank)
{
    const std::string dir = fresh_dir("ok");
    write_folder(dir, metadata("[[0, 0, 5], [1, 5, 7]]"));
    TensorList t = read_sharded_tensors(dir);
    ASSERT_EQ(t.size(), 2u);
    EXPECT_EQ(t[0].first, "w");
    EXPECT_TRUE(at::equal(t[0].second, at::arange(12, at::kFloat).view({3, 4})));
    EXPECT_EQ(t[1].first, "b");
    EXPECT_TRUE(at::equal(t[1].second, at::arange(100, 103, at::kFloat)));
    // The metadata writer's output parses back to the same description.
    ShardedMeta m = ShardedFolder(dir).meta();
    write_file_durably(join(dir, kShardedMetadata), sharded_metadata_json(m).data(), sharded_metadata_json(m).size());
    EXPECT_EQ(read_sharded_tensors(dir).size(), 2u);
    remove_all(dir);
}

TEST(ShardedFolder, BadMetadataAndFilesAreNamed)
{
    const std::string dir = fresh_dir("bad");
    write_folder(dir, metadata("[[0, 0, 5], [1, 5, 6]]")); // one element short
    expect_data_loss(dir, "do not cover its 12 elements exactly once");
    write_folder(dir, metadata("[[0, 0, 6], [1, 5, 7]]")); // overlapping
    expect_data_loss(dir, "do not cover");
    write_folder(dir, metadata("[[0, 0, 5], [2, 5, 7]]")); // a rank past world_size
    expect_data_loss(dir, "world_size");
    write_folder(dir, metadata("[[0, 0, 5], [1, 5, 7]]", "something.else"));
    expect_data_loss(dir, "not a sharded state dict written by accel");
    write_folder(dir, metadata("[[0, 0, 7], [1, 7, 5]]")); // pieces that are not the files' sizes
    expect_data_loss(dir, "rank0.safetensors: tensor \"w\" is not the 7 elements");
    write_folder(dir, metadata("[[0, 0, 5], [1, 5, 7]]"));
    ::truncate(join(dir, sharded_rank_file(1)).c_str(), 40);
    expect_data_loss(dir, sharded_rank_file(1));
    write_folder(dir, metadata("[[0, 0, 5], [1, 5, 7]]"));
    ::unlink(join(dir, sharded_rank_file(0)).c_str());
    expect_data_loss(dir, "rank0.safetensors\" is missing");
    ::unlink(join(dir, kShardedMetadata).c_str());
    expect_data_loss(dir, "metadata.json\" is missing");
    write_folder(dir, "{\"format\": ");
    expect_data_loss(dir, "metadata.json");
    remove_all(dir);
}
