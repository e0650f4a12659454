// DeepSpeed's layout saved under tensor parallelism (checkpointing/deepspeed_folder; load_state at another tp size,
// accel merge-weights): a valid two-mp-rank ZeRO-2 folder whose mp_rank_01 model states file is the input (a
// torch.save archive: its mp_world_size, accel_tp_slicing, param_shapes and module from untrusted bytes), read whole
// (every rank's tensors joined by the slicing). With ACCEL_FUZZ_WRITE_SEED=PATH the valid file is written there
// instead (the corpus's seed).
#include "checkpointing/checkpointing.hpp"
#include "checkpointing/deepspeed_folder.hpp"
#include "checkpointing/torch_archive.hpp"
#include "common/files.hpp"
#include "torch_file.hpp"

#include <ATen/ATen.h>

#include <cstdlib>
#include <fstream>
#include <unistd.h>

namespace {

using namespace accel;
using namespace accel::ckpt;

// mp_rank r's files of "w" (whole 3 x 2, split along dim 0, padded to 4 rows) and "r" (replicated) over 2 dp ranks.
void write_rank(const std::string &dir, int32_t mp, const std::string &model_states)
{
    const DsPartition part({{"w", {2, 2}, 0}, {"r", {2}, 0}}, 1, 2, 2);
    const at::Tensor w = at::cat({at::arange(6, at::kFloat).view({3, 2}), at::zeros({1, 2})});
    const at::Tensor whole[2] = {w.narrow(0, 2 * mp, 2).reshape({-1}), at::arange(7, 9, at::kFloat)};
    for (int32_t r = 0; r < 2; ++r) {
        DsRankState s;
        s.rank = r;
        s.mp_rank = mp;
        s.mp_world = 2;
        s.tp_slicing = {{"w", DsSlicing{0, 1, 3}}};
        at::Tensor flat = at::zeros({part.flat_numel(0)});
        for (const auto &run : part.runs(r, 0))
            flat.narrow(0, run.flat_offset, run.numel).copy_(whole[run.param].narrow(0, run.param_offset, run.numel));
        s.fp32 = {flat};
        s.group_state = {py_dict({{py_str("step"), py_tensor(at::full({}, 3.0))}, {py_str("exp_avg"), py_tensor(flat + 1)}})};
        s.group_options = {py_dict({{py_str("lr"), py_float(0.5)}})};
        s.module = {{"w", at::empty({0})}, {"r", at::empty({0})}};
        if (r == 0) save_torch_file(model_states.empty() ? join(dir, deepspeed_model_states_name(2, 0, mp)) : model_states,
                                    *deepspeed_model_states(part, s));
        save_torch_file(join(dir, deepspeed_optim_states_name(r, false, mp)), *deepspeed_optim_states(part, s));
    }
}

const std::string &folder()
{
    static const std::string dir = [] {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        const std::string d = std::string(base) + "/accel-fuzz-ds-tp-" + std::to_string(getpid());
        remove_all(d);
        make_dirs(d);
        write_rank(d, 0, "");
        write_rank(d, 1, "");
        return d;
    }();
    return dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (const char *seed = std::getenv("ACCEL_FUZZ_WRITE_SEED")) {
        write_rank(folder(), 1, seed);
        std::exit(0);
    }
    fuzz::text_of(data, size);
    const std::string target = join(folder(), deepspeed_model_states_name(2, 0, 1));
    {
        std::ofstream out(target, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
    }
    auto read = [] {
        const DsWhole whole = read_deepspeed_whole(folder());
        for (const auto &[name, t] : whole.model) fuzz::touch(t);
        if (whole.optimizer) fuzz::walk(*whole.optimizer);
    };
    fuzz::accepts(read);
    // Without the CRC check a mutated member reaches the readers behind it.
    setenv("ACCEL_CHECKPOINT_VERIFY", "0", 1);
    fuzz::accepts(read);
    unsetenv("ACCEL_CHECKPOINT_VERIFY");
    return 0;
}
