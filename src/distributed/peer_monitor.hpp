// Naming the rank that stopped, shared by the gloo and mpi backends (issue 40.5): every rank writes a heartbeat
// into the job's store twice a second (its own connection, on its own thread), with its collective records
// (collective_tracker.hpp). When a collective fails or times out, the heartbeats are read twice 1.6 s apart; ranks
// whose heartbeat did not move are named with how long they have been silent, live ones with where they are. If
// the store cannot be reached, or gives no answer within 5 s (its host stopped), rank 0 (which hosts it) is named.
// While a collective waits, the peers' records also show mismatched collectives (a verdict ends the wait), and a
// peer's published failure ends it with that failure. Every read of the store has a deadline (issue 42.1).
#pragma once

#include "distributed/collective_tracker.hpp"
#include "distributed/rendezvous.hpp"

#include <accel/status.h>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace accel::distributed {

// One communicator's collectives on this rank (world or group), as the monitor sees them.
struct Tracked {
    std::string id;               // "world", "group 3": the key of its record on the heartbeat
    std::vector<int32_t> members; // global ranks, by rank in the communicator
    int32_t me = 0;               // this process's global rank
    CollectiveTracker tracker;
    std::mutex m;
    std::vector<c10::intrusive_ptr<c10d::Work>> p2p; // sends/receives waited in now, aborted on a verdict

    // "" for the world, " of the group of ranks 0, 2" for a group.
    std::string where() const
    {
        if (id == "world") return "";
        std::string s = " of the group of ranks ";
        for (size_t i = 0; i < members.size(); ++i) s += (i ? ", " : "") + std::to_string(members[i]);
        return s;
    }
};


// Ends a send or receive (c10d work) that nobody will wait for any more, and keeps it: Gloo's pairs still refer to
// its buffers, so it is never destroyed (the communicator is poisoned; the process is about to fail).
void bury(const c10::intrusive_ptr<c10d::Work> &w);

// ACCEL_COLLECTIVE_MISMATCH_SECONDS: how long a peer's state must contradict this rank's wait (default 5 s; 0: never
// consult the peers, a mismatch then waits for the timeout). INVALID_ARGUMENT naming it when malformed.
double mismatch_delay();

// The heartbeat thread of one process (one per job's store), and the diagnoses made from the heartbeats.
class PeerMonitor {
public:
    // Starts the heartbeat of `rank` of `world` in the store at `r` (its own connection; `shared_store` is used
    // for a FileStore). `backend` ("gloo", "mpi") begins the verdicts' messages.
    PeerMonitor(const char *backend, Rendezvous r, c10::intrusive_ptr<c10d::Store> shared_store, int rank, int world,
                double mismatch_delay);
    ~PeerMonitor();
    PeerMonitor(const PeerMonitor &) = delete;
    PeerMonitor &operator=(const PeerMonitor &) = delete;

    // Ends the heartbeat thread, after one last beat when this rank has news (a failure) not yet published. Bounded:
    // a thread still in a read of a silent store after 1 s has its connection shut down under it.
    void stop();
    double mismatch_delay() const;
    // A communicator whose collectives the heartbeat carries and whose waits it checks against the peers.
    void track(std::shared_ptr<Tracked> t);
    // This rank's first failure, published on the next beat (at once) so that peers waiting for this rank in a
    // collective end with it instead of waiting for the timeout.
    void publish_failure(accel_status_t code, const std::string &message);
    // A sentence naming the ranks that stopped (best effort, takes ~2 s, at most ~8 s). A peer that published its
    // own failure is named with it first (*peer_failed set: this failure is a consequence), then one that ran out of
    // memory. When every rank is alive and `t` waited in collective `ticket`, it says where each peer is instead.
    // When the store does not answer (its host, rank 0, stopped), that is the answer.
    std::string diagnose(accel_status_t *peer_failed, const Tracked *t = nullptr, CollectiveTracker::Ticket ticket = {});
    // This rank ran out of memory outside a collective: said on the next beat (at once).
    void note_out_of_memory(const std::string &message);

private:
    class Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace accel::distributed
