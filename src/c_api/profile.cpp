// accelerator.profile() as a begin/end pair (accel/accelerator.h); the session is src/profiling/.
#include <accel/accelerator.h>

#include "accelerator/accelerator.hpp"
#include "c_api/accelerator_access.hpp"
#include "profiling/profile_session.hpp"

using accel::fail;
using namespace accel::capi;

ACCEL_API accel_status_t accel_accelerator_profile_begin(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        auto &state = *a.state();
        if (state.profile)
            fail(ACCEL_ERR_FAILED_PRECONDITION,
                 "profile_begin: a profile is already running (end it with accel_accelerator_profile_end)");
        state.profile = std::make_shared<accel::profiling::ProfileSession>(state.config.profile, state.process_index());
    });
}

ACCEL_API accel_status_t accel_accelerator_profile_end(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        auto &state = *a.state();
        if (!state.profile)
            fail(ACCEL_ERR_FAILED_PRECONDITION, "profile_end: no profile is running (accel_accelerator_profile_begin)");
        // On another thread the profile cannot be stopped: it stays, for an end on the right thread. Past this
        // check the session ends whatever happens (a failed write must not leave the profiler on).
        state.profile->check_thread("profile_end");
        const std::shared_ptr<accel::profiling::ProfileSession> session = std::move(state.profile);
        session->finish();
        a.wait_for_everyone(); // Accelerate waits after the export: every rank's trace exists afterwards
    });
}
