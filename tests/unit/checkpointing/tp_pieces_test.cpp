// SHARDED_STATE_DICT under tensor parallelism (checkpointing/tp_pieces, parallel/tensor_parallel/sliced_source):
// the element ranges of a tp slice in the whole tensor agree with the slicing the plans apply (slice_parameter:
// column and row splits, GPT-2's fused [q | k | v] in 3 groups, a vocabulary padded up to the tp size), a folder
// of tp 2 x dp_shard 2 pieces written through add_sharded_files reads back whole, joins for merge-weights and
// reads as another tp size's slices (the padding rows zeros), and damaged tp metadata is DATA_LOSS, named.
// ~0.1 s.
#include "checkpointing/checkpointing.hpp"
#include "checkpointing/sharded_folder.hpp"
#include "checkpointing/tp_pieces.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "parallel/tensor_parallel/sliced_source.hpp"
#include "parallel/tensor_parallel/slicing.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fresh_dir.hpp"
#include "sharded_data_loss.hpp"

#include <unistd.h>

#include <string>

using namespace accel;
using namespace accel::ckpt;
namespace tp = accel::parallel::tp;

namespace {

struct Case {
    std::vector<int64_t> shape;
    int64_t dim, groups, size;
};
// Column (dim 0) and row (dim 1) splits, c_attn's 3 groups on either layout, a vocabulary of 11 over 2 and 4
// ranks (padded to 12), a 1-D bias, a 3-D tensor split in the middle.
const std::vector<Case> kCases = {{{8, 3}, 0, 1, 2}, {{3, 8}, 1, 1, 4}, {{12, 5}, 0, 3, 2}, {{5, 12}, 1, 3, 2},
                                  {{11, 4}, 0, 1, 2}, {{11, 4}, 0, 1, 4}, {{10}, 0, 1, 4},  {{2, 6, 3}, 1, 1, 3}};

std::vector<uint64_t> u(const std::vector<int64_t> &s) { return {s.begin(), s.end()}; }
TpSplit split(const Case &c) { return {c.dim, static_cast<uint64_t>(c.groups), static_cast<uint64_t>(c.size)}; }
tp::ParameterSlicing slicing(const Case &c) { return {c.dim, c.groups, c.shape[static_cast<size_t>(c.dim)]}; }
at::Tensor whole_of(const Case &c)
{
    int64_t n = 1;
    for (int64_t d : c.shape) n *= d;
    return at::arange(1, n + 1, at::kFloat).view(c.shape); // no zeros: a padding row read as data would show
}

} // namespace

TEST(TpPieces, SliceRangesMatchThePlansSlicing)
{
    for (const Case &c : kCases) {
        const at::Tensor whole = whole_of(c);
        SCOPED_TRACE(c10::str(whole.sizes(), " dim ", c.dim, " groups ", c.groups, " size ", c.size));
        ASSERT_TRUE(tp_split_problem(u(c.shape), split(c)).empty());
        std::vector<at::Tensor> slices;
        for (int64_t r = 0; r < c.size; ++r) slices.push_back(tp::slice_parameter(whole, slicing(c), r, c.size).reshape({-1}));
        for (int64_t r = 0; r < c.size; ++r) {
            EXPECT_EQ(tp_slice_shape(u(c.shape), split(c)), u(tp::slice_parameter(whole, slicing(c), r, c.size).sizes().vec()));
            // Every range of the slice, from the whole tensor (padding: zeros, as slice_parameter pads).
            const int64_t n = slices[static_cast<size_t>(r)].numel();
            for (int64_t a = 0; a < n; a += 3)
                for (int64_t len : {int64_t{1}, int64_t{4}, n - a}) {
                    if (a + len > n) continue;
                    at::Tensor got = at::full({len}, -1.0f);
                    int64_t at = 0;
                    slice_to_whole_runs(u(c.shape), split(c), static_cast<uint64_t>(r), static_cast<uint64_t>(a),
                                        static_cast<uint64_t>(len), [&](std::optional<uint64_t> from, uint64_t count) {
                                            got.narrow(0, at, static_cast<int64_t>(count))
                                                .copy_(from ? whole.reshape({-1}).narrow(0, static_cast<int64_t>(*from), static_cast<int64_t>(count))
                                                            : at::zeros({static_cast<int64_t>(count)}));
                                            at += static_cast<int64_t>(count);
                                        });
                    EXPECT_EQ(at, len);
                    EXPECT_TRUE(at::equal(got, slices[static_cast<size_t>(r)].narrow(0, a, len))) << "rank " << r << " [" << a << ", +" << len << ")";
                }
        }
        // Every range of the whole tensor, from the slices.
        const int64_t n = whole.numel();
        for (int64_t a = 0; a < n; a += 2) {
            at::Tensor got = at::full({n - a}, -1.0f);
            int64_t at = 0;
            whole_to_slice_runs(u(c.shape), split(c), static_cast<uint64_t>(a), static_cast<uint64_t>(n - a),
                                [&](uint64_t r, uint64_t off, uint64_t count) {
                                    got.narrow(0, at, static_cast<int64_t>(count))
                                        .copy_(slices[r].narrow(0, static_cast<int64_t>(off), static_cast<int64_t>(count)));
                                    at += static_cast<int64_t>(count);
                                });
            EXPECT_TRUE(at::equal(got, whole.reshape({-1}).narrow(0, a, n - a))) << "from " << a;
        }
    }
}

