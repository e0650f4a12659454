// The bookkeeping that every Gloo collective now does for the detection of mismatched collectives
// (src/distributed/collective_tracker.hpp), alone: CollectiveTracker::issue (a sequence number) and a Wait
// (recording the collective waited in, then removing it), in ns per collective, against an empty loop. A program,
// not a test; see BENCHMARKS.md, "Mismatched collectives". Usage: bench_collective_tracker [ITERATIONS]
#include "distributed/collective_tracker.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

using accel::distributed::CollectivePurpose;
using accel::distributed::CollectiveTracker;

namespace {

double seconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace

int main(int argc, char **argv)
{
    const long n = argc > 1 ? std::atol(argv[1]) : 2000000;
    CollectiveTracker tracker;
    CollectivePurpose purpose(accel::distributed::kShardedForward);
    std::vector<double> ns;
    volatile int64_t sink = 0;
    for (int round = 0; round < 7; ++round) {
        double t0 = seconds();
        for (long i = 0; i < n; ++i) {
            auto ticket = tracker.issue("all_gather");
            CollectiveTracker::Wait wait(tracker, ticket);
            sink = sink + ticket.seq;
        }
        ns.push_back((seconds() - t0) / static_cast<double>(n) * 1e9);
    }
    std::sort(ns.begin(), ns.end());
    std::printf("issue + wait bookkeeping: %.1f ns per collective (median of 7 rounds of %ld)\n", ns[3], n);
    return sink == 0;
}
