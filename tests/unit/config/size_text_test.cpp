// config::parse_size_text (max_shard_size, max_memory_bytes): huggingface_hub's decimal units, Accelerate's
// binary units, bare byte counts, and refusals naming the key.
#include "common/error.hpp"
#include "config/checkpoint_options.hpp"

#include <gtest/gtest.h>

#include <string>

using accel::config::parse_size_text;

TEST(SizeText, DecimalUnitsAndBytes)
{
    EXPECT_EQ(parse_size_text("5GB", "k"), 5000000000ULL);
    EXPECT_EQ(parse_size_text("200mb", "k"), 200000000ULL); // case-insensitive, as huggingface_hub
    EXPECT_EQ(parse_size_text(" 10KB ", "k"), 10000ULL);
    EXPECT_EQ(parse_size_text("1TB", "k"), 1000000000000ULL);
    EXPECT_EQ(parse_size_text("12", "k"), 12ULL);
}

TEST(SizeText, BinaryUnitsAsAccelerate)
{
    // Accelerate 0.24.1's convert_file_size_to_int (save_model's max_shard_size): int(float(n) * 2**k).
    EXPECT_EQ(parse_size_text("2GiB", "k"), 2147483648ULL);
    EXPECT_EQ(parse_size_text("1.5MiB", "k"), 1572864ULL);
    EXPECT_EQ(parse_size_text("64kib", "k"), 65536ULL);
}

TEST(SizeText, RefusedNamingTheKey)
{
    for (const char *bad : {"", "GiB", "-1GiB", "abcMiB", "5XB", "0KB", "1e400GiB"}) {
        try {
            parse_size_text(bad, "options.max_shard_size");
            ADD_FAILURE() << "accepted \"" << bad << "\"";
        } catch (const accel::Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT) << bad;
            EXPECT_NE(std::string(e.what()).find("options.max_shard_size"), std::string::npos) << e.what();
        }
    }
}
