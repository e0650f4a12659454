// Asynchronous save_state ({"async": true}; the idea of PyTorch DCP's async_save): the state is copied
// ("staged") on the calling thread, and the files are written on a background thread while training goes
// on. The crash safety of every save holds: the files go into the temporary folder, which is renamed into
// place only when complete.
//
// The background threads take part in no collective (they would interleave with the training's): each
// process that is not the main one leaves a marker file in the temporary folder once its files are durable
// (or its error, if writing failed), and the main process's thread publishes the folder once every marker
// is there. The file system is the channel, as it is for the checkpoint itself.
#pragma once

#include "checkpointing/checkpointing.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace accel::ckpt {

// Replaces every tensor that `files` reference with a copy in new host memory, so that the files no longer
// see later changes (tensors that share a storage share its copy, so the files come out byte for byte as a
// synchronous save writes them). Returns the bytes copied.
uint64_t stage_files(std::vector<CheckpointFile> &files);

// This process's share of a checkpoint, written on a background thread from the moment it is constructed.
class AsyncCheckpoint {
public:
    // `prepared`: from prepare_checkpoint, every process past it. `files`: staged. `writers`: the process
    // indices writing into the folder (the main process waits for their markers, at most `timeout`).
    AsyncCheckpoint(PreparedCheckpoint prepared, std::vector<CheckpointFile> files, int64_t process_index,
                    std::vector<int64_t> writers, std::chrono::milliseconds timeout);
    // Waits for the thread (saying so on stderr when that takes more than a second); a failure nobody asked
    // for with wait() is printed there.
    ~AsyncCheckpoint();
    AsyncCheckpoint(const AsyncCheckpoint &) = delete;
    AsyncCheckpoint &operator=(const AsyncCheckpoint &) = delete;
    // Waits until this process's part is done (the main process's: the folder published, older
    // checkpoints rotated out) and rethrows its failure.
    void wait();
    const std::string &dir() const { return prepared_.target.dir; }

private:
    void run();
    void await_writers() const;

    PreparedCheckpoint prepared_;
    std::vector<CheckpointFile> files_;
    int64_t process_index_;
    std::vector<int64_t> writers_;
    std::chrono::milliseconds timeout_;
    std::exception_ptr error_;
    bool waited_ = false;
    std::atomic<bool> done_{false};
    std::thread thread_;
};

} // namespace accel::ckpt
