// Accelerate's register_save_state_pre_hook / register_load_state_pre_hook: callbacks that may add files to
// a checkpoint folder before save_state writes it, or read them before load_state loads it.
#include "accelerator/accelerator.hpp"

#include "common/error.hpp"
#include "distributed/agreement.hpp"
#include "distributed/communicator.hpp"

#include <algorithm>
#include <exception>

namespace accel {

int64_t Accelerator::register_state_pre_hook(bool save, StateHook hook)
{
    if (!hook) fail(ACCEL_ERR_INVALID_ARGUMENT, "hook: must not be NULL");
    const int64_t handle = next_hook_handle_++;
    state_hooks_.push_back({handle, save, std::move(hook)});
    return handle;
}

void Accelerator::remove_state_hook(int64_t handle)
{
    auto it = std::find_if(state_hooks_.begin(), state_hooks_.end(),
                           [handle](const RegisteredHook &h) { return h.handle == handle; });
    if (it == state_hooks_.end())
        fail(ACCEL_ERR_NOT_FOUND, "handle: no save_state / load_state pre-hook " + std::to_string(handle) +
                                      " is registered (already removed?)");
    state_hooks_.erase(it);
}

void Accelerator::run_state_hooks(bool save, const std::string &folder)
{
    const char *call = save ? "save_state" : "load_state";
    std::exception_ptr local;
    // A copy: a hook may remove itself (or another) while the list is walked.
    const std::vector<RegisteredHook> hooks = state_hooks_;
    try {
        for (const auto &h : hooks) {
            if (h.save != save) continue;
            try {
                h.hook(folder, static_cast<int32_t>(state_->process_index()));
            } catch (const Error &e) {
                fail(e.code(), std::string(call) + ": pre-hook " + std::to_string(h.handle) + " failed: " + e.what());
            } catch (const std::exception &e) {
                fail(ACCEL_ERR_UNKNOWN, std::string(call) + ": pre-hook " + std::to_string(h.handle) + " failed: " + e.what());
            }
        }
    } catch (...) {
        local = std::current_exception();
    }
    // Every process learns whether every process's hooks succeeded: one that failed must not leave the others
    // waiting in the save's barriers (or loading a folder it refused).
    distributed::agree(state_->comm.get(), local);
}

} // namespace accel
