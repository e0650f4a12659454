// The distributed part of accel/accelerator.h (collectives, process roles). Kept apart from
// c_api/accelerator.cpp so that the two halves of the header can change independently.
#include <accel/accelerator.h>

#include "c_api/accelerator_access.hpp"
#include "config/env.hpp"
#include "distributed/communicator.hpp"
#include "ops/collectives.hpp"

using accel::fail;
using namespace accel::capi;

namespace {
accel::distributed::Communicator &comm_of(accel::Accelerator &a) { return *a.state()->comm; }
} // namespace

extern "C" {

ACCEL_API accel_status_t accel_accelerator_gather(accel_accelerator_t *accelerator, const accel_tensor_t *tensor,
                                                  accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        auto &t = checked(tensor, "tensor");
        *out = new_tensor(accel::ops::gather(comm_of(a), t.tensor));
    });
}

ACCEL_API accel_status_t accel_accelerator_gather_for_metrics(accel_accelerator_t *accelerator,
                                                              const accel_tensor_t *tensor, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        auto &t = checked(tensor, "tensor");
        *out = new_tensor(accel::ops::gather_for_metrics(comm_of(a), a.state()->gradient, t.tensor));
    });
}

ACCEL_API accel_status_t accel_accelerator_reduce(accel_accelerator_t *accelerator, const accel_tensor_t *tensor,
                                                  const char *reduction, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        auto &t = checked(tensor, "tensor");
        const char *r = checked_string(reduction, "reduction");
        *out = new_tensor(accel::ops::reduce(comm_of(a), t.tensor, r));
    });
}

ACCEL_API accel_status_t accel_accelerator_broadcast(accel_accelerator_t *accelerator, accel_tensor_t *tensor,
                                                     int32_t from_process) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        auto &t = checked(tensor, "tensor");
        accel::ops::broadcast(comm_of(a), t.tensor, from_process);
    });
}

ACCEL_API accel_status_t accel_accelerator_pad_across_processes(accel_accelerator_t *accelerator,
                                                                const accel_tensor_t *tensor, int64_t dim,
                                                                double pad_index, bool pad_first,
                                                                accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        auto &t = checked(tensor, "tensor");
        *out = new_tensor(accel::ops::pad_across_processes(comm_of(a), t.tensor, dim, pad_index, pad_first));
    });
}

ACCEL_API accel_status_t accel_accelerator_split_between_processes(accel_accelerator_t *accelerator,
                                                                   const accel_tensor_t *tensor, bool apply_padding,
                                                                   accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        auto &t = checked(tensor, "tensor");
        *out = new_tensor(accel::ops::split_between_processes(comm_of(a), t.tensor, apply_padding));
    });
}

ACCEL_API accel_status_t accel_accelerator_set_trigger(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).set_trigger(); });
}

ACCEL_API accel_status_t accel_accelerator_check_trigger(accel_accelerator_t *accelerator, bool *out) noexcept
{
    return guarded([&] {
        if (out == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "out: must not be NULL");
        *out = false;
        *out = acc_of(accelerator).check_trigger();
    });
}

ACCEL_API accel_status_t accel_accelerator_wait_for_everyone(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).wait_for_everyone(); });
}

ACCEL_API accel_status_t accel_accelerator_main_process_first_begin(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).main_process_first_begin(false); });
}

ACCEL_API accel_status_t accel_accelerator_main_process_first_end(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).main_process_first_end(); });
}

ACCEL_API accel_status_t accel_accelerator_local_main_process_first_begin(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).main_process_first_begin(true); });
}

ACCEL_API accel_status_t accel_accelerator_local_main_process_first_end(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).main_process_first_end(); });
}

ACCEL_API accel_status_t accel_accelerator_get_num_local_processes(const accel_accelerator_t *accelerator,
                                                                   int32_t *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.config().topology.local_world_size; });
}

ACCEL_API accel_status_t accel_accelerator_is_last_process(const accel_accelerator_t *accelerator, bool *out) noexcept
{
    return query(accelerator, out,
                 [](auto &a) { return a.config().topology.rank == a.config().topology.world_size - 1; });
}

ACCEL_API accel_status_t accel_accelerator_get_distributed_backend(const accel_accelerator_t *accelerator,
                                                                   const char **out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.state()->comm->backend(); });
}

ACCEL_API accel_status_t accel_accelerator_get_ddp_stats_json(const accel_accelerator_t *accelerator,
                                                              char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        *out = owned_string(a.ddp_stats_json());
    });
}

ACCEL_API accel_status_t accel_accelerator_get_parallel_ranks_json(const accel_accelerator_t *accelerator,
                                                                   char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        *out = owned_string(a.parallel_ranks_json());
    });
}

ACCEL_API accel_status_t accel_accelerator_get_memory_stats_json(const accel_accelerator_t *accelerator,
                                                                 char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        *out = owned_string(a.memory_stats_json());
    });
}

ACCEL_API accel_status_t accel_accelerator_summon_full_params_begin(accel_accelerator_t *accelerator,
                                                                    accel_model_t *model) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        auto &m = checked(model, "model");
        a.summon_full_params(*m.impl, true);
    });
}

ACCEL_API accel_status_t accel_accelerator_summon_full_params_end(accel_accelerator_t *accelerator,
                                                                  accel_model_t *model) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        auto &m = checked(model, "model");
        a.summon_full_params(*m.impl, false);
    });
}

ACCEL_API accel_status_t accel_process_get_local_index(int32_t *out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = accel::config::topology_from_env().local_rank;
    });
}

ACCEL_API accel_status_t accel_process_get_local_count(int32_t *out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = accel::config::topology_from_env().local_world_size;
    });
}

ACCEL_API accel_status_t accel_process_is_local_main(bool *out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = accel::config::topology_from_env().local_rank == 0;
    });
}

} // extern "C"
