// A damaged sharded folder (metadata.json + rank files) that read_sharded_tensors must refuse as DATA_LOSS with a
// message containing `fragment` (ShardedFolder's and TpPieces' damaged-folder tests).
#pragma once

#include "catch_error.hpp"
#include "checkpointing/checkpointing.hpp"
#include "common/error.hpp"

#include <gtest/gtest.h>

#include <string>

inline void expect_data_loss(const std::string &dir, const std::string &fragment)
{
    const accel::Error e = catch_error([&] { accel::ckpt::read_sharded_tensors(dir); });
    EXPECT_EQ(e.code(), ACCEL_ERR_DATA_LOSS) << "expected DATA_LOSS containing " << fragment << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
}
