// The fast checkpoint I/O paths: file-backed tensors read with pread into their destination (CopyBatch),
// concurrent jobs, concurrent removal of a checkpoint folder, and early writeback in OutFile.
#include "common/files.hpp"
#include "checkpointing/mapped_tensor.hpp"
#include "common/job_pool.hpp"
#include "checkpointing/safetensors.hpp"
#include "checkpointing/torch_archive.hpp"
#include "common/error.hpp"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <unistd.h>

using namespace accel;
using namespace accel::ckpt;

namespace {
std::string temp_path(const std::string &name) { return ::testing::TempDir() + "/" + name; }
} // namespace

TEST(CheckpointIo, CopyBatchReadsFileBackedTensorsIntoDestinations)
{
    const std::string path = temp_path("accel_copybatch.safetensors");
    // Big enough for several pieces and threads; plus a small tensor, a dtype conversion and a view.
    at::Tensor big = at::randn({3 * 1024 * 1024 + 5}); // 12 MiB + 20 bytes
    at::Tensor small = at::arange(10, at::kDouble);
    save_safetensors(path, {{"big", big}, {"small", small}}, nullptr);
    auto loaded = load_safetensors(path);
    ASSERT_EQ(loaded.tensors.size(), 2u);
    const at::Tensor &lbig = loaded.tensors[1].second;   // F32 after F64 in the file order
    const at::Tensor &lsmall = loaded.tensors[0].second;

    at::Tensor dst_big = at::zeros_like(big);
    at::Tensor dst_small_f32 = at::zeros({10}, at::kFloat); // copy_ with conversion
    at::Tensor dst_view = at::zeros({10, 2}, at::kDouble);  // non-contiguous destination: copy_
    const auto version = dst_big.unsafeGetTensorImpl()->version_counter().current_version();
    CopyBatch batch;
    batch.add(dst_big, lbig);
    batch.add(dst_small_f32, lsmall);
    batch.add(dst_view.select(1, 1), lsmall);
    EXPECT_EQ(batch.size(), 3u);
    batch.run();
    EXPECT_EQ(batch.size(), 0u);
    EXPECT_TRUE(dst_big.equal(big));
    EXPECT_TRUE(dst_small_f32.equal(small.to(at::kFloat)));
    EXPECT_TRUE(dst_view.select(1, 1).equal(small));
    EXPECT_TRUE(dst_view.select(1, 0).equal(at::zeros({10}, at::kDouble)));
    // pread bypasses copy_, so the version counter is bumped explicitly (autograd's in-place check).
    EXPECT_GT(dst_big.unsafeGetTensorImpl()->version_counter().current_version(), version);
}

TEST(CheckpointIo, CopyBatchReadsTorchArchiveStoragesAtTheirOffset)
{
    const std::string path = temp_path("accel_copybatch.bin");
    at::Tensor storage = at::randn({4096});
    auto root = py_dict();
    py_set(*root, "tail", py_tensor(storage.narrow(0, 1000, 3000))); // a view at a storage offset
    save_torch_file(path, *root);
    PyRef back = load_torch_file(path);
    const at::Tensor &view = back->get("tail")->tensor;
    at::Tensor dst = at::empty({3000});
    CopyBatch batch;
    batch.add(dst, view);
    batch.run();
    EXPECT_TRUE(dst.equal(storage.narrow(0, 1000, 3000)));
}

