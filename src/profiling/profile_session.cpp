#include "profiling/profile_session.hpp"

#include "common/error.hpp"
#include "common/files.hpp"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <c10/util/ApproximateClock.h>
#endif

#include <chrono>
#include <set>

namespace accel::profiling {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

void record_interval(const char *name, double start_s, double end_s)
{
    if (!torch::profiler::impl::profilerEnabled()) return;
    // The profiler's clock is the wall clock (getTime, ns); the interval was taken on the steady clock.
    using std::chrono::steady_clock;
    const double steady_now = std::chrono::duration<double>(steady_clock::now().time_since_epoch()).count();
#if TORCH_VERSION_MAJOR >= 2
    const int64_t wall_now_us = c10::getTime() / 1000;
#else
    const int64_t wall_now_us = torch::profiler::impl::getTime() / 1000;
#endif
    auto wall_us = [&](double s) { return wall_now_us - static_cast<int64_t>((steady_now - s) * 1e6); };
    prof::reportBackendEventToActiveKinetoProfiler(wall_us(start_s), wall_us(end_s), -1, at::RecordScope::USER_SCOPE,
                                                   name, "accel");
}

Action action_at(const config::ProfileSchedule &s, int64_t step)
{
    if (step < s.skip_first) return Action::None;
    step -= s.skip_first;
    const int64_t cycle = s.wait + s.warmup + s.active;
    if (s.repeat > 0 && step / cycle >= s.repeat) return Action::None;
    const int64_t at = step % cycle;
    if (at < s.wait) return Action::None;
    if (at < s.wait + s.warmup) return Action::Warmup;
    return at == cycle - 1 ? Action::RecordAndSave : Action::Record;
}

namespace {

bool wants_cuda(const config::ProfileKwargs &k)
{
    for (const auto &a : k.activities)
        if (a == "cuda") return true;
    return false;
}

} // namespace

ProfileSession::ProfileSession(const config::ProfileKwargs &kwargs, int32_t process_index)
    : kwargs_(kwargs), process_index_(process_index), thread_(std::this_thread::get_id())
{
    if (!kwargs_.output_trace_dir)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "profile: kwargs_handlers.profile.output_trace_dir is not set; accel's "
                                            "profile() writes its trace there (profile_{process_index}.json)");
    if (torch::profiler::impl::profilerEnabled())
        fail(ACCEL_ERR_FAILED_PRECONDITION, "profile: a LibTorch profiler is already running on this thread "
                                            "(an unfinished profile_begin?)");
    make_dirs(*kwargs_.output_trace_dir); // fails now, not after the training it profiled
    if (action() != Action::None) start();
    if (action() == Action::Record || action() == Action::RecordAndSave) window_first_step_ = step_;
    open_step_range();
}

ProfileSession::~ProfileSession()
{
    if (!running_ || std::this_thread::get_id() != thread_) return; // another thread cannot stop it
    try {
        close_step_range();
        prof::disableProfiler();
    } catch (...) { // a destructor reports nothing: the profile is dropped
    }
}

Action ProfileSession::action() const
{
    return kwargs_.schedule_option ? action_at(*kwargs_.schedule_option, step_) : Action::Record;
}

void ProfileSession::check_thread(const char *what) const
{
    if (std::this_thread::get_id() != thread_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, std::string("profile: ") + what + " on another thread than profile_begin; "
                                            "LibTorch's profiler records the thread that started it");
}

void ProfileSession::start()
{
    // KINETO is the only state that collects shapes, memory, stacks and flops in 1.13; without Kineto
    // compiled in, it still records every operator (only saving needs Kineto). KINETO_GPU_FALLBACK times
    // CUDA with CUDA events where CUPTI is missing.
    const ProfilerState state = wants_cuda(kwargs_) ? ProfilerState::KINETO_GPU_FALLBACK : ProfilerState::KINETO;
    ProfilerConfig cfg(state, kwargs_.record_shapes, kwargs_.profile_memory, kwargs_.with_stack, kwargs_.with_flops);
    std::set<ActivityType> activities{ActivityType::CPU};
    if (wants_cuda(kwargs_)) activities.insert(ActivityType::CUDA);
    prof::prepareProfiler(cfg, activities);
    prof::enableProfiler(cfg, activities);
    running_ = true;
}

void ProfileSession::stop(bool keep)
{
    close_step_range();
    auto result = prof::disableProfiler();
    running_ = false;
    if (keep) windows_.push_back(Window{std::move(result), kwargs_.schedule_option ? window_first_step_ : -1});
    window_first_step_ = -1;
}

void ProfileSession::open_step_range()
{
    if (!running_) return;
    step_range_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (step_range_->isActive())
        step_range_->before("ProfilerStep#" + std::to_string(step_), c10::ArrayRef<const c10::IValue>{});
}

void ProfileSession::close_step_range()
{
    step_range_.reset(); // its end callback closes the range
}

void ProfileSession::step(const void *optimizer)
{
    if (driver_ == nullptr) driver_ = optimizer;
    if (optimizer != driver_) return;
    check_thread("an optimizer step (taken; the profile's schedule did not advance)");
    close_step_range();
    const Action prev = action();
    ++step_;
    const Action cur = action();
    // A window ends after its last active step (a warmup is always followed by active steps, never by none).
    if (prev == Action::RecordAndSave) stop(true);
    if (!running_ && cur != Action::None) start();
    if ((cur == Action::Record || cur == Action::RecordAndSave) && window_first_step_ < 0) window_first_step_ = step_;
    open_step_range();
}

std::string ProfileSession::finish()
{
    check_thread("profile_end");
    if (running_) stop(action() == Action::Record || action() == Action::RecordAndSave); // warmup-only: dropped
    const std::string path = join(*kwargs_.output_trace_dir, "profile_" + std::to_string(process_index_) + ".json");
    const std::string text = chrome_trace_json(windows_, process_index_, wants_cuda(kwargs_));
    write_file_durably(path, text.data(), text.size());
    windows_.clear();
    return path;
}

} // namespace accel::profiling
