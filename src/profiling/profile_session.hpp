// accelerator.profile(): LibTorch's profiler over a span of the training loop, as Accelerate's profile()
// context with ProfileKwargs. Debian's LibTorch 1.13 is built without Kineto, so the profiler collects
// events but cannot save them; accel writes the Chrome trace itself (chrome_trace.cpp).
//
// The schedule (schedule_option) is step-driven: each optimizer step is one prof.step(). The first
// optimizer stepped in the session drives it, so several optimizers still count one step per iteration.
#pragma once

#include "config/profile_config.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace at {
struct RecordFunction;
}
namespace torch::autograd::profiler {
struct ProfilerResult;
}

namespace accel::profiling {

// torch.profiler.ProfilerAction: what the profiler does during one step.
enum class Action { None, Warmup, Record, RecordAndSave };

// torch.profiler.schedule's rule for step `step` (0-based); no schedule records every step.
Action action_at(const config::ProfileSchedule &s, int64_t step);

// One recorded window: the profiler's events and the first step it keeps (earlier ones were warmup).
struct Window {
    std::unique_ptr<torch::autograd::profiler::ProfilerResult> result;
    int64_t first_step = -1; // -1: keep every event
};

class ProfileSession {
public:
    // Starts profiling on the calling thread (the profiler's state is the thread's): the trace goes to
    // output_trace_dir/profile_{process_index}.json when the session finishes.
    ProfileSession(const config::ProfileKwargs &kwargs, int32_t process_index);
    // Stops a running profiler without writing (an accelerator freed inside profile()).
    ~ProfileSession();
    ProfileSession(const ProfileSession &) = delete;
    ProfileSession &operator=(const ProfileSession &) = delete;

    // prof.step() after `optimizer` stepped; steps of other optimizers than the first one are ignored.
    void step(const void *optimizer);
    // Stops profiling, writes the trace and returns its path.
    std::string finish();
    // Fails unless called on the thread that began the profile (the profiler's state is that thread's).
    void check_thread(const char *what) const;

private:
    Action action() const;
    void start();
    void stop(bool keep);
    void open_step_range();
    void close_step_range();

    config::ProfileKwargs kwargs_;
    int32_t process_index_;
    std::thread::id thread_;
    const void *driver_ = nullptr; // the optimizer whose steps advance the schedule
    int64_t step_ = 0;
    bool running_ = false;
    int64_t window_first_step_ = -1; // the first Record step of the running window
    std::unique_ptr<at::RecordFunction> step_range_; // ProfilerStep#N, as torch.profiler's step()
    std::vector<Window> windows_;
};

// The Chrome trace (chrome://tracing, Perfetto) of the recorded windows (chrome_trace.cpp).
std::string chrome_trace_json(const std::vector<Window> &windows, int32_t process_index, bool cuda);

} // namespace accel::profiling
