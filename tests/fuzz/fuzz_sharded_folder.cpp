// A SHARDED_STATE_DICT folder's metadata.json (checkpointing/sharded_folder; version 2: pieces of tensor-parallel
// slices, checkpointing/tp_pieces) read against fixed rank files: a tp 2 x dp_shard 2 save of "b" (6 floats, tp rank
// 0 only), "v" (24-float slices of each tp rank) and "w" (30-float slices). The input is metadata.json's text. An
// accepted folder reads every tensor whole, and its merge-weights spans hold exactly the tensor's bytes.
#include "checkpointing/safetensors.hpp"
#include "checkpointing/sharded_folder.hpp"
#include "common/files.hpp"
#include "fuzz_common.hpp"

#include <ATen/ATen.h>

#include <unistd.h>

#include <vector>

namespace {

const std::string &folder()
{
    static const std::string dir = [] {
        using namespace accel;
        const std::string d = std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/accel-fuzz-sharded-" +
                              std::to_string(getpid());
        make_dirs(d);
        const at::Tensor b = at::arange(6, at::kFloat), v = at::arange(48, at::kFloat), w = at::arange(60, at::kFloat);
        for (int r = 0; r < 4; ++r) { // rank = dp shard x 2 + tp rank
            const int64_t tp = r % 2, shard = r / 2;
            TensorList t{{"v", v.narrow(0, tp * 24 + shard * 12, 12)}, {"w", w.narrow(0, tp * 30 + shard * 15, 15)}};
            if (tp == 0) t.emplace_back("b", b.narrow(0, shard * 3, 3));
            ckpt::save_safetensors(join(d, ckpt::sharded_rank_file(r)), t, nullptr);
        }
        return d;
    }();
    return dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    const std::string text = fuzz::text_of(data, size);
    const std::string &dir = folder();
    write_file_durably(join(dir, ckpt::kShardedMetadata), text.data(), text.size());
    fuzz::accepts([&] {
        const ckpt::ShardedFolder f(dir);
        for (size_t t = 0; t < f.meta().tensors.size(); ++t) {
            const auto &m = f.meta().tensors[t];
            const uint64_t bytes = ckpt::st_numel(m.shape, "fuzz") * ckpt::st_dtype_bits(m.dtype) / 8;
            if (bytes > (uint64_t{1} << 20)) fuzz::finding("tensor \"" + m.name + "\" of " + std::to_string(bytes) +
                                                           " bytes accepted over rank files of 240 bytes each");
            std::vector<uint8_t> whole(bytes);
            f.read_range(t, 0, ckpt::st_numel(m.shape, "fuzz"), whole.data());
            uint64_t spans = 0;
            for (const auto &span : f.whole_spans(t)) spans += span.second;
            if (spans != bytes) fuzz::finding("merge-weights spans of \"" + m.name + "\" hold " + std::to_string(spans) +
                                              " bytes, the tensor " + std::to_string(bytes));
        }
    });
    return 0;
}
