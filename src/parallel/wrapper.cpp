#include "parallel/wrapper.hpp"

#include "common/error.hpp"

namespace accel::parallel {

void refuse_summon_whole_model()
{
    fail(ACCEL_ERR_FAILED_PRECONDITION, "model: is not sharded (no fsdp_plugin or deepspeed_plugin); its parameters "
                                        "are always whole");
}

void ParallelWrapper::summon_full_params(bool) { refuse_summon_whole_model(); }

} // namespace accel::parallel
