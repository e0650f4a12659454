#include "checkpointing/async_save.hpp"

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/job_pool.hpp"

#include <ATen/ATen.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <system_error>

namespace accel::ckpt {

namespace {

// "<tmp>/.accel-written-<process index>": "<status>\n<message>", status 0 when the files are durable.
std::string marker_path(const std::string &tmp, int64_t process_index)
{
    return join(tmp, ".accel-written-" + std::to_string(process_index));
}

void write_marker(const std::string &tmp, int64_t process_index, accel_status_t status, const std::string &message)
{
    // Written under another name and renamed, so the main process never reads half a marker.
    const std::string path = marker_path(tmp, process_index);
    const std::string text = std::to_string(static_cast<int>(status)) + "\n" + message;
    write_file_durably(path + ".part", text.data(), text.size());
    if (std::rename((path + ".part").c_str(), path.c_str()) != 0) fail_errno(errno, "cannot rename to", path);
}

} // namespace

uint64_t stage_files(std::vector<CheckpointFile> &files)
{
    // One copy per storage; the copies are made by several threads when they are large, at the end: until
    // then `sources` keeps every source alive (the files' old objects go as they are replaced, and a storage
    // only they held would be freed, and its address reused).
    std::map<const void *, at::Tensor> copies;
    std::vector<at::Tensor> sources;
    std::vector<std::function<void()>> jobs;
    uint64_t bytes = 0;
    auto stage = [&](const at::Tensor &t) -> at::Tensor {
        if (!t.defined()) return t;
        if (!t.device().is_cpu()) return t.to(at::kCPU); // a copy already
        const c10::Storage &st = t.storage();
        auto [it, fresh] = copies.try_emplace(st.unsafeGetStorageImpl());
        if (fresh) {
            const size_t n = st.nbytes();
            it->second = at::empty({static_cast<int64_t>(n)}, at::kByte);
            sources.push_back(t);
            bytes += n;
            if (n > 0) {
                auto *dst = static_cast<char *>(it->second.data_ptr());
                const auto *src = static_cast<const char *>(st.data());
                add_piece_jobs(jobs, n, [dst, src](size_t at, size_t len) { std::memcpy(dst + at, src + at, len); });
            }
        }
        return at::empty({0}, t.options()).set_(it->second.storage(), t.storage_offset(), t.sizes(), t.strides());
    };
    // Objects are copied whole (they are small apart from their tensors), keeping shared nodes shared.
    std::map<const PyObj *, PyRef> seen;
    std::function<PyRef(const PyRef &)> copy = [&](const PyRef &o) -> PyRef {
        if (!o) return o;
        if (auto it = seen.find(o.get()); it != seen.end()) return it->second;
        auto c = std::make_shared<PyObj>(*o);
        seen[o.get()] = c;
        for (auto &item : c->items) item = copy(item);
        for (auto &kv : c->map) kv = {copy(kv.first), copy(kv.second)};
        if (c->tensor.defined()) c->tensor = stage(c->tensor);
        return c;
    };
    for (auto &f : files) {
        if (f.object) f.object = copy(f.object);
        if (f.tensors) {
            auto staged = std::make_shared<TensorList>(*f.tensors);
            for (auto &entry : *staged) entry.second = stage(entry.second);
            f.tensors = staged;
        }
        // f.bytes: already a copy.
    }
    run_jobs(jobs, io_threads_for(bytes));
    return bytes;
}

AsyncCheckpoint::AsyncCheckpoint(PreparedCheckpoint prepared, std::vector<CheckpointFile> files,
                                 int64_t process_index, std::vector<int64_t> writers,
                                 std::chrono::milliseconds timeout)
    : prepared_(std::move(prepared)), files_(std::move(files)), process_index_(process_index),
      writers_(std::move(writers)), timeout_(timeout)
{
    try {
        thread_ = std::thread([this] { run(); });
    } catch (const std::system_error &e) {
        abandon_checkpoint(prepared_);
        fail(ACCEL_ERR_RESOURCE_EXHAUSTED, std::string("save_state: cannot start the thread of an asynchronous save: ") + e.what());
    }
}

AsyncCheckpoint::~AsyncCheckpoint()
{
    if (!thread_.joinable()) return;
    for (int i = 0; i < 100 && !done_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!done_) std::fprintf(stderr, "accel: waiting for the asynchronous save of %s to finish\n", dir().c_str());
    thread_.join();
    if (error_ && !waited_) {
        try {
            std::rethrow_exception(error_);
        } catch (const std::exception &e) {
            std::fprintf(stderr, "accel: the asynchronous save of %s failed: %s\n", dir().c_str(), e.what());
        }
    }
}

void AsyncCheckpoint::wait()
{
    if (thread_.joinable()) thread_.join();
    if (waited_) return;
    waited_ = true;
    if (error_) std::rethrow_exception(error_);
}

void AsyncCheckpoint::await_writers() const
{
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (int64_t w : writers_) {
        if (w == process_index_) continue;
        const std::string path = marker_path(prepared_.tmp, w);
        while (!exists(path)) {
            if (std::chrono::steady_clock::now() > deadline)
                fail(ACCEL_ERR_DEADLINE_EXCEEDED, "save_state (async): process " + std::to_string(w) +
                                                      " did not finish writing its files into " + prepared_.tmp +
                                                      " within the init_process_group timeout (" +
                                                      std::to_string(timeout_.count() / 1000) + " s)");
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        const std::string text = read_small_file(path, 1 << 16);
        const int status = std::atoi(text.c_str());
        if (status != ACCEL_OK) {
            const size_t nl = text.find('\n');
            fail(static_cast<accel_status_t>(status), "save_state (async): process " + std::to_string(w) +
                                                         " failed to write its files: " +
                                                         (nl == std::string::npos ? text : text.substr(nl + 1)));
        }
        std::remove(path.c_str());
    }
}

void AsyncCheckpoint::run()
{
    accel_status_t status = ACCEL_OK;
    std::string message;
    try {
        // One thread: the write is off the critical path, and the training needs the cores (on 2 cores the
        // steps ran 1.3-1.5x slower during a one-thread write, and two threads were no better; BENCHMARKS.md).
        write_checkpoint_files(prepared_, files_, 1);
        files_.clear(); // the staged copies are no longer needed
        if (prepared_.main) {
            await_writers();
            publish_checkpoint(prepared_);
        }
    } catch (const Error &e) {
        error_ = std::current_exception();
        status = e.code();
        message = e.what();
    } catch (const std::exception &e) {
        error_ = std::current_exception();
        status = ACCEL_ERR_INTERNAL;
        message = e.what();
    }
    if (error_) abandon_checkpoint(prepared_);
    if (!prepared_.main) {
        // The main process waits for this, success or not.
        try {
            write_marker(prepared_.tmp, process_index_, status, message);
        } catch (...) {
            if (!error_) error_ = std::current_exception();
        }
    }
    done_ = true;
}

} // namespace accel::ckpt
