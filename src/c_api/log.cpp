// accel/log.h: the process-wide level and callback, and accel_log_write (MultiProcessAdapter.log).
#include <accel/log.h>

#include "c_api/accelerator_access.hpp"
#include "config/env.hpp"
#include "logging/logger.hpp"

#include <string>

using accel::fail;
using namespace accel::capi;

namespace {

void check_level(accel_log_level_t level, int32_t lowest, const char *what)
{
    if (level < lowest || level > ACCEL_LOG_CRITICAL)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(what) + ": expected " + std::to_string(lowest) +
                                             "-50 (ACCEL_LOG_DEBUG 10 ... ACCEL_LOG_CRITICAL 50), got " +
                                             std::to_string(level));
}

} // namespace

extern "C" {

ACCEL_API void accel_log_set_callback(accel_log_fn_t fn, void *user_data) noexcept
{
    accel::logging::set_sink(fn, user_data);
}

ACCEL_API accel_status_t accel_log_set_level(accel_log_level_t level) noexcept
{
    return guarded([&] {
        check_level(level, ACCEL_LOG_NOTSET, "level");
        accel::logging::set_level(level);
    });
}

ACCEL_API accel_status_t accel_log_get_level(accel_log_level_t *out) noexcept
{
    return guarded([&] {
        out_param(out);
        std::string env_error;
        *out = accel::logging::level(&env_error);
        if (!env_error.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, env_error);
    });
}

ACCEL_API accel_status_t accel_log_write(accel_accelerator_t *accelerator, const char *name, accel_log_level_t level,
                                         const char *message, bool main_process_only, bool in_order) noexcept
{
    return guarded([&] {
        check_level(level, 1, "level"); // NOTSET is a threshold, not a severity
        if (message == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "message: must not be NULL");
        accel::Accelerator *acc = accelerator ? &acc_of(accelerator) : nullptr;
        const auto topology = acc ? acc->config().topology : accel::config::topology_from_env();
        const std::string logger = name && *name ? name : "accel";
        if (!accel::logging::enabled_for(level)) return;
        const auto write = [&] { accel::logging::emit(level, logger, topology.rank, topology.world_size, message); };
        if (main_process_only) {
            if (topology.rank == 0) write();
            return;
        }
        if (!in_order || topology.world_size == 1) return write();
        if (!acc)
            fail(ACCEL_ERR_FAILED_PRECONDITION, "in_order: needs the accelerator (its barrier orders the " +
                                                    std::to_string(topology.world_size) + " processes); got NULL");
        // Each rank's turn ends with a barrier, so rank i writes only after ranks 0..i-1 have written.
        for (int32_t turn = 0; turn < topology.world_size; ++turn) {
            if (turn == topology.rank) write();
            acc->wait_for_everyone();
        }
    });
}

} // extern "C"