namespace {

// A tp 2 x dp_shard 2 save (4 processes, tp fastest) of "w" (c_attn-like: [12, 5] in 3 groups on dim 0), "v" (a
// vocabulary of 11 rows, padded to 12) and "b" (replicated), each rank's pieces its dp shard's half of its slice
// (the sharding engine's layout, alike on every tp rank), through add_sharded_files. Returns the whole tensors.
std::map<std::string, at::Tensor> write_tp_folder(const std::string &dir)
{
    const Case w{{12, 5}, 0, 3, 2}, v{{11, 4}, 0, 1, 2};
    std::map<std::string, at::Tensor> whole{{"w", whole_of(w)}, {"v", whole_of(v) * 10}, {"b", at::arange(6, at::kFloat)}};
    TpSave tp;
    tp.size = 2;
    tp.split["w"] = {split(w), 12};
    tp.split["v"] = {split(v), 11};
    std::string metadata;
    for (int32_t process = 0; process < 4; ++process) {
        const int32_t tp_rank = process % 2, shard = process / 2;
        tp.rank = tp_rank;
        ShardedState st;
        st.world_size = 2;
        st.rank = shard;
        for (const auto &[name, t] : whole) {
            ShardedTensor e;
            e.name = name;
            const bool is_split = name != "b";
            const at::Tensor mine = is_split ? tp::slice_parameter(t, slicing(name == "w" ? w : v), tp_rank, 2) : t;
            e.shape = mine.sizes().vec();
            const int64_t half = mine.numel() / 2;
            e.pieces = {{0, 0, half}, {1, half, mine.numel() - half}};
            e.local = mine.reshape({-1}).narrow(0, shard == 0 ? 0 : half, shard == 0 ? half : mine.numel() - half);
            st.tensors.push_back(e);
        }
        std::vector<CheckpointFile> files;
        add_sharded_files(files, "f", st, process, process == 0, &tp);
        for (const auto &f : files) {
            if (f.tensors) save_safetensors(join(dir, f.name.substr(2)), *f.tensors, nullptr);
            if (f.bytes) metadata = *f.bytes;
        }
    }
    write_file_durably(join(dir, kShardedMetadata), metadata.data(), metadata.size());
    return whole;
}

} // namespace

TEST(TpPieces, FolderOfSlicePiecesReadsOnAnyMesh)
{
    const std::string dir = fresh_dir("folder");
    const auto whole = write_tp_folder(dir);
    // Only tp rank 0 wrote the replicated "b"; the whole shapes are listed, the padding row nowhere.
    const ShardedFolder folder(dir);
    EXPECT_EQ(folder.meta().world_size, 4);
    EXPECT_EQ(folder.meta().tensors[static_cast<size_t>(folder.find("v"))].shape, (std::vector<uint64_t>{11, 4}));
    EXPECT_EQ(folder.meta().tensors[static_cast<size_t>(folder.find("b"))].pieces.size(), 2u);
    // One process (or FSDP without tp): whole tensors.
    for (const auto &[name, t] : read_sharded_tensors(dir)) EXPECT_TRUE(at::equal(t, whole.at(name))) << name;
    // merge-weights: the whole tensors' bytes.
    for (const auto &[name, t] : whole) {
        std::string bytes;
        for (const auto &[data, len] : folder.whole_spans(static_cast<size_t>(folder.find(name))))
            bytes.append(reinterpret_cast<const char *>(data), len);
        EXPECT_EQ(bytes, std::string(static_cast<const char *>(t.data_ptr()), t.nbytes())) << name;
    }
    // tp 4 (or tp 2 again): each rank's slices by range, the vocabulary's padding rows zeros.
    for (int64_t size : {2, 4}) {
        std::map<std::string, tp::ParameterSlicing> by_name{{"w", {0, 3, 12}}, {"v", {0, 1, 11}}};
        if (size == 4) by_name.erase("w"); // 12 rows in 3 groups do not split over 4: left whole
        for (int64_t r = 0; r < size; ++r) {
            const ShardedSource src = tp::sliced_source(sharded_source(dir), tp::model_slicing(by_name), r, size);
            for (const auto &[name, t] : read_source_tensors(src)) {
                auto it = by_name.find(name);
                const at::Tensor want = it == by_name.end() ? whole.at(name) : tp::slice_parameter(whole.at(name), it->second, r, size);
                EXPECT_TRUE(at::equal(t, want)) << name << " at tp rank " << r << " of " << size;
            }
        }
    }
    remove_all(dir);
}

TEST(TpPieces, DamagedTpMetadataIsNamed)
{
    const std::string dir = fresh_dir("damaged");
    write_tp_folder(dir);
    const std::string good = read_small_file(join(dir, kShardedMetadata), 1u << 20);
    auto expect = [&](const std::string &from, const std::string &to, const std::string &fragment) {
        std::string text = good;
        const size_t at = text.find(from);
        ASSERT_NE(at, std::string::npos) << from;
        text.replace(at, from.size(), to);
        write_file_durably(join(dir, kShardedMetadata), text.data(), text.size());
        expect_data_loss(dir, fragment);
    };
    expect("\"version\": 2", "\"version\": 1", ".tp in a version 1 folder");
    expect("\"version\": 2", "\"version\": 3", "\"version\" is not 1 or 2");
    expect("\"tp\": {\"dim\": 0, \"groups\": 3", "\"tp\": {\"dim\": 2, \"groups\": 3", "is not a dimension of its shape");
    expect("\"tp\": {\"dim\": 0, \"groups\": 3", "\"tp\": {\"dim\": 0, \"groups\": 5", "does not split into 5 x 2 equal parts");
    expect("\"groups\": 3, \"size\": 2", "\"groups\": 3, \"size\": 0", "out of range");
    expect("[1, 1, 0, ", "[1, 2, 0, ", "a piece of tp rank 2 >= tp size 2");
    expect("[1, 1, 0, ", "[1, 0, 0, ", "do not cover its tp slices' 24 elements exactly once");
    expect("[0, 0, 0, ", "[0, 0, ", "holds other than [rank, tp_rank, offset, numel]");
    remove_all(dir);
}
