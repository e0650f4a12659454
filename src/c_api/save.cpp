// accel_accelerator_save (accel/checkpoint.h): Accelerate's Accelerator.save for named tensors, as safetensors.
#include <accel/checkpoint.h>

#include "c_api/accelerator_access.hpp"
#include "checkpointing/safetensors.hpp"

#include <set>
#include <string>

using accel::fail;
using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_accelerator_save(accel_accelerator_t *accelerator, const char *const *keys,
                                               const accel_tensor_t *const *tensors, size_t count,
                                               const char *path) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        const std::string file = checked_string(path, "path");
        if (count != 0 && (keys == nullptr || tensors == nullptr))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "keys, tensors: NULL with count " + std::to_string(count));
        // Checked on every process, so that a bad call fails everywhere, not only where the file is written.
        accel::TensorList list;
        std::set<std::string> seen;
        for (size_t i = 0; i < count; ++i) {
            const std::string what = "keys[" + std::to_string(i) + "]";
            if (keys[i] == nullptr || keys[i][0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": must be a non-empty string");
            if (!seen.insert(keys[i]).second)
                fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": \"" + keys[i] + "\" appears twice");
            const std::string tname = "tensors[" + std::to_string(i) + "]";
            list.emplace_back(keys[i], checked(tensors[i], tname.c_str()).tensor.detach());
        }
        // Accelerate's save(): only the main process writes (save_on_each_node false); the others return at once.
        if (a.state()->process_index() != 0) return;
        const accel::ckpt::StringMap meta{{"format", "pt"}};
        accel::ckpt::save_safetensors(file, list, &meta);
    });
}

} // extern "C"
