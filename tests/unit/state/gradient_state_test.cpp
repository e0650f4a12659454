// state/gradient_state: the active-dataloader stack behind end_of_dataloader and remainder
// (training-semantics.md §1).
#include "state/accelerator_state.hpp"
#include "state/gradient_state.hpp"

#include <gtest/gtest.h>

using accel::DataLoaderProgress;
using accel::GradientState;

TEST(GradientState, Defaults)
{
    accel::config::GradientAccumulationPlugin plugin;
    plugin.num_steps = 3;
    GradientState g(plugin);
    EXPECT_EQ(g.num_steps(), 3);
    EXPECT_TRUE(g.sync_gradients());
    EXPECT_FALSE(g.in_dataloader());
    EXPECT_FALSE(g.end_of_dataloader());
    EXPECT_EQ(g.remainder(), -1);
    g.set_sync_gradients(false);
    EXPECT_FALSE(g.sync_gradients());
}

TEST(GradientState, ActiveLoaderIsTheMostRecentOne)
{
    GradientState g(accel::config::GradientAccumulationPlugin{});
    DataLoaderProgress a, b;
    a.remainder = 3;
    b.remainder = 5;
    g.enter_dataloader(&a);
    EXPECT_TRUE(g.in_dataloader());
    EXPECT_EQ(g.remainder(), 3);
    g.enter_dataloader(&b);
    EXPECT_EQ(g.remainder(), 5);
    b.end_of_dataloader = true;
    EXPECT_TRUE(g.end_of_dataloader());
    g.leave_dataloader(&b);
    EXPECT_EQ(g.remainder(), 3);
    EXPECT_FALSE(g.end_of_dataloader());
    // Leaving a loader that is not active (or twice) changes nothing.
    g.leave_dataloader(&b);
    EXPECT_EQ(g.remainder(), 3);
    g.leave_dataloader(&a);
    EXPECT_FALSE(g.in_dataloader());
    EXPECT_EQ(g.remainder(), -1);
}

TEST(GradientState, LeavingAnInnerEntryKeepsTheOthers)
{
    GradientState g(accel::config::GradientAccumulationPlugin{});
    DataLoaderProgress a, b;
    a.remainder = 1;
    b.remainder = 2;
    g.enter_dataloader(&a);
    g.enter_dataloader(&b);
    g.leave_dataloader(&a);
    EXPECT_TRUE(g.in_dataloader());
    EXPECT_EQ(g.remainder(), 2);
    g.leave_dataloader(&b);
    EXPECT_FALSE(g.in_dataloader());
}

TEST(AcceleratorState, TopologyAndPlugin)
{
    accel::config::AcceleratorConfig c;
    c.gradient_accumulation.num_steps = 4;
    c.topology.world_size = 3;
    c.topology.rank = 2;
    accel::AcceleratorState s(c);
    EXPECT_EQ(s.num_processes(), 3);
    EXPECT_EQ(s.process_index(), 2);
    EXPECT_EQ(s.gradient.num_steps(), 4);
    EXPECT_EQ(s.step, 0);
    EXPECT_FALSE(s.in_accumulate);
}
