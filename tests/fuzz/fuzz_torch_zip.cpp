// A torch.save archive as a whole (the zip container, its records, data.pkl, the storages), as load_state
// reads optimizer.bin, scheduler.bin, scaler.pt and the RNG files.
#include "torch_file.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    accel::fuzz::text_of(data, size);
    accel::fuzz::write_scratch(data, size);
    accel::fuzz::load_scratch(); // each member's CRC-32 checked first (src/checkpointing/integrity.cpp)
    // Without the CRC check (ACCEL_CHECKPOINT_VERIFY=0) a mutated member reaches the reader behind it.
    setenv("ACCEL_CHECKPOINT_VERIFY", "0", 1);
    accel::fuzz::load_scratch();
    unsetenv("ACCEL_CHECKPOINT_VERIFY");
    return 0;
}