TEST(CheckpointIo, FileCutShortAfterValidationIsDataLoss)
{
    const std::string path = temp_path("accel_copybatch_cut.safetensors");
    at::Tensor t = at::randn({1024});
    save_safetensors(path, {{"t", t}}, nullptr);
    auto loaded = load_safetensors(path);
    ASSERT_EQ(::truncate(path.c_str(), 100), 0); // the map is never touched, so no SIGBUS
    at::Tensor dst = at::zeros({1024});
    CopyBatch batch;
    batch.add(dst, loaded.tensors[0].second);
    try {
        batch.run();
        ADD_FAILURE() << "no error";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_DATA_LOSS) << e.what();
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

TEST(CheckpointIo, RunJobsRunsEveryJobAndRethrowsTheFirstError)
{
    std::atomic<int> ran{0};
    std::vector<std::function<void()>> jobs;
    for (int i = 0; i < 9; ++i)
        jobs.emplace_back([&ran, i] {
            ++ran;
            if (i == 3) throw std::runtime_error("job 3");
            if (i == 6) throw std::runtime_error("job 6");
        });
    for (size_t threads : {size_t(1), size_t(3)}) {
        ran = 0;
        try {
            run_jobs(jobs, threads);
            ADD_FAILURE() << "no error";
        } catch (const std::runtime_error &e) {
            EXPECT_STREQ(e.what(), "job 3");
        }
        EXPECT_EQ(ran.load(), 9);
    }
    EXPECT_NO_THROW(run_jobs({}, 4));
    EXPECT_GE(io_threads(), 1u);
    EXPECT_LE(io_threads(), 4u);
}

TEST(CheckpointIo, OutFileAndRemoveCheckpointFolder)
{
    const std::string dir = temp_path("accel_remove_ckpt");
    remove_all(dir);
    make_dirs(join(dir, "sub/deeper"));
    // More than one writeback chunk (64 MiB) so that sync_file_range runs; the bytes must be exact.
    std::vector<uint8_t> data((size_t(65) << 20) + 123);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
    {
        OutFile f(join(dir, "big.bin"));
        f.write(data.data(), data.size() / 2);
        f.write(data.data() + data.size() / 2, data.size() - data.size() / 2);
        EXPECT_EQ(f.size(), data.size());
        f.close();
    }
    {
        MappedFile m(join(dir, "big.bin"));
        ASSERT_EQ(m.size(), data.size());
        EXPECT_EQ(std::memcmp(m.data(), data.data(), data.size()), 0);
        std::vector<uint8_t> part(1000);
        m.read_at(part.data(), data.size() - 1000, 1000);
        EXPECT_EQ(std::memcmp(part.data(), data.data() + data.size() - 1000, 1000), 0);
    }
    write_file_durably(join(dir, "small.json"), "{}", 2);
    write_file_durably(join(dir, "sub/deeper/x"), "x", 1);
    ASSERT_EQ(::symlink("/nonexistent", join(dir, "link").c_str()), 0);
    remove_checkpoint_folder(dir);
    EXPECT_FALSE(exists(dir));
    remove_checkpoint_folder(dir); // already gone (rotation after someone else removed it): nothing to do
}

TEST(CheckpointIo, CopyBatchTiedDestinationsLastCopyWins)
{
    // Tied parameters: two names, one memory. Copies into it must not race; the last one wins, as when
    // the copies ran one after the other.
    const std::string path = temp_path("accel_copybatch_tied.safetensors");
    at::Tensor a = at::full({5 * 1024 * 1024}, 1.0f), b = at::full({5 * 1024 * 1024}, 2.0f);
    save_safetensors(path, {{"a", a}, {"b", b}}, nullptr);
    auto loaded = load_safetensors(path);
    at::Tensor dst = at::zeros_like(a);
    at::Tensor alias = dst.view({5, 1024 * 1024}).view({-1});
    CopyBatch batch;
    batch.add(dst, loaded.tensors[0].second);
    batch.add(alias, loaded.tensors[1].second);
    EXPECT_EQ(batch.size(), 1u);
    batch.run();
    EXPECT_TRUE(dst.equal(b));
}

TEST(CheckpointIo, LargeTorchArchiveIsWrittenInPiecesWithValidRecords)
{
    // Over the size where save_torch_file writes its pieces on several threads: LibTorch's reader must
    // find every record at its place with its CRC-32 (getRecord checks it) and the same bytes.
    const std::string path = temp_path("accel_large_archive.bin");
    at::Tensor a = at::randn({5 * 1024 * 1024 + 3}); // 20 MiB + 12 bytes
    at::Tensor b = at::randint(0, 1000, {4 * 1024 * 1024 + 1}, at::kLong);
    auto root = py_dict();
    py_set(*root, "a", py_tensor(a));
    py_set(*root, "b", py_tensor(b));
    py_set(*root, "a_view", py_tensor(a.narrow(0, 7, 100)));
    save_torch_file(path, *root);
    caffe2::serialize::PyTorchStreamReader reader(path);
    auto check = [&](const std::string &key, const at::Tensor &t) {
        auto [ptr, size] = reader.getRecord("data/" + key);
        ASSERT_EQ(size, t.nbytes());
        EXPECT_EQ(std::memcmp(ptr.get(), t.data_ptr(), size), 0);
    };
    check("0", a);
    check("1", b);
    PyRef back = load_torch_file(path);
    EXPECT_TRUE(back->get("a")->tensor.equal(a));
    EXPECT_TRUE(back->get("b")->tensor.equal(b));
    EXPECT_TRUE(back->get("a_view")->tensor.equal(a.narrow(0, 7, 100)));
}
