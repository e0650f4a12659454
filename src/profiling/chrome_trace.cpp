// The Chrome trace event format (what torch.profiler's export_chrome_trace writes through Kineto): one
// "X" event per operator and range, "i" events for memory, process metadata naming the rank.
#include "profiling/profile_session.hpp"

#include "common/json_reader.hpp"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>

#include <unistd.h>

#include <sstream>

namespace accel::profiling {

namespace {

// Kineto events carry microseconds in LibTorch 1.x and nanoseconds from 2.0 on; the trace is in microseconds.
#if TORCH_VERSION_MAJOR >= 2
uint64_t start_us(const torch::autograd::profiler::KinetoEvent &e) { return e.startNs() / 1000; }
uint64_t duration_us(const torch::autograd::profiler::KinetoEvent &e) { return e.durationNs() / 1000; }
#else
uint64_t start_us(const torch::autograd::profiler::KinetoEvent &e) { return e.startUs(); }
uint64_t duration_us(const torch::autograd::profiler::KinetoEvent &e) { return e.durationUs(); }
#endif

// The first event of window `w` to keep: its ProfilerStep#first_step range's start (warmup steps before it
// were profiled only to be discarded, as torch.profiler does).
uint64_t keep_from(const Window &w)
{
    if (w.first_step < 0) return 0;
    const std::string marker = "ProfilerStep#" + std::to_string(w.first_step);
    for (const auto &e : w.result->events())
        if (e.name() == marker) return start_us(e);
    return 0;
}

template <class T, class F>
void write_list(std::ostream &o, const c10::ArrayRef<T> &items, F &&one)
{
    o << '[';
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) o << ',';
        one(items[i]);
    }
    o << ']';
}

void write_args(std::ostream &o, const torch::autograd::profiler::KinetoEvent &e, bool cuda)
{
    o << "\"args\":{\"External id\":" << e.correlationId();
    if (e.sequenceNr() >= 0) o << ",\"Sequence number\":" << e.sequenceNr();
    if (e.hasShapes()) {
        o << ",\"Input Dims\":";
        write_list(o, e.shapes(), [&o](const std::vector<int64_t> &dims) {
            write_list(o, c10::ArrayRef<int64_t>(dims), [&o](int64_t d) { o << d; });
        });
    }
    if (e.hasTypes()) {
        o << ",\"Input type\":";
        write_list(o, e.dtypes(), [&o](const std::string &t) { o << json_quote(t); });
    }
    if (e.hasStack() && !e.stack().empty()) {
        std::string joined;
        for (const auto &frame : e.stack()) joined += (joined.empty() ? "" : ";") + frame;
        o << ",\"Call stack\":" << json_quote(joined);
    }
    if (e.flops() > 0) o << ",\"Flops\":" << e.flops();
    if (cuda && e.cudaElapsedUs() >= 0) o << ",\"cuda_time_us\":" << e.cudaElapsedUs();
    o << '}';
}

void write_event(std::ostream &o, const torch::autograd::profiler::KinetoEvent &e, int64_t pid, bool cuda)
{
    const std::string name = e.name();
    o << ",\n{\"name\":" << json_quote(name) << ",\"pid\":" << pid << ",\"tid\":" << e.startThreadId()
      << ",\"ts\":" << start_us(e);
    if (name == "[memory]") { // an allocation (bytes > 0) or a free (bytes < 0), profile_memory
        o << ",\"ph\":\"i\",\"s\":\"t\",\"cat\":\"cpu_instant_event\",\"args\":{\"Device Type\":"
          << static_cast<int>(e.deviceType()) << ",\"Device Id\":" << static_cast<int>(e.deviceIndex())
          << ",\"Bytes\":" << e.nBytes() << "}}";
        return;
    }
    // user_annotation: record_function ranges (accel's phases, ProfilerStep#N) and intervals accel reported
    // (record_interval: LibTorch files them as backend events, scope FUNCTION); cpu_op: ATen operators.
    const bool range = e.scope() == static_cast<uint8_t>(at::RecordScope::USER_SCOPE) || e.backend() == "accel";
    o << ",\"dur\":" << duration_us(e) << ",\"ph\":\"X\",\"cat\":\"" << (range ? "user_annotation" : "cpu_op")
      << "\",";
    write_args(o, e, cuda);
    o << '}';
}

} // namespace

std::string chrome_trace_json(const std::vector<Window> &windows, int32_t process_index, bool cuda)
{
    const int64_t pid = static_cast<int64_t>(::getpid());
    std::ostringstream o;
    o << "{\"schemaVersion\":1,\"displayTimeUnit\":\"ms\",\"distributedInfo\":{\"rank\":" << process_index
      << "},\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << pid
      << ",\"tid\":0,\"args\":{\"name\":\"accel rank " << process_index << "\"}},\n"
      << "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":0,\"args\":{\"sort_index\":"
      << process_index << "}}";
    for (const auto &w : windows) {
        const uint64_t from = keep_from(w);
        for (const auto &e : w.result->events())
            if (start_us(e) >= from) write_event(o, e, pid, cuda);
    }
    o << "\n]}\n";
    return o.str();
}

} // namespace accel::profiling
