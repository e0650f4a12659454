// accel launch's watchdog (issue 42.1): a process that stops (SIGSTOP, a debugger, "T" in /proc/PID/stat) sends no
// exit status, and when no rank waits in a collective nothing else ends the job. The watchdog ends the job whose
// process stayed stopped longer than the job's init_process_group.timeout (+3 s, so that ranks waiting for it in a
// collective report first, naming it), which the ranks tell it through a
// folder (ACCEL_LAUNCH_STATE_DIR, written by src/distributed/communicator.cpp: timeout.RANK holds seconds);
// before any rank said, 1800 s (torch's and accel's default).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accel::cli {

class StoppedWatchdog {
public:
    // Creates the folder the ranks write into; "" (no watchdog folder) when it cannot be made.
    StoppedWatchdog();
    ~StoppedWatchdog(); // removes the folder
    StoppedWatchdog(const StoppedWatchdog &) = delete;
    StoppedWatchdog &operator=(const StoppedWatchdog &) = delete;

    // The value of ACCEL_LAUNCH_STATE_DIR for the children ("" when there is none).
    const std::string &folder() const { return folder_; }

    struct Verdict {
        int rank;
        pid_t pid;
        std::string why; // "has been stopped (state T ...) for 7.1 s, longer than ..."
    };
    // Called on every pass of the launcher's loop with the live children (rank -> pid): the first child stopped for
    // longer than the job's timeout, if any. A gap of more than 1 s between calls (the launcher itself was
    // stopped, e.g. Ctrl-Z of the whole job) starts every count again.
    std::optional<Verdict> check(const std::map<int, pid_t> &children);

    // The job's timeout in seconds: the largest a rank reported, else the default.
    double timeout_seconds() const;

private:
    std::string folder_;
    std::map<pid_t, std::chrono::steady_clock::time_point> stopped_since_;
    std::optional<std::chrono::steady_clock::time_point> last_check_;
};

// The state letter of /proc/PID/stat ('R', 'S', 'T', 't', 'Z', ...), or '?' when it cannot be read.
char process_state(pid_t pid);

} // namespace accel::cli
