// `accel launch --nnodes MIN:MAX`: torchrun's elastic membership. The launchers of the job meet at an agent
// store (a TCPStore on --main_process_ip:--main_process_port, hosted by the launcher on that machine) and form
// each round's group there: the round opens when MIN launchers have joined and closes at MAX or when the last
// call (last_call_timeout) after MIN has passed; a launcher that comes later waits, and its waiting ends the
// running round on every node (membership change) so that the next one admits it. When a worker fails (a node
// that disappeared makes its peers' collectives fail), every launcher ends the round and the survivors form the
// next one, with the world size of those present; the program resumes from its newest checkpoint
// (load_latest_state), whose state reshards to the new world size.
#pragma once

#include "cli/launch_workers.hpp"

#include <functional>
#include <string>

namespace accel::cli {

struct ElasticOptions {
    int min_nodes = 1, max_nodes = 1;
    std::string addr;     // the agent store's host (--main_process_ip)
    int port = 29500;     // the agent store's port (--main_process_port)
    double join_timeout = 600.0;    // seconds to wait for MIN nodes (torchrun's rdzv_conf join_timeout)
    double last_call_timeout = 30.0; // seconds after MIN for more nodes, up to MAX (torchrun's last_call_timeout)
    bool quiet = false;
};

// Runs the job round after round until it succeeds, fails past group.max_restarts worker failures (membership
// changes are not counted, as torchrun), or is interrupted; returns the launcher's exit status. `group` gives the
// workers per node (local), the command and the environment; its world, machines, machine_rank and port are set
// per round. `pick_port` gives a free port for a round's worker rendezvous (on the store's host).
int run_elastic(WorkerGroup group, const ElasticOptions &o, StoppedWatchdog &watchdog,
                const std::function<int()> &pick_port);

} // namespace accel::cli
