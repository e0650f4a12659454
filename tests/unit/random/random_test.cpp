// set_seed's `deterministic` flag (Accelerate's set_seed(seed, deterministic=True)): LibTorch's
// deterministic-algorithms mode, observed through an operation that has no deterministic implementation.
#include "random/random.hpp"

#include <accel/accelerator.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace {
// put_ without accumulate writes duplicate indices in an unspecified order: LibTorch refuses it in
// deterministic mode, on the CPU too.
void put_duplicates()
{
    at::Tensor t = at::zeros({4});
    t.put_(at::tensor({0, 0}, at::kLong), at::tensor({1.0f, 2.0f}), /*accumulate=*/false);
}

struct DeterministicOff {
    ~DeterministicOff() { at::globalContext().setDeterministicAlgorithms(false, false); }
};
} // namespace

TEST(SetSeed, DeterministicTurnsOnLibTorchsDeterministicAlgorithms)
{
    DeterministicOff restore;
    at::globalContext().setDeterministicAlgorithms(false, false);
    accel::set_seed(7, /*deterministic=*/false);
    EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
    EXPECT_NO_THROW(put_duplicates());

    accel::set_seed(7, /*deterministic=*/true);
    EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
    EXPECT_THROW(put_duplicates(), c10::Error);

    // As in Accelerate, deterministic=false leaves the mode as it was (it does not turn it off).
    accel::set_seed(7, /*deterministic=*/false);
    EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
}

TEST(SetSeed, DeterministicThroughTheCApi)
{
    DeterministicOff restore;
    at::globalContext().setDeterministicAlgorithms(false, false);
    ASSERT_EQ(accel_random_set_seed(3, false, false), ACCEL_OK);
    EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
    ASSERT_EQ(accel_random_set_seed(3, false, true), ACCEL_OK);
    EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
    EXPECT_THROW(put_duplicates(), c10::Error);
}
