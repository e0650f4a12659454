// accel's own phases as named ranges in a profile (accelerator.profile(), src/profiling/profile_session.hpp):
// a user-scope RecordFunction, which LibTorch's profiler records like torch.profiler.record_function. With
// no profiler running it costs one check of the thread's callbacks.
#pragma once

#include <ATen/record_function.h>

namespace accel::profiling {

// The range names, one per phase (docs/guides/profiling.md lists them).
inline constexpr const char *kDataWait = "accel::data_wait";             // waiting for the next batch
inline constexpr const char *kForward = "accel::forward";                // a prepared model's forward
inline constexpr const char *kBackward = "accel::backward";              // accelerator.backward(loss)
inline constexpr const char *kBucketAllReduce = "accel::bucket_all_reduce"; // DDP: one bucket's all-reduce in flight
inline constexpr const char *kGradientSync = "accel::gradient_sync";     // DDP: waiting for the buckets' all-reduces
inline constexpr const char *kOptimizerStep = "accel::optimizer_step";   // optimizer.step()
inline constexpr const char *kSaveState = "accel::save_state";           // checkpoint writing
inline constexpr const char *kLoadState = "accel::load_state";           // checkpoint reading
inline constexpr const char *kSaveModel = "accel::save_model";           // save_model's weight files

// Records the enclosing scope as a range named `name` (a string literal: the profiler keeps the pointer).
class Range {
public:
    explicit Range(const char *name) : rf_(at::RecordScope::USER_SCOPE)
    {
        if (rf_.isActive()) rf_.before(name, c10::ArrayRef<const c10::IValue>{});
    }
    Range(const Range &) = delete;
    Range &operator=(const Range &) = delete;

private:
    at::RecordFunction rf_;
};

// Records [start_s, end_s] (steady-clock seconds, as distributed::now_seconds) as a range named `name` on this
// thread when a profiler runs here: work another thread did (a collective's time in flight), reported when
// it is known to be done.
void record_interval(const char *name, double start_s, double end_s);

} // namespace accel::profiling
