// SHARDED_STATE_DICT of a GPT split by tensor parallelism (parallel/tensor_parallel/sliced_source, checkpointing's
// TpSave): each of 2 thread ranks writes its slices as pieces (the plan's splits: c_attn in 3 groups, the vocabulary
// of 37 padded to 38), and the folder reads back as one process's weights, and as tp 4's slices (37 padded to 40)
// equal to the plan's own at tp 4; optimizer state not shaped as its parameter's slice is refused by name. ~0.3 s.
#include "catch_error.hpp"
#include "checkpointing/checkpointing.hpp"
#include "checkpointing/safetensors.hpp"
#include "common/files.hpp"
#include "distributed/communicator.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/gpt_model.hpp"
#include "model/model.hpp"
#include "parallel/tensor_parallel/sliced_source.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;

namespace {

const char *kGpt = R"({"type": "gpt", "vocab_size": 37, "n_positions": 8, "n_embd": 16, "n_layer": 1, "n_head": 4})";

std::shared_ptr<accel::Model> gpt()
{
    // Thread ranks share LibTorch's default generator: one build at a time, each from the same seed (two builds
    // drawing at once interleave their draws; the sanitizer build's timing made them differ).
    static std::mutex building;
    std::lock_guard<std::mutex> lock(building);
    at::manual_seed(61);
    return accel::make_model_from_json(kGpt);
}

// This rank's parameters as a sharded state (one dp shard: each tensor one piece of its slice).
accel::ShardedState state_of(const accel::Model &m)
{
    accel::ShardedState st;
    for (const auto &[name, t] : m.state_dict(true)) {
        accel::ShardedTensor e;
        e.name = name;
        e.shape = t.sizes().vec();
        e.pieces = {{0, 0, t.numel()}};
        e.local = t.detach().reshape({-1});
        st.tensors.push_back(e);
    }
    return st;
}

} // namespace

TEST(TensorParallelSharded, GptSlicesReadWholeAndAtAnotherTpSize)
{
    const std::string dir = ::testing::TempDir() + "/accel_tp_sharded_" + std::to_string(getpid());
    if (accel::exists(dir)) accel::remove_all(dir);
    accel::make_dirs(dir);
    const auto whole = gpt()->state_dict(true);
    std::mutex files_mutex;
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &comm) {
        auto model = gpt();
        auto &m = dynamic_cast<accel::GptModel &>(*model);
        m.apply_tensor_parallel(comm);
        const auto by_name = tp::slicing_by_name(m);
        for (const auto &entry : m.tensor_parallel_slicing()) EXPECT_EQ(by_name.count(entry.first), 1u) << entry.first;
        const accel::ShardedState st = state_of(m);
        const accel::ckpt::TpSave save = tp::tp_save(m, st, tp::model_slicing(by_name));
        EXPECT_EQ(save.split.size(), m.tensor_parallel_slicing().size());
        std::vector<accel::ckpt::CheckpointFile> files;
        accel::ckpt::add_sharded_files(files, "f", st, comm->rank(), comm->rank() == 0, &save);
        std::lock_guard<std::mutex> lock(files_mutex);
        for (const auto &f : files) {
            const std::string path = accel::join(dir, f.name.substr(2));
            if (f.tensors) accel::ckpt::save_safetensors(path, *f.tensors, nullptr);
            if (f.bytes) accel::write_file_durably(path, f.bytes->data(), f.bytes->size());
        }
        // Factored moments of a split parameter (not shaped as its slice): refused by name, not saved wrongly.
        const std::string split_name = m.tensor_parallel_slicing().begin()->first;
        accel::ShardedState odd;
        accel::ShardedTensor moment;
        moment.name = "state.0.exp_avg";
        moment.shape = {3};
        odd.tensors.push_back(moment);
        const accel::Error e = catch_error([&] { tp::tp_save(m, odd, tp::optimizer_slicing(by_name, {split_name}, "save_state")); });
        EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED) << e.what();
        EXPECT_NE(std::string(e.what()).find("state.0.exp_avg"), std::string::npos) << e.what();
    });
    // One process: the whole weights, the padding rows nowhere.
    const accel::TensorList read = accel::ckpt::read_sharded_tensors(dir);
    ASSERT_EQ(read.size(), whole.size());
    for (size_t i = 0; i < read.size(); ++i) {
        EXPECT_EQ(read[i].first, whole[i].first);
        EXPECT_TRUE(at::equal(read[i].second, whole[i].second)) << read[i].first;
    }
    // tp 4: each rank's slices by range, as the plan cuts them at tp 4.
    dist::run_on_threads(4, [&](const std::shared_ptr<dist::Communicator> &comm) {
        auto model = gpt();
        auto &m = dynamic_cast<accel::GptModel &>(*model);
        m.apply_tensor_parallel(comm);
        const accel::ShardedSource src = tp::sliced_source(accel::ckpt::sharded_source(dir),
                                                           tp::model_slicing(tp::slicing_by_name(m)), comm->rank(), 4);
        for (const auto &[name, t] : accel::ckpt::read_source_tensors(src)) {
            const at::Tensor *mine = m.find_tensor(name);
            ASSERT_NE(mine, nullptr) << name;
            ASSERT_EQ(t.sizes(), mine->sizes()) << name << " at tp rank " << comm->rank();
            EXPECT_TRUE(at::equal(t, *mine)) << name << " at tp rank " << comm->rank();
        }
    });
    accel::remove_all(dir);
}
