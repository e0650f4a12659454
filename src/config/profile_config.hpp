// kwargs_handlers.profile: Accelerate's ProfileKwargs (utils/dataclasses.py), the settings of
// accelerator.profile() (src/profiling/profile_session.*).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::config {

class JsonObject;
class JsonWriter;

// torch.profiler.schedule's arguments: skip `skip_first` steps, then cycles of `wait` idle steps, `warmup`
// steps profiled but discarded and `active` steps recorded; `repeat` cycles (0: until the profile ends).
struct ProfileSchedule {
    int64_t wait = 0;
    int64_t warmup = 0;
    int64_t active = 1;
    int64_t repeat = 0;
    int64_t skip_first = 0;
};

struct ProfileKwargs {
    // "cpu" and "cuda" (LibTorch with CUDA and a GPU only); empty: torch.profiler's default, the CPU plus
    // CUDA where there is one.
    std::vector<std::string> activities;
    std::optional<ProfileSchedule> schedule_option; // absent: everything between begin and end is recorded
    bool record_shapes = false;
    bool profile_memory = false;
    bool with_stack = false;
    bool with_flops = false;
    std::optional<std::string> output_trace_dir; // where profile_{rank}.json goes (Accelerate's name)
};

// Parses the object at kwargs_handlers.profile into `k`; refuses what accel cannot record by name.
void parse_profile_kwargs(JsonObject &o, ProfileKwargs &k);
// The effective settings under the writer's current object as "profile".
void write_profile_kwargs(JsonWriter &w, const ProfileKwargs &k);

} // namespace accel::config
