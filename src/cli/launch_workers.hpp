// One round of `accel launch`'s workers: starts this machine's processes with the torchrun-style environment,
// prefixes each line of their output with "[rankN]: ", and when one fails (or stays stopped past the job's
// timeout) stops the others (SIGTERM, then SIGKILL after 5 s) and reports it. launch.cpp decides what follows:
// the end of the job, or (--max_restarts) another round with every worker started again, as torchrun does.
#pragma once

#include "cli/launch_watchdog.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace accel::cli {

struct WorkerGroup {
    int world = 1, local = 1, machines = 1, machine_rank = 0;
    std::string addr;
    int port = 0;
    // Set in every worker, after the launcher's own variables (so they win): ACCELERATE_*, OMP_NUM_THREADS, ...
    std::map<std::string, std::string> env;
    // --enable_cpu_affinity: local process i is bound to cpu_blocks[i] (empty: not bound); `threads_flag`: the
    // user gave --num_cpu_threads_per_process, which wins over the block's size for OMP_NUM_THREADS.
    bool cpu_affinity = false, threads_flag = false;
    std::vector<std::vector<int>> cpu_blocks;
    std::vector<int> memory_nodes; // per local process: the NUMA node its memory prefers (-1: none)
    std::vector<std::string> command;
    bool quiet = false;
    // torchelastic's view of the round: TORCHELASTIC_RESTART_COUNT / _MAX_RESTARTS / _RUN_ID.
    int restart_count = 0, max_restarts = 0;
    std::string run_id = "none";
    double monitor_interval = 0.1; // seconds between looks at the workers' state when they write nothing
    // --nnodes MIN:MAX (launch_elastic.cpp): asked every monitor_interval while the workers run; a non-empty
    // answer (why the membership changed) stops them (SIGTERM, SIGKILL after 5 s) and ends the round.
    std::function<std::string()> membership_changed;
};

struct RoundOutcome {
    int result = 0;              // the job's exit status so far: the failed worker's (128 + signal if killed)
    bool worker_failed = false;  // a worker failed or stayed stopped (restartable)
    bool interrupted = false;    // the launcher got SIGINT/SIGTERM (forwarded; never restarted)
    bool membership_changed = false; // membership_changed answered: the workers were stopped (`failure` says why)
    int failed_rank = -1;
    std::string failure;         // "was killed by signal 9 (Killed)"
};

// Installs the launcher's SIGINT/SIGTERM handlers (forwarded to the workers) once, before the first round.
void install_launcher_signal_handlers();
// The SIGINT/SIGTERM the launcher got (0: none), for waits outside a round (the elastic rendezvous).
int launcher_signal();
// Runs the round to its end: every worker exited and its output drained.
RoundOutcome run_worker_group(const WorkerGroup &group, StoppedWatchdog &watchdog);

} // namespace accel::cli
