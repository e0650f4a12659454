// The process's device (state/device_choice.hpp) with a made-up number of GPUs: this machine has none, so these
// check the choice only; that a GPU so chosen trains is capi_test_cuda's, on a machine with one.
#include "common/error.hpp"
#include "state/device_choice.hpp"

#include <gtest/gtest.h>

namespace accel {
namespace {

accel_status_t refusal(const std::string &value, int gpus, std::string *message)
{
    try {
        choose_device(false, 0, gpus, value);
    } catch (const Error &e) {
        *message = e.what();
        return e.code();
    }
    return ACCEL_OK;
}

// Without the variable: LOCAL_RANK modulo the visible GPUs; the CPU when asked for or when none is visible.
TEST(DeviceChoice, LocalRankModuloTheGpus)
{
    const DeviceChoice third = choose_device(false, 5, 4, std::nullopt);
    EXPECT_TRUE(third.cuda);
    EXPECT_EQ(third.index, 1);
    EXPECT_FALSE(choose_device(true, 5, 4, std::nullopt).cuda);
    EXPECT_FALSE(choose_device(false, 1, 0, std::nullopt).cuda);
}

// Ray Train's ACCELERATE_TORCH_DEVICE (str(torch.device)) wins over LOCAL_RANK and over `cpu`, as in Accelerate.
TEST(DeviceChoice, RayTorchDeviceVariable)
{
    DeviceChoice d = choose_device(false, 0, 4, std::string("cuda:3"));
    EXPECT_TRUE(d.cuda);
    EXPECT_EQ(d.index, 3);
    d = choose_device(true, 2, 4, std::string("cuda:1"));
    EXPECT_TRUE(d.cuda);
    EXPECT_EQ(d.index, 1);
    d = choose_device(false, 3, 4, std::string("cuda")); // torch.device("cuda"): the fresh process's current GPU
    EXPECT_TRUE(d.cuda);
    EXPECT_EQ(d.index, 0);
    EXPECT_FALSE(choose_device(false, 1, 4, std::string("cpu")).cuda); // a CPU worker of a job with GPUs
    EXPECT_FALSE(choose_device(false, 0, 0, std::string("cpu")).cuda);
}

TEST(DeviceChoice, BadValuesNamedWithTheVariable)
{
    std::string message;
    for (const char *bad : {"cuda:x", "cuda:", "cuda:-1", "cuda:1:2", "CUDA:0", "cuda:0 ", ":0", "cuda:128", "cpu:1"}) {
        EXPECT_EQ(refusal(bad, 4, &message), ACCEL_ERR_INVALID_ARGUMENT) << bad;
        EXPECT_NE(message.find(std::string("ACCELERATE_TORCH_DEVICE=") + bad), std::string::npos) << message;
    }
    EXPECT_EQ(refusal("mps", 4, &message), ACCEL_ERR_UNIMPLEMENTED);
    EXPECT_NE(message.find("ACCELERATE_TORCH_DEVICE=mps"), std::string::npos) << message;
    EXPECT_EQ(refusal("cuda:4", 4, &message), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(message.find("sees 4 GPUs (cuda:0..3)"), std::string::npos) << message;
    EXPECT_EQ(refusal("cuda:0", 0, &message), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(message.find("ACCELERATE_TORCH_DEVICE=cuda:0: this process sees 0 GPUs"), std::string::npos) << message;
}

} // namespace
} // namespace accel
