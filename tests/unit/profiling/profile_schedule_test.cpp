// torch.profiler.schedule's rule as accel applies it (profiling::action_at), checked step by step against
// the sequences PyTorch's schedule() gives for the same arguments.
#include "profiling/profile_session.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

using accel::profiling::Action;
using accel::profiling::action_at;

// One letter per step: n none, w warmup, r record, s record and save.
std::string actions(const accel::config::ProfileSchedule &s, int steps)
{
    std::string out;
    for (int i = 0; i < steps; ++i) {
        switch (action_at(s, i)) {
        case Action::None: out += 'n'; break;
        case Action::Warmup: out += 'w'; break;
        case Action::Record: out += 'r'; break;
        case Action::RecordAndSave: out += 's'; break;
        }
    }
    return out;
}

TEST(ProfileSchedule, CyclesOfWaitWarmupActive)
{
    accel::config::ProfileSchedule s;
    s.wait = 1;
    s.warmup = 1;
    s.active = 2;
    EXPECT_EQ(actions(s, 10), "nwrsnwrsnw"); // repeat 0: cycles until the profile ends
}

TEST(ProfileSchedule, SkipFirstAndRepeat)
{
    accel::config::ProfileSchedule s;
    s.skip_first = 1;
    s.wait = 1;
    s.warmup = 1;
    s.active = 2;
    s.repeat = 1;
    EXPECT_EQ(actions(s, 8), "nnwrsnnn"); // tests/distributed/run_profile.py's schedule: steps 3 and 4 recorded
    s.repeat = 2;
    s.skip_first = 0;
    s.wait = 0;
    s.warmup = 0;
    s.active = 1;
    EXPECT_EQ(actions(s, 4), "ssnn");
}

} // namespace
