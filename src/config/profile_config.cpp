#include "config/profile_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <torch/cuda.h>

namespace accel::config {

namespace {

ProfileSchedule parse_schedule(JsonObject &o)
{
    // torch.profiler.schedule(*, wait, warmup, active, repeat=0, skip_first=0): the first three have no default.
    auto required = [&o](const char *key, int64_t min) {
        auto v = o.get_optional_int(key, min, INT32_MAX);
        if (!v)
            fail(ACCEL_ERR_INVALID_ARGUMENT,
                 o.path_of(key) + ": required by torch.profiler.schedule (an integer >= " + std::to_string(min) + ")");
        return *v;
    };
    ProfileSchedule s;
    s.wait = required("wait", 0);
    s.warmup = required("warmup", 0);
    s.active = required("active", 1); // PyTorch asserts active > 0: a cycle that records nothing is a mistake
    s.repeat = o.get_int("repeat", 0, 0, INT32_MAX);
    s.skip_first = o.get_int("skip_first", 0, 0, INT32_MAX);
    o.finish();
    return s;
}

} // namespace

void parse_profile_kwargs(JsonObject &o, ProfileKwargs &k)
{
    k.activities = o.get_string_array("activities", {});
    for (size_t i = 0; i < k.activities.size(); ++i) {
        const std::string &a = k.activities[i];
        const std::string where = o.path_of("activities") + "[" + std::to_string(i) + "]";
        if (a == "cuda") {
            if (!torch::cuda::is_available())
                fail(ACCEL_ERR_UNIMPLEMENTED, where + ": \"cuda\" needs a LibTorch built with CUDA and a visible GPU; "
                                                      "this process has none (use \"cpu\")");
        } else if (a == "xpu" || a == "mtia" || a == "hpu") {
            fail(ACCEL_ERR_UNIMPLEMENTED, where + ": \"" + a + "\" is a device LibTorch 1.13 cannot profile");
        } else if (a != "cpu") {
            fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected \"cpu\" or \"cuda\", got \"" + a + "\"");
        }
    }
    if (auto s = o.get_object("schedule_option")) k.schedule_option = parse_schedule(*s);
    k.record_shapes = o.get_bool("record_shapes", false);
    k.profile_memory = o.get_bool("profile_memory", false);
    k.with_stack = o.get_bool("with_stack", false);
    k.with_flops = o.get_bool("with_flops", false);
    if (auto dir = o.get_optional_string("output_trace_dir")) {
        if (dir->empty() || dir->find('\0') != std::string::npos)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("output_trace_dir") + ": expected a non-empty path without NUL");
        k.output_trace_dir = *dir;
    }
    // LibTorch 1.13 fills module hierarchies only for lite-interpreter (mobile) models, never for accel's.
    o.require_absent("with_modules", "module hierarchies are recorded by LibTorch 1.13 only for lite-interpreter "
                                     "models; accel's models have none");
    // A Python callable in Accelerate; here the trace always goes to output_trace_dir.
    o.require_absent("on_trace_ready", "a callback has no JSON form; the trace is written to output_trace_dir "
                                       "(profile_{process_index}.json)");
    o.finish();
}

void write_profile_kwargs(JsonWriter &w, const ProfileKwargs &k)
{
    w.begin_object("profile").add("activities", k.activities);
    if (const auto &s = k.schedule_option) {
        w.begin_object("schedule_option")
            .add("wait", s->wait)
            .add("warmup", s->warmup)
            .add("active", s->active)
            .add("repeat", s->repeat)
            .add("skip_first", s->skip_first)
            .end_object();
    } else {
        w.add_null("schedule_option");
    }
    w.add("record_shapes", k.record_shapes)
        .add("profile_memory", k.profile_memory)
        .add("with_stack", k.with_stack)
        .add("with_flops", k.with_flops);
    if (k.output_trace_dir) w.add("output_trace_dir", *k.output_trace_dir);
    else w.add_null("output_trace_dir");
    w.end_object();
}

} // namespace accel::config
